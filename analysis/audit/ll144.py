"""The tables of a NYC Local Law 144 bias audit (DCWP rules, 6 RCNY §5-300 and §5-301).

For an automated employment decision tool the rules ask, per sex category, per race/ethnicity
category and per intersectional category (sex × race/ethnicity):

* selection rate: selected individuals / individuals assessed in the category;
* for tools that only score, the scoring rate instead: the share of the category scoring above
  the median score of the whole sample;
* impact ratio: the category's rate over the highest rate among the categories in the calculation.

A category under 2% of the data may be left out of the impact-ratio calculation; its number of
individuals and its rate must still be published, so it keeps both here. Individuals whose
category is unknown are counted and reported, never placed in a category.

Plain pandas/numpy on a DataFrame; nothing here imports the engine.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

import numpy as np
import pandas as pd

SEX = "sex"
RACE_ETHNICITY = "race_ethnicity"
INTERSECTIONAL = "intersectional"

#: Category values read as "unknown" besides missing and empty ones (compared case-insensitively).
DEFAULT_UNKNOWN_VALUES: tuple[str, ...] = ("unknown",)
#: The four-fifths rule of thumb behind ``below_four_fifths``; LL144 itself sets no threshold.
FOUR_FIFTHS = 0.8

SELECTION_COLUMNS: tuple[str, ...] = (
    "n",
    "n_selected",
    "selection_rate",
    "impact_ratio",
    "share",
    "under_2pct",
    "excluded",
    "below_four_fifths",
)
SCORING_COLUMNS: tuple[str, ...] = (
    "n",
    "n_above_median",
    "scoring_rate",
    "impact_ratio",
    "share",
    "under_2pct",
    "excluded",
    "below_four_fifths",
)

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})
# Rates and shares are fractions k / n; an exact 4/5 or 1/50 must not flip on a rounding error.
_TOL = 1e-12
_HIT = "__ll144_hit__"


@dataclass(frozen=True)
class LL144Audit:
    """The tables of an LL144 bias audit and the counts published beside them.

    Attributes:
        tables: ``"sex"``, ``"race_ethnicity"`` and ``"intersectional"`` tables, only those whose
            columns were given (the intersectional one needs both). Columns: the ``by`` columns,
            the category column(s) under the caller's names, then ``SELECTION_COLUMNS`` or
            ``SCORING_COLUMNS``.
        unknown: Individuals assessed (outcome known) whose category is unknown, per table key,
            summed over the ``by`` strata.
        counts: One row per ``by`` stratum (a single row without ``by``): the ``by`` columns,
            ``n_total``, ``n_missing_outcome``, ``n_assessed``, ``unknown_<table key>`` per
            table and, when scoring, ``median_score``.
        n_total: Rows in the input.
        n_missing_outcome: Rows whose outcome (selected or score) is missing. They are in no
            calculation, including the unknown counts and the median score.
        metric: ``"selection_rate"`` or ``"scoring_rate"``.
        median_score: When scoring without ``by``, the median score of the whole sample (NaN if
            no score is known); None otherwise (each stratum's median is in ``counts``).
        threshold: Share under which a category is flagged ``under_2pct``.
        exclude_small: Whether flagged categories were left out of the impact ratios.
        merged: Per category column, each kept label and the spellings merged into it (labels
            that differ only in case or whitespace, e.g. ``"male "`` and ``"MALE"`` into
            ``"Male"``); empty when none were.
    """

    tables: dict[str, pd.DataFrame]
    unknown: dict[str, int]
    counts: pd.DataFrame
    n_total: int
    n_missing_outcome: int
    metric: str
    median_score: float | None
    threshold: float
    exclude_small: bool
    merged: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def n_assessed(self) -> int:
        """Rows with a known outcome."""
        return self.n_total - self.n_missing_outcome


def ll144_tables(
    df: pd.DataFrame,
    *,
    sex_col: str | None = None,
    race_col: str | None = None,
    selected_col: str | None = None,
    score_col: str | None = None,
    by: str | Sequence[str] = (),
    exclude_small: bool = False,
    threshold: float = 0.02,
    unknown_values: str | Iterable[str] = DEFAULT_UNKNOWN_VALUES,
    order: Mapping[str, Sequence[Hashable]] | None = None,
) -> LL144Audit:
    """Selection or scoring rates and impact ratios per sex, race/ethnicity and intersection.

    Each table row is one category present in the data (within each ``by`` stratum) with:
    ``n`` (individuals assessed in it), ``n_selected`` or ``n_above_median``, ``selection_rate``
    or ``scoring_rate``, ``impact_ratio`` (rate over the highest rate of the included categories
    of the same table and stratum; NaN when excluded or when that highest rate is 0), ``share``
    (``n`` over the individuals of known category in the table and stratum), ``under_2pct``
    (``share < threshold``; the name keeps the rules' 2% whatever ``threshold`` is), ``excluded``
    (``exclude_small`` and ``under_2pct``) and ``below_four_fifths`` (``impact_ratio < 0.8``, NA
    where the ratio is NaN; a convenience, not an LL144 criterion).

    Args:
        df: One row per individual assessed.
        sex_col: Column of sex categories.
        race_col: Column of race/ethnicity categories.
        selected_col: Column saying whether the tool selected (or advanced, or classified into the
            favourable group) the individual: bool, 0/1, or the strings ``"true"``/``"false"``/
            ``"1"``/``"0"`` (any case); missing or empty means the outcome is missing.
        score_col: Column of numeric scores, for tools that score rather than select. Exactly one
            of ``selected_col`` and ``score_col``. The median is over every individual with a
            known score (whatever their categories) in the stratum; scores equal to it are not
            above it.
        by: Columns to compute everything separately within, e.g. a model or a job; they lead
            every table and must have no missing value.
        exclude_small: Leave categories with ``share < threshold`` out of the impact ratios (the
            rules allow this; the audit must then justify it).
        threshold: The small-category share, 2% in the rules.
        unknown_values: Category values meaning "unknown", compared case-insensitively after
            trimming; missing and empty values are always unknown. Replaces the default.
        order: Row order of categories, per column name (sex, race or a ``by`` column); values
            not listed follow in order of first appearance, which is also the default.
            Intersectional rows are ordered by sex, then race/ethnicity.

    Returns:
        The tables and the counts of missing outcomes and unknown categories.

    Raises:
        ValueError: On a missing column, a column given twice, an outcome value that is not a
            selection (or not a number, for scores), a missing ``by`` value, or a bad argument.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a pandas DataFrame, not {type(df).__name__}")
    by_cols = [by] if isinstance(by, str) else list(by)
    _check_arguments(selected_col, score_col, sex_col, race_col, threshold)
    scoring = score_col is not None
    outcome_col = score_col if scoring else selected_col
    assert outcome_col is not None
    roles = {
        "sex_col": sex_col,
        "race_col": race_col,
        "score_col" if scoring else "selected_col": outcome_col,
    }
    roles.update({f"by column #{i + 1}": c for i, c in enumerate(by_cols)})
    _check_columns(df, {role: col for role, col in roles.items() if col is not None}, scoring)
    _refuse_missing_by_values(df, by_cols)
    order = dict(order or {})
    allowed = {c for c in (sex_col, race_col, *by_cols) if c is not None}
    stray = [key for key in order if key not in allowed]
    if stray:
        raise ValueError(f"order names {stray}, which are not the sex, race or by columns")
    if isinstance(unknown_values, str):
        unknown_values = (unknown_values,)
    tokens = frozenset({"", *(str(v).strip().casefold() for v in unknown_values)})

    data = df.reset_index(drop=True)
    merged = {}
    for col in (sex_col, race_col):
        if col is not None:
            data[col], merged[col] = merge_spellings(data[col])
    assessed, stratum, medians, hit = _outcome_hits(data, outcome_col, by_cols, scoring)

    known, keys = _known_categories(data, sex_col, race_col, tokens)

    ranks = {col: _ranks(data[col], order.get(col)) for col in allowed}
    tables = {}
    for name, cols in keys.items():
        rows = data.loc[assessed & known[name], [*by_cols, *cols]].assign(**{_HIT: hit})
        table = _rate_table(rows, by_cols, cols, scoring, threshold, exclude_small)
        tables[name] = _sort(table, [*by_cols, *cols], ranks)

    counts = _stratum_counts(data, by_cols, (assessed, known), (stratum, medians), scoring, ranks)

    return LL144Audit(
        tables=tables,
        unknown={name: int((assessed & ~mask).sum()) for name, mask in known.items()},
        counts=counts,
        n_total=len(data),
        n_missing_outcome=int((~assessed).sum()),
        metric="scoring_rate" if scoring else "selection_rate",
        median_score=float(medians.get(0, np.nan)) if scoring and not by_cols else None,
        threshold=threshold,
        exclude_small=exclude_small,
        merged={col: spellings for col, spellings in merged.items() if spellings},
    )


def _check_arguments(
    selected_col: str | None,
    score_col: str | None,
    sex_col: str | None,
    race_col: str | None,
    threshold: float,
) -> None:
    """Exactly one outcome column, at least one category column and a share in [0, 1)."""
    if (selected_col is None) == (score_col is None):
        raise ValueError(
            "give exactly one of selected_col (a tool that selects) and score_col "
            "(a tool that scores)"
        )
    if sex_col is None and race_col is None:
        raise ValueError("give sex_col, race_col or both")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold is a share of the data in [0, 1); got {threshold!r}")


def _refuse_missing_by_values(df: pd.DataFrame, by_cols: list[str]) -> None:
    """A row without its ``by`` value would fall out of the audit unseen."""
    for col in by_cols:
        n_missing = int(df[col].isna().sum())
        if n_missing:
            raise ValueError(
                f"by column {col!r} has {n_missing} missing value(s); fill them (e.g. with a "
                "label) so that no row falls out of the audit"
            )


def _outcome_hits(
    data: pd.DataFrame, outcome_col: str, by_cols: list[str], scoring: bool
) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """Rows with a known outcome, each row's stratum, the stratum's median score and whether
    the row counts as selected (or scored above the median)."""
    outcome = (
        _parse_scores(data[outcome_col], outcome_col)
        if scoring
        else _parse_selected(data[outcome_col], outcome_col)
    )
    assessed = outcome.notna()
    stratum = (
        data.groupby(by_cols, sort=False, observed=True).ngroup()
        if by_cols
        else pd.Series(0, index=data.index)
    )
    medians = outcome[assessed].groupby(stratum[assessed]).median()
    # Strictly above: the rules count individuals scoring above the median, not at it.
    hit = outcome > stratum.map(medians) if scoring else outcome == 1
    return assessed, stratum, medians, hit


def _known_categories(
    data: pd.DataFrame, sex_col: str | None, race_col: str | None, tokens: frozenset[str]
) -> tuple[dict[str, pd.Series], dict[str, list[str]]]:
    """Per table (sex, race/ethnicity, intersectional): rows of known category, and the
    category columns."""
    known: dict[str, pd.Series] = {}
    keys: dict[str, list[str]] = {}
    if sex_col is not None:
        known[SEX] = ~_unknown_mask(data[sex_col], tokens)
        keys[SEX] = [sex_col]
    if race_col is not None:
        known[RACE_ETHNICITY] = ~_unknown_mask(data[race_col], tokens)
        keys[RACE_ETHNICITY] = [race_col]
    if sex_col is not None and race_col is not None:
        known[INTERSECTIONAL] = known[SEX] & known[RACE_ETHNICITY]
        keys[INTERSECTIONAL] = [sex_col, race_col]
    return known, keys


def _stratum_counts(
    data: pd.DataFrame,
    by_cols: list[str],
    rows: tuple[pd.Series, dict[str, pd.Series]],
    strata: tuple[pd.Series, pd.Series],
    scoring: bool,
    ranks: dict[str, dict[Hashable, int]],
) -> pd.DataFrame:
    """Rows, missing outcomes, assessed rows and unknown categories per ``by`` stratum (one
    row without ``by``), with the median score when scoring."""
    assessed, known = rows
    stratum, medians = strata
    indicators = pd.DataFrame(
        {
            "n_total": 1,
            "n_missing_outcome": (~assessed).astype(int),
            "n_assessed": assessed.astype(int),
            **{f"unknown_{name}": (assessed & ~mask).astype(int) for name, mask in known.items()},
        },
        index=data.index,
    )
    if by_cols:
        counts = indicators.groupby(stratum).sum()
        counts = data[by_cols].groupby(stratum).first().join(counts)
        if scoring:
            counts["median_score"] = medians.reindex(counts.index)
        counts = _sort(counts.reset_index(drop=True), by_cols, ranks)
    else:
        counts = indicators.sum().to_frame().T.astype(int)
        if scoring:
            counts["median_score"] = float(medians.get(0, np.nan))
    return counts


def merge_spellings(values: pd.Series) -> tuple[pd.Series, dict[str, list[str]]]:
    """One label for each set of labels that differ only in case or whitespace.

    ``"Male"``, ``"male "`` and ``"MALE"`` are one category, written as the commonest spelling
    (trimmed; the first seen on a tie); a typing slip must not split a category in three.

    Returns:
        The values relabelled, and each kept label with the other spellings merged into it.
    """
    text = values.map(lambda v: v if isinstance(v, str) else None).dropna()
    if text.empty:
        return values, {}
    keys = text.map(lambda v: " ".join(v.split()).casefold())
    counts = text.groupby([keys, text], sort=False).size()
    canonical: dict[str, str] = {}
    spellings: dict[str, list[str]] = {}
    for (key, spelling), _ in counts.sort_values(ascending=False, kind="stable").items():
        canonical.setdefault(key, " ".join(spelling.split()))
        spellings.setdefault(key, []).append(spelling)
    relabelled = values.copy()
    relabelled.loc[text.index] = keys.map(canonical)
    merged = {
        canonical[key]: [s for s in group if s != canonical[key]]
        for key, group in spellings.items()
        if len(group) > 1 or group[0] != canonical[key]
    }
    return relabelled, {label: spell for label, spell in merged.items() if spell}


def date_range(values: Iterable[object]) -> tuple[str, str] | None:
    """Earliest and latest date of a column of ISO 8601 dates or datetimes.

    The rules ask for the dates of the data an audit used; this reads them from the data itself.

    Args:
        values: ISO strings (``2024-03-01``, ``2024-03-01T09:30:00Z``) or ``date``/``datetime``/
            ``pd.Timestamp``/``np.datetime64`` values. Missing values and empty strings are
            skipped. A datetime counts on its calendar date as written, whatever its offset.

    Returns:
        ``(first, last)`` as ISO dates (``YYYY-MM-DD``), or None when there is no date.

    Raises:
        ValueError: Naming the first value that is not an ISO date or datetime.
    """
    dates = [_to_date(v) for v in values if not _is_missing(v)]
    if not dates:
        return None
    return min(dates).isoformat(), max(dates).isoformat()


def _to_date(value: object) -> date:
    if isinstance(value, datetime):  # pd.Timestamp included; before date, its base class
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, np.datetime64):
        return pd.Timestamp(value).date()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip()).date()
        except ValueError:
            pass
    raise ValueError(f"not an ISO 8601 date or datetime: {value!r}")


