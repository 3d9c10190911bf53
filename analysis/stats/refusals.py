"""Refusals and invalid answers: who is excluded, and what the headline would be without them.

Rates over valid answers assume that an answer is excluded at random. A model that refuses some
group's rejections instead of writing them (missing not at random) makes that group look
accepted more, although no decision differs. Two things guard a reviewer against that:

* the **validity test**: the rate of valid answers by group, tested with the design's unit
  (a name or persona is relabelled as a whole; without a unit, answers are independent draws);
* the **exclusion bounds**: the headline recomputed with every excluded answer counted as
  negative and, again, as positive. A difference that survives both is not an artefact of who
  was excluded, whatever the reason; one that vanishes in either "includes parity".

Plain functions over DataFrames; the tests reuse ``analysis.stats.parity`` and
``analysis.stats.permutation``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasim.analysis.stats.parity import parity_test, wilson_interval
from biasim.analysis.stats.permutation import parity_permutation_test

#: How excluded answers are treated: left out (the headline), counted as the negative outcome,
#: counted as the positive one.
SCENARIOS: tuple[str, ...] = ("valid_only", "excluded_as_negative", "excluded_as_positive")
#: The outcome given to an excluded answer counted as negative (never a real label).
_NEGATIVE = "__excluded_negative__"


def excluded(
    df: pd.DataFrame, outcome_col: str, invalid: Sequence[object], valid: str | None = None
) -> np.ndarray:
    """Rows whose answer is excluded: outcome missing or invalid, or ``valid`` false."""
    outcome = df[outcome_col]
    out = outcome.isna() | outcome.isin(list(invalid))
    if valid is not None:
        out |= ~df[valid].fillna(False).astype(bool)
    return out.to_numpy(dtype=bool)


def with_excluded_as(
    df: pd.DataFrame,
    outcome_col: str,
    positive: object,
    scenario: str,
    invalid: Sequence[object],
    valid: str | None = None,
) -> pd.DataFrame:
    """``df`` with every excluded answer recoded as ``scenario`` says (a copy; unchanged for
    ``valid_only``). The recoded rows are valid, so every test of the module sees them."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario is one of {', '.join(SCENARIOS)}; got {scenario!r}")
    if scenario == "valid_only":
        return df
    gone = excluded(df, outcome_col, invalid, valid)
    value = positive if scenario == "excluded_as_positive" else _NEGATIVE
    out = df.copy()
    out[outcome_col] = out[outcome_col].astype(object).where(~gone, value)
    if valid is not None:
        out[valid] = True
    return out


@dataclass(frozen=True)
class UnitCounts:
    """Per-unit counts of a yes/no event, ready for a parity test.

    Attributes:
        n: Rows per unit. k: Events per unit. group: Group code per unit.
        groups: The group values, one row per code. unit: What a unit is, e.g. ``"name"``.
    """

    n: np.ndarray
    k: np.ndarray
    group: np.ndarray
    groups: pd.DataFrame
    unit: str


def unit_counts(
    df: pd.DataFrame, keys: list[str], event: np.ndarray, unit_col: str | None
) -> UnitCounts:
    """Count ``event`` per unit (per row without ``unit_col``), rows with every key present."""
    use = df[keys].notna().all(axis=1).to_numpy().copy()
    if unit_col:
        use &= df[unit_col].notna().to_numpy()
    data = df.loc[use, keys].assign(__event__=event[use].astype(np.int64))
    data["__unit__"] = df.loc[use, unit_col].to_numpy() if unit_col else np.arange(use.sum())
    per = data.groupby([*keys, "__unit__"], sort=True)["__event__"].agg(["size", "sum"])
    per = per.reset_index()
    groups = per[keys].drop_duplicates().reset_index(drop=True)
    # `per` is sorted by the keys, so their sorted group numbers follow `groups`' order.
    code = per.groupby(keys, sort=True).ngroup()
    return UnitCounts(
        n=per["size"].to_numpy(np.int64),
        k=per["sum"].to_numpy(np.int64),
        group=code.to_numpy(np.int64),
        groups=groups,
        unit=unit_col or "answer",
    )


