"""Checks on a decisions table made outside biasim, before its disparities are computed.

A table typed or exported by hand has problems a run's own results never have: outcome labels
nobody declared (``"Reject "``, ``"maybe"``), rows without a group, a name filed under two
groups, groups too small to test. :func:`check_decisions` turns each into either an error that
names the values at fault or a counted exclusion, so that no row is lost or miscoded silently:

* every outcome value is the positive one, a declared negative (not selected), a declared invalid
  one (excluded and counted), or missing (excluded and counted); any other value is an error. A
  table whose outcome has exactly one value besides the positive and invalid ones needs no
  negatives declared: that value is the negative.
* rows missing a group, stratum or unit value are excluded and counted per column;
* a unit (e.g. a name, permuted as a whole) in two groups is an error;
* groups under ``min_group_share`` of the decided rows are left out and reported.

Plain pandas on a DataFrame; nothing here imports the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasim.analysis.stats.clusters import repeating_columns
from biasim.analysis.stats.disparity import INVALID

#: Columns of :attr:`CheckedDecisions.exclusions`.
EXCLUSION_COLUMNS: tuple[str, ...] = ("reason", "column", "value", "n")
# Shares are fractions k / n; an exact threshold such as 1/50 must not flip on a rounding error.
_TOL = 1e-12
# Why a row is in no test, in the order a row's reason is picked.
_REASONS: tuple[str, ...] = (
    "missing_group",
    "missing_stratum",
    "missing_unit",
    "small_group",
    "missing_outcome",
    "invalid_outcome",
)
# Undeclared outcome values named in an error message; the rest are counted.
_SHOWN = 20


class DecisionsError(ValueError):
    """A decisions table that cannot be analysed as given.

    Attributes:
        column: The column at fault, if the fault is in the data.
        argument: The argument of :func:`check_decisions` at fault otherwise, e.g. ``negative``.
    """

    def __init__(self, message: str, column: str | None = None, argument: str | None = None):
        super().__init__(message)
        self.column = column
        self.argument = argument


@dataclass(frozen=True)
class CheckedDecisions:
    """A decisions table ready for ``analysis.disparity``, and what was left out of it.

    Attributes:
        data: The rows with every group, stratum and unit value present, in a group that was
            kept. Their outcome is the positive value, a negative one, an invalid one or missing
            (blank strings read as missing), so that the disparity functions, given the same
            ``invalid`` values, count the last two per group as excluded answers.
        exclusions: One row per reason a row is in no test, with ``EXCLUSION_COLUMNS``:
            ``reason`` (``missing_group``, ``missing_stratum``, ``missing_unit``,
            ``small_group``, ``missing_outcome`` or ``invalid_outcome``), ``column`` (the column
            the reason is about; the group columns joined by commas for ``small_group``),
            ``value`` (the invalid outcome value or the small group's label, else empty) and
            ``n`` (rows). Each row counts once, under the first reason in that order; reasons
            with no row are not listed.
        small_groups: The groups left out for their size: the group columns, ``n`` (their
            decided rows), ``share`` (of all decided rows with every key present) and
            ``n_rows`` (their rows of any outcome, all excluded).
        negative: The negative outcome values, as given or (when not given) found.
        n_total: Rows in the input.
    """

    data: pd.DataFrame
    exclusions: pd.DataFrame
    small_groups: pd.DataFrame
    negative: tuple[object, ...]
    n_total: int

    @property
    def n_used(self) -> int:
        """Rows with a positive or negative outcome that every test sees."""
        return self.n_total - int(self.exclusions["n"].sum())


def check_decisions(
    df: pd.DataFrame,
    group_cols: str | Sequence[str],
    outcome_col: str,
    *,
    positive: object,
    negative: Sequence[object] | None = None,
    invalid: Sequence[object] = INVALID,
    unit_col: str | None = None,
    stratum_col: str | None = None,
    min_group_share: float = 0.0,
) -> CheckedDecisions:
    """Check a decisions table and split it into the rows to analyse and counted exclusions.

    Args:
        df: One row per decision.
        group_cols: Column(s) defining the groups.
        outcome_col: Column holding the decision.
        positive: The favourable decision, e.g. ``"accept"``.
        negative: The decisions meaning "not selected". None accepts a table whose outcome has
            at most one value besides ``positive`` and ``invalid``, which is then the negative.
        invalid: Outcome values that mark an unusable answer (excluded and counted).
        unit_col: Column of the unit permuted as a whole (e.g. the name): each unit must belong
            to one group.
        stratum_col: Column of strata (e.g. the job).
        min_group_share: Leave out groups with a smaller share of the decided rows (0 keeps
            every group).

    Returns:
        The rows to analyse, the exclusions by reason and the groups left out.

    Raises:
        DecisionsError: A column is missing; ``positive``, ``negative`` and ``invalid`` overlap;
            the outcome holds values that are none of them (listed with their counts); a unit
            is in two groups; or no group reaches ``min_group_share``.
        ValueError: ``min_group_share`` is not in [0, 1].
    """
    keys = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    if not 0 <= min_group_share <= 1:
        raise ValueError(f"min_group_share is a share of the rows in [0, 1]; got {min_group_share}")
    for col in [*keys, outcome_col, *(c for c in (stratum_col, unit_col) if c)]:
        if col not in df.columns:
            raise DecisionsError(f"no such column; columns: {', '.join(map(str, df.columns))}", col)
    invalid = list(invalid)
    negative = _negatives(df[outcome_col], outcome_col, positive, negative, invalid)

    data = df.reset_index(drop=True)
    outcome = data[outcome_col].mask(na_like(data[outcome_col], [positive, *negative, *invalid]))
    reason = pd.Series("", index=data.index, dtype=object)
    column = pd.Series("", index=data.index, dtype=object)
    for why, cols in (
        ("missing_group", keys),
        ("missing_stratum", [stratum_col] if stratum_col else []),
        ("missing_unit", [unit_col] if unit_col else []),
    ):
        for col in cols:
            fresh = _blank(data[col]) & (reason == "")
            reason[fresh], column[fresh] = why, col
    keyed = reason == ""
    if unit_col:
        _one_group_per_unit(data[keyed], keys, unit_col)

    decided = keyed & (outcome.eq(positive) | outcome.isin(negative))
    small = _small_groups(data.loc[keyed, keys], decided[keyed], min_group_share)
    label = pd.Series("", index=data.index, dtype=object)
    groups = pd.MultiIndex.from_frame(data[keys])
    dropped = keyed & groups.isin(pd.MultiIndex.from_frame(small[keys]))
    reason[dropped], column[dropped] = "small_group", ",".join(keys)
    label[dropped] = _labels(data.loc[dropped, keys])
    n_rows = data[dropped].groupby(keys, sort=True).size()
    small["n_rows"] = n_rows.reindex(pd.MultiIndex.from_frame(small[keys])).to_numpy(np.int64)
    kept = reason == ""
    missing = kept & outcome.isna()
    reason[missing], column[missing] = "missing_outcome", outcome_col
    label[missing] = data.loc[missing, outcome_col].fillna("")  # which NA-like text, if any
    bad = kept & outcome.isin(invalid)
    reason[bad], column[bad], label[bad] = "invalid_outcome", outcome_col, outcome[bad]

    return CheckedDecisions(
        data=data[kept].assign(**{outcome_col: outcome[kept]}).reset_index(drop=True),
        exclusions=_exclusion_table(reason, column, label),
        small_groups=small,
        negative=tuple(negative),
        n_total=len(data),
    )


#: Outcome texts that mean "no value" in exported tables (compared without case or spaces):
#: they are missing outcomes, excluded and counted, never a decision.
NA_LIKE = frozenset({"nan", "na", "n/a", "null", "none", "<na>"})


def na_like(values: pd.Series, declared: Sequence[object] = ()) -> pd.Series:
    """Which ``values`` are missing or NA-like text (``NaN``, ``NA``, ``null``, ``N/A``,
    ``None``), unless the text is one of the ``declared`` values."""
    texts = values.map(lambda v: v.strip().lower() if isinstance(v, str) else "")
    return _blank(values) | (texts.isin(NA_LIKE) & ~values.isin(list(declared)))


def _blank(values: pd.Series) -> pd.Series:
    """Missing values and strings of nothing but whitespace."""
    blank = values.map(lambda v: isinstance(v, str) and not v.strip()).astype(bool)
    return values.isna() | blank


def _negatives(
    outcome: pd.Series,
    outcome_col: str,
    positive: object,
    negative: Sequence[object] | None,
    invalid: Sequence[object],
) -> list[object]:
    """The negative values: as given, or the one value left; every other value is an error."""
    roles = {"negative": list(negative or []), "invalid": list(invalid)}
    for name, values in roles.items():
        if positive in values:
            raise DecisionsError(f"the positive value {positive!r} is also {name}", argument=name)
    both = sorted(map(str, set(roles["negative"]) & set(roles["invalid"])))
    if both:
        raise DecisionsError(f"{', '.join(both)}: both negative and invalid", argument="negative")
    declared = [positive, *roles["negative"], *roles["invalid"]]
    counts = outcome[~na_like(outcome, declared)].value_counts(sort=True)
    rest = counts[~counts.index.isin([positive, *roles["negative"], *roles["invalid"]])]
    if negative is None and len(rest) <= 1:
        return list(rest.index)
    if len(rest):
        shown = ", ".join(f"{v!r} ({n})" for v, n in rest.head(_SHOWN).items())
        more = f" and {len(rest) - _SHOWN} more" if len(rest) > _SHOWN else ""
        declared = f"positive: {positive!r}" + "".join(
            f"; {name}: {', '.join(map(repr, values))}" for name, values in roles.items() if values
        )
        raise DecisionsError(
            f"undeclared values {shown}{more} ({declared}); declare each as negative (not "
            "selected) or invalid (excluded and counted)",
            outcome_col,
        )
    return roles["negative"]


def undeclared_units(
    data: pd.DataFrame, group_cols: str | Sequence[str], skip: Sequence[str | None]
) -> list[str]:
    """Columns of a checked decisions table that look like units repeating within the groups
    (a name, an applicant or manager id: some value holds several rows, each value lies in one
    group, every group has several values), besides the ``skip`` columns (the outcome, the
    stratum). Without ``--unit-col`` every test treats rows as independent; rows sharing such
    a value are not, and the tests reject too often (the four-fifths chance printed 2.7 % where
    15 % of null tables flagged, with 10 decisions per name)."""
    keys = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    framed = data.assign(__group__=_labels(data[keys]))
    return repeating_columns(framed, "__group__", {*keys, *(c for c in skip if c)})


def independence_warning(columns: Sequence[str]) -> str:
    """What ``analyze --decisions`` prints when :func:`undeclared_units` finds columns."""
    named = ", ".join(f"`{c}`" for c in columns)
    return (
        f"warning: column(s) {named} repeat within the groups and no --unit-col was given: the "
        "DPD test, the group-vs-population tests, the validity test, the exclusion bounds and "
        "the four-fifths chance treat every row as independent, and reject too often if rows "
        f"sharing a value share a decision-maker or applicant; give --unit-col {columns[0]}"
    )


def _one_group_per_unit(data: pd.DataFrame, keys: list[str], unit_col: str) -> None:
    pairs = data[[unit_col, *keys]].drop_duplicates()
    per_unit = pairs[unit_col].value_counts(sort=False)
    shared = per_unit[per_unit > 1]
    if len(shared):
        # The first such unit in file order, with every group it is filed under.
        unit = pairs.loc[pairs[unit_col].isin(shared.index), unit_col].iloc[0]
        found = _labels(pairs.loc[pairs[unit_col] == unit, keys]).tolist()
        others = f" ({len(shared) - 1} other unit(s) too)" if len(shared) > 1 else ""
        raise DecisionsError(
            f"unit {unit!r} is in {len(found)} groups of {', '.join(keys)}: "
            f"{'; '.join(found)}{others}; a unit is permuted as a whole, so it must belong to "
            "exactly one group",
            unit_col,
        )


def _small_groups(groups: pd.DataFrame, decided: pd.Series, min_share: float) -> pd.DataFrame:
    """Groups whose share of the decided rows is under ``min_share``: keys, ``n``, ``share``.

    A group whose every answer is excluded has a share of 0, so it is small too.
    """
    keys = list(groups.columns)
    counts = decided.groupby([groups[k] for k in keys], sort=True).sum().rename("n").reset_index()
    counts["n"] = counts["n"].astype(np.int64)
    counts["share"] = counts["n"] / max(int(decided.sum()), 1)
    small = counts[counts["share"] < min_share - _TOL].reset_index(drop=True)
    if len(counts) and len(small) == len(counts):
        raise DecisionsError(
            f"no group has {min_share:.1%} of the decided rows (the largest has "
            f"{counts['share'].max():.1%})",
            argument="min_group_share",
        )
    return small


def _labels(groups: pd.DataFrame) -> pd.Series:
    """A group's values joined by commas, e.g. ``"Black, female"``."""
    joined = [", ".join(map(str, row)) for row in groups.itertuples(index=False)]
    return pd.Series(joined, index=groups.index, dtype=object)


def _exclusion_table(reason: pd.Series, column: pd.Series, value: pd.Series) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            "reason": pd.Categorical(reason, categories=[*_REASONS, ""], ordered=True),
            "column": column,
            "value": value.astype(str),
        }
    )
    table = out[reason != ""].groupby(["reason", "column", "value"], observed=True, sort=True)
    table = table.size().rename("n").reset_index()
    return table.astype({"reason": str, "n": np.int64})[list(EXCLUSION_COLUMNS)]