def _check_columns(df: pd.DataFrame, roles: Mapping[str, str], scoring: bool) -> None:
    for role, col in roles.items():
        if col not in df.columns:
            raise ValueError(f"{role} {col!r} is not a column of the data: {list(df.columns)}")
    seen: dict[str, str] = {}
    for role, col in roles.items():
        if col in seen:
            raise ValueError(f"column {col!r} is given both as {seen[col]} and as {role}")
        seen[col] = role
    # Category and by columns reappear in the tables, beside the computed columns.
    taken = set(SCORING_COLUMNS if scoring else SELECTION_COLUMNS)
    for role, col in roles.items():
        if role != ("score_col" if scoring else "selected_col") and col in taken:
            raise ValueError(f"{role} {col!r} has the name of an output column; rename it first")


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        # Array-likes: not a missing scalar, and the parsers reject them by value.
        return False


def _missing_mask(values: pd.Series) -> pd.Series:
    blank = values.map(lambda v: isinstance(v, str) and not v.strip()).astype(bool)
    return values.isna() | blank


def _examples(values: pd.Series) -> str:
    shown = list(dict.fromkeys(values.tolist()))[:3]
    return ", ".join(repr(v) for v in shown)


def _parse_selected(values: pd.Series, col: str) -> pd.Series:
    """1.0 selected, 0.0 not selected, NaN missing."""
    missing = _missing_mask(values)
    present = values[~missing]
    if pd.api.types.is_bool_dtype(present.dtype):
        parsed = present.astype(bool).astype(float)
    elif pd.api.types.is_numeric_dtype(present.dtype):
        parsed = present.astype(float).where(present.isin([0, 1]))
    else:
        parsed = present.map(_selection_token).astype(float)
    bad = parsed.isna()
    if bad.any():
        raise ValueError(
            f"selected_col {col!r} must hold booleans, 0/1 or 'true'/'false'/'1'/'0'; "
            f"{int(bad.sum())} value(s) are not, e.g. {_examples(present[bad])}"
        )
    return parsed.reindex(values.index)