def rate_gap_test(
    counts: UnitCounts, *, alpha: float, n_permutations: int, seed: int
) -> tuple[float, float, str]:
    """Largest minus smallest group rate of the event, its p-value and the test's name.

    Units (names, personas) are relabelled as a whole; answers without a unit are independent
    binomial draws. NaN when fewer than two groups have a row.
    """
    n_groups = len(counts.groups)
    if n_groups < 2:
        return np.nan, np.nan, "not tested: fewer than two groups"
    if counts.unit == "answer":
        n = np.bincount(counts.group, weights=counts.n, minlength=n_groups).astype(np.int64)
        k = np.bincount(counts.group, weights=counts.k, minlength=n_groups).astype(np.int64)
        test = parity_test(n, k, alpha=alpha, n_simulations=n_permutations, seed=seed)
        return test.dpd, test.p_value, f"binomial null, unit: answer, {int(n.sum())} answers"
    test = parity_permutation_test(
        counts.n, counts.k, counts.group, alpha=alpha, n_permutations=n_permutations, seed=seed
    )
    return (
        test.dpd,
        test.p_value,
        f"permutation of {counts.unit} labels, unit: {counts.unit}, {counts.n.size} units",
    )


def validity_rates(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    *,
    invalid: Sequence[object],
    valid: str | None = None,
) -> pd.DataFrame:
    """Valid answers by group: the keys, ``n_rows``, ``n_valid``, ``n_excluded``,
    ``validity_rate`` and its Wilson 95% interval (``ci_low``, ``ci_high``)."""
    ok = ~excluded(df, outcome_col, invalid, valid)
    data = df[keys].assign(__ok__=ok.astype(np.int64)).dropna(subset=keys)
    grouped = data.groupby(keys, sort=True)["__ok__"]
    out = pd.DataFrame({"n_rows": grouped.size(), "n_valid": grouped.sum()}).reset_index()
    out["n_excluded"] = out["n_rows"] - out["n_valid"]
    out["validity_rate"] = out["n_valid"] / out["n_rows"]
    out["ci_low"], out["ci_high"] = wilson_interval(out["n_valid"], out["n_rows"])
    return out


def validity_test(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    *,
    invalid: Sequence[object],
    valid: str | None = None,
    unit_col: str | None = None,
    alpha: float = 0.05,
    n_permutations: int = 5000,
    seed: int = 0,
) -> dict[str, float | str]:
    """Do groups differ in how often their answers are valid? The largest minus the smallest
    validity rate (``validity_gap``), its ``validity_p_value`` and ``validity_test`` (which
    null and which unit)."""
    ok = ~excluded(df, outcome_col, invalid, valid)
    counts = unit_counts(df, keys, ok, unit_col)
    gap, p, test = rate_gap_test(counts, alpha=alpha, n_permutations=n_permutations, seed=seed)
    return {"validity_gap": gap, "validity_p_value": p, "validity_test": test}


def exclusion_bounds(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    positive: object,
    *,
    invalid: Sequence[object],
    valid: str | None = None,
    unit_col: str | None = None,
    alpha: float = 0.05,
    n_permutations: int = 5000,
    seed: int = 0,
) -> pd.DataFrame:
    """The DPD among valid answers and with every excluded answer counted negative, then positive.

    Each scenario is tested with the same unit (:func:`rate_gap_test`). ``gap`` follows the
    groups that are highest and lowest among valid answers (``highest``, ``lowest``) into
    every scenario: a gap at or below 0 in one of them means the valid-only ordering does not
    survive that treatment of the excluded answers.

    Returns:
        One row per scenario (:data:`SCENARIOS`): ``scenario``, ``dpd``, ``p_value``, ``test``,
        ``highest``, ``lowest``, ``gap``.
    """
    rows, order = [], None
    for scenario in SCENARIOS:
        data = with_excluded_as(df, outcome_col, positive, scenario, invalid, valid)
        ok = ~excluded(data, outcome_col, invalid, valid)
        hit = (data[outcome_col] == positive).to_numpy(dtype=bool)
        counts = unit_counts(data.loc[ok], keys, hit[ok], unit_col)
        dpd, p, test = rate_gap_test(counts, alpha=alpha, n_permutations=n_permutations, seed=seed)
        n = np.bincount(counts.group, weights=counts.n, minlength=len(counts.groups))
        k = np.bincount(counts.group, weights=counts.k, minlength=len(counts.groups))
        rate = pd.Series(k / np.maximum(n, 1), index=_labels(counts.groups))
        if order is None:
            order = (rate.idxmax(), rate.idxmin()) if len(rate) else ("", "")
        gap = rate.get(order[0], np.nan) - rate.get(order[1], np.nan) if len(rate) else np.nan
        rows.append((scenario, dpd, p, test, *order, float(gap)))
    columns = ["scenario", "dpd", "p_value", "test", "highest", "lowest", "gap"]
    return pd.DataFrame(rows, columns=columns)


def bounds_include_parity(bounds: pd.DataFrame, alpha: float = 0.05) -> bool:
    """Whether some treatment of the excluded answers leaves no significant gap in the
    valid-only direction (a tie, a reversal, or a p-value at or above ``alpha``)."""
    if bounds.empty or bounds["p_value"].isna().all():
        return True
    return bool(((bounds["gap"] <= 1e-12) | ~(bounds["p_value"] < alpha)).any())