def _selection_token(value: object) -> float:
    if isinstance(value, bool | np.bool_):
        return float(value)
    if isinstance(value, int | np.integer | float | np.floating):
        return float(value) if value in (0, 1) else np.nan
    if isinstance(value, str):
        token = value.strip().casefold()
        if token in _TRUE:
            return 1.0
        if token in _FALSE:
            return 0.0
    return np.nan


def _parse_scores(values: pd.Series, col: str) -> pd.Series:
    missing = _missing_mask(values)
    present = values[~missing]
    if pd.api.types.is_bool_dtype(present.dtype):
        raise ValueError(f"score_col {col!r} holds booleans; use selected_col for a selection")
    parsed = pd.to_numeric(present, errors="coerce").astype(float)
    bad = ~np.isfinite(parsed)
    if bad.any():
        raise ValueError(
            f"score_col {col!r} must hold finite numbers; {int(bad.sum())} value(s) are not, "
            f"e.g. {_examples(present[bad])}"
        )
    return parsed.reindex(values.index)


def _unknown_mask(values: pd.Series, tokens: frozenset[str]) -> pd.Series:
    named = values.map(lambda v: not _is_missing(v) and str(v).strip().casefold() in tokens)
    return _missing_mask(values) | named.astype(bool)


def _ranks(values: pd.Series, given: Sequence[Hashable] | None) -> dict[Hashable, int]:
    listed = list(dict.fromkeys(given or ()))
    seen = [v for v in pd.unique(values.dropna()) if v not in set(listed)]
    return {v: i for i, v in enumerate([*listed, *seen])}


def _sort(table: pd.DataFrame, cols: Sequence[str], ranks: Mapping[str, Mapping]) -> pd.DataFrame:
    if table.empty:
        return table.reset_index(drop=True)
    keys = pd.DataFrame({f"r{i}": table[c].map(ranks[c]) for i, c in enumerate(cols)})
    position = keys.sort_values(list(keys.columns), kind="stable").index
    return table.loc[position].reset_index(drop=True)


def _per_stratum(table: pd.DataFrame, by_cols: Sequence[str], values: pd.Series, how: str):
    if not by_cols:
        return pd.Series(values.agg(how), index=table.index, dtype=float)
    return values.groupby([table[c] for c in by_cols], sort=False, observed=True).transform(how)


def _rate_table(
    rows: pd.DataFrame,
    by_cols: Sequence[str],
    cols: Sequence[str],
    scoring: bool,
    threshold: float,
    exclude_small: bool,
) -> pd.DataFrame:
    count_col, rate_col = (
        ("n_above_median", "scoring_rate") if scoring else ("n_selected", "selection_rate")
    )
    grouped = rows.groupby([*by_cols, *cols], sort=False, observed=True)[_HIT]
    table = pd.DataFrame({"n": grouped.size(), count_col: grouped.sum()}).reset_index()
    table["n"] = table["n"].astype("int64")
    table[count_col] = table[count_col].astype("int64")
    rate = table[count_col] / table["n"]
    share = table["n"] / _per_stratum(table, by_cols, table["n"].astype(float), "sum")
    under = share < threshold - _TOL
    excluded = under & exclude_small
    top = _per_stratum(table, by_cols, rate.where(~excluded), "max")
    # A highest rate of 0 leaves every ratio undefined; NaN says so rather than a made-up 1.
    ratio = (rate / top.where(top > 0)).where(~excluded)
    four_fifths = pd.Series(ratio < FOUR_FIFTHS - _TOL, dtype="boolean").mask(ratio.isna())
    table[rate_col] = rate.astype(float)
    table["impact_ratio"] = ratio.astype(float)
    table["share"] = share.astype(float)
    table["under_2pct"] = under.astype(bool)
    table["excluded"] = excluded.astype(bool)
    table["below_four_fifths"] = four_fifths
    return table