def bounds_sentence(bounds: pd.DataFrame, alpha: float = 0.05, what: str = "DPD") -> str:
    """The headline's sentence on the bounds, e.g. "the DPD among valid answers is 0.20
    (p = 0.001); if excluded answers were negative it would be 0.02 (p = 0.61), if positive
    0.25 (p < 0.001): the bounds include parity"."""
    row = bounds.set_index("scenario")
    if row["dpd"].isna().all():
        return f"the {what} is not tested (fewer than two groups)"

    def part(scenario: str) -> str:
        return f"{row.at[scenario, 'dpd']:.3f} (p {_p(row.at[scenario, 'p_value'])})"

    text = (
        f"the {what} among valid answers is {part('valid_only')}; if excluded answers were "
        f"negative it would be {part('excluded_as_negative')}, if positive "
        f"{part('excluded_as_positive')}"
    )
    if bounds_include_parity(bounds, alpha):
        return text + ": the bounds include parity, so the disparity may come from who is excluded"
    return text + ": the bounds exclude parity"


def group_bounds(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    positive: object,
    *,
    invalid: Sequence[object],
    valid: str | None = None,
    unit_col: str | None = None,
    threshold: float = 0.8,
    adjust: str = "holm",
    alpha: float = 0.05,
    n_permutations: int = 5000,
    seed: int = 0,
) -> pd.DataFrame:
    """Each group's impact ratio and its test against the population, in every scenario.

    The test is ``disparity.permutation_vs_population`` with the same unit as the headline
    (whole ``unit_col`` values, else single answers), adjusted over the groups by ``adjust``.

    Returns:
        One row per group with answers: the keys, and per scenario ``s`` of :data:`SCENARIOS`
        ``rate_<s>``, ``impact_ratio_<s>`` and ``p_adjusted_<s>``; ``flag_holds`` (below
        ``threshold`` in every scenario), ``direction`` among valid answers (``higher`` /
        ``lower`` than the population when significant, else empty) and ``direction_holds``
        (significant in that direction in every scenario).
    """
    from biasim.analysis.stats.disparity import adjust_family, permutation_vs_population

    out: pd.DataFrame | None = None
    for scenario in SCENARIOS:
        data = with_excluded_as(df, outcome_col, positive, scenario, invalid, valid)
        tests = permutation_vs_population(
            data,
            keys,
            outcome_col,
            positive,
            unit="name" if unit_col else "email",
            unit_col=unit_col or "name",
            n_permutations=n_permutations,
            seed=seed,
            valid=valid,
            invalid=invalid,
            alpha=alpha,
        )
        tests = adjust_family(tests, "p_two_sided", adjust)
        rate = tests["rate"].to_numpy(dtype=float)
        top = rate.max() if rate.size else np.nan
        part = tests[keys].assign(
            **{
                f"rate_{scenario}": rate,
                f"impact_ratio_{scenario}": rate / top if top > 0 else np.ones_like(rate),
                f"p_adjusted_{scenario}": tests["p_adjusted"],
                f"_d_{scenario}": tests["d"],
            }
        )
        out = part if out is None else out.merge(part, on=keys, how="outer")
    assert out is not None
    ratios = out[[f"impact_ratio_{s}" for s in SCENARIOS]]
    out["flag_holds"] = (ratios < threshold - 1e-12).all(axis=1)
    signif = {s: out[f"p_adjusted_{s}"] < alpha for s in SCENARIOS}
    sign = {s: np.sign(out[f"_d_{s}"]) for s in SCENARIOS}
    first = SCENARIOS[0]
    out["direction"] = np.where(signif[first], np.where(sign[first] > 0, "higher", "lower"), "")
    out["direction_holds"] = signif[first] & np.logical_and.reduce(
        [signif[s] & (sign[s] == sign[first]) for s in SCENARIOS]
    )
    return out.drop(columns=[f"_d_{s}" for s in SCENARIOS])


def group_claims(bounds: pd.DataFrame, keys: list[str], positive: object) -> list[str]:
    """One sentence per group that is flagged or significant among valid answers, saying
    whether the claim holds whichever way the excluded answers are counted."""
    lines = []
    for row in bounds.to_dict("records"):
        label = ", ".join(str(row[k]) for k in keys)
        ratio = row["impact_ratio_valid_only"]
        if ratio < 0.8 - 1e-12:
            lines.append(
                f"{label}: impact ratio {ratio:.2f} among valid answers ("
                f"{row['impact_ratio_excluded_as_negative']:.2f} if excluded answers were "
                f"negative, {row['impact_ratio_excluded_as_positive']:.2f} if positive): "
                + (
                    "below four-fifths either way"
                    if row["flag_holds"]
                    else "the bounds include parity, so the four-fifths flag may come from "
                    "who is excluded"
                )
            )
        if row["direction"]:
            more = "more" if row["direction"] == "higher" else "less"
            lines.append(
                f"{label}: `{positive}` {more} often than the population among valid answers"
                + (
                    ", whichever way the excluded answers are counted"
                    if row["direction_holds"]
                    else "; the bounds include parity (not significant in the same direction "
                    "if excluded answers were counted negative or positive), so this may come "
                    "from who is excluded"
                )
            )
    return lines


def _p(p: float) -> str:
    return "= nan" if np.isnan(p) else ("< 0.001" if p < 0.001 else f"= {p:.3f}")


def _labels(groups: pd.DataFrame) -> list[str]:
    return [", ".join(map(str, row)) for row in groups.itertuples(index=False)]


def refusal_report(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    positive: object,
    *,
    invalid: Sequence[object],
    valid: str | None = None,
    unit_col: str | None = None,
    adjust: str = "holm",
    alpha: float = 0.05,
    n_permutations: int = 5000,
    seed: int = 0,
) -> dict[str, pd.DataFrame | float | str | bool | list[str]]:
    """Everything this module says about one decisions table: tables ``validity``,
    ``exclusion_bounds`` and ``group_bounds``; ``validity_gap``, ``validity_p_value``,
    ``validity_test``, ``bounds_include_parity``, ``bounds_note`` and ``claims``."""
    common = {"invalid": invalid, "valid": valid}
    tested = {"unit_col": unit_col, "alpha": alpha, "n_permutations": n_permutations, "seed": seed}
    bounds = exclusion_bounds(df, keys, outcome_col, positive, **common, **tested)
    groups = group_bounds(df, keys, outcome_col, positive, adjust=adjust, **common, **tested)
    return {
        "validity": validity_rates(df, keys, outcome_col, **common),
        "exclusion_bounds": bounds,
        "group_bounds": groups,
        **validity_test(df, keys, outcome_col, **common, **tested),
        "bounds_include_parity": bounds_include_parity(bounds, alpha),
        "bounds_note": bounds_sentence(bounds, alpha),
        "claims": group_claims(groups, keys, positive),
    }


def case_exclusions(
    rows: pd.DataFrame,
    case_cols: list[str],
    group_col: str,
    hit_col: str,
    *,
    unit_col: str | None = None,
    alpha: float = 0.05,
    n_permutations: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Validity test and exclusion bounds of each case that has an excluded answer.

    Args:
        rows: One row per decision; ``hit_col`` is true / false for the targeted decision and
            missing where the answer is excluded.
        case_cols: Columns whose values identify a case.
        group_col: The group compared within a case.
        hit_col: See ``rows``.
        unit_col: The unit relabelled as a whole (e.g. the persona, whose replicates are not
            independent); answers without it.

    Returns:
        One row per case with an excluded answer: ``case_cols``, ``n_excluded``,
        ``validity_gap``, ``validity_p_value``, ``dpd`` and ``p_value`` per scenario
        (``dpd_valid_only``, ``dpd_excluded_as_negative``, ... ), ``bounds_include_parity`` and
        ``test`` (which null, which unit).
    """
    outcome = rows[hit_col].astype("boolean").map({True: "yes", False: "no"}, na_action="ignore")
    data = rows.assign(__outcome__=outcome.astype(object))
    out = []
    for key, case in data.groupby(case_cols, sort=True, dropna=False):
        n_excluded = int(case["__outcome__"].isna().sum())
        if n_excluded == 0 or case[group_col].nunique() < 2:
            continue
        tested = {"unit_col": unit_col, "alpha": alpha, "n_permutations": n_permutations}
        tested["seed"] = seed
        validity = validity_test(case, [group_col], "__outcome__", invalid=[], **tested)
        bounds = exclusion_bounds(case, [group_col], "__outcome__", "yes", invalid=[], **tested)
        row = dict(zip(case_cols, key if isinstance(key, tuple) else (key,), strict=True))
        row.update(n_excluded=n_excluded, **validity)
        for b in bounds.itertuples():
            row[f"dpd_{b.scenario}"], row[f"p_{b.scenario}"] = b.dpd, b.p_value
        row["bounds_include_parity"] = bounds_include_parity(bounds, alpha)
        row["test"] = bounds["test"].iloc[0]
        out.append(row)
    scenario_cols = [f"{s}_{c}" for c in SCENARIOS for s in ("dpd", "p")]
    columns = [*case_cols, "n_excluded", "validity_gap", "validity_p_value", "validity_test"]
    return pd.DataFrame(out, columns=[*columns, *scenario_cols, "bounds_include_parity", "test"])
