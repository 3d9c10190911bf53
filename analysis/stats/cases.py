"""Per-case decision statistics: implicit and explicit bias, ablation and directional alignment.

A *case* is one combination of the ``case_cols`` values, e.g. (model, persona condition, scenario,
sociodemographic axis) in Li, Shirado & Das (2025). Within a case the groups are the values of one
column (the axis values for implicit bias, the chosen answer labels for explicit bias).

- Implicit bias (paper 3.3, 5.1): rate of the targeted decision per group, DPD across groups and the
  parametric bootstrap under the pooled-binomial null (``analysis.parity``). Undecided answers are
  excluded and counted, as the paper excluded 227 GPT-3.5-turbo agents (5.3).
- Explicit bias (4.2, footnote 1): the share of all valid question-answer trials that chose each
  label; "Unknown" stays in the denominator but is left out of the DPD.
- Implicit against explicit DPDs per model (5.1, 5.3), the persona ablation (4.3, 5.4) and the
  directional alignment of rates with empirical predictions (4.4, 5.5, Table 3).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from biasim.analysis.stats.parity import (
    critical_value,
    demographic_parity_difference,
    group_rates,
    null_test,
    parity_null_dpd,
    resampling_p_value,
    wilson_interval,
)
from biasim.analysis.stats.permutation import parity_permutation_null
from biasim.analysis.stats.units import smallest_p

DEFAULT_PREDICTIONS: Path = Path(__file__).resolve().parents[1] / "data" / "li2025_predictions.yaml"
"""Table 3 of Li, Shirado & Das (2025): six empirical predictions about decision directions."""

# Simulated and observed rates are the same fractions k/n; compare them with a tolerance, as
# analysis.parity.parity_test does.
_TIE = 1e-12
_SUMMARY = ("n_cases", "mean_dpd", "sd_dpd", "n_significant")

_PARITY_COLUMNS = [
    "n_groups",
    "n_valid",
    "n_excluded",
    "pooled_rate",
    "dpd",
    "threshold",
    "chance_dpd",
    "p_value",
    "significant",
    "max_group",
    "min_group",
    "test",
    "unit",
    "n_units",
    "can_reject",
]

#: The tests a case's DPD can get: the paper's, valid when every unit answered once, and the
#: relabelling of whole units between groups, valid when units repeat (replicates).
BINOMIAL_TEST = "binomial bootstrap (paper)"
UNIT_TEST = "unit permutation"
EXPLICIT_TEST = "multinomial bootstrap (paper)"


def case_seed(seed: int, key: Sequence[Hashable]) -> int:
    """Seed for one case derived from ``seed`` and the case key's text.

    A hash of the text (not Python's salted ``hash``) keeps a case's simulations the same whatever
    the row order, the other cases present or the process.
    """
    text = "\x1f".join([str(seed), *(str(part) for part in key)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _key_tuple(key: Hashable) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _answered(df: pd.DataFrame, outcome_col: str, valid_col: str) -> pd.Series:
    """Rows with a usable answer: flagged valid and not missing the outcome."""
    valid = df[valid_col].astype("boolean").fillna(False).astype(bool)
    return valid & df[outcome_col].notna()


def case_rates(
    df: pd.DataFrame,
    case_cols: Sequence[str],
    group_col: str,
    outcome_col: str,
    target: str,
    *,
    valid_col: str = "valid",
) -> pd.DataFrame:
    """Rate of the targeted decision per (case, group) among answered units.

    Args:
        df: One row per unit (agent decision).
        case_cols: Columns whose values identify a case.
        group_col: Column holding the group value compared within a case.
        outcome_col: Column holding the decision.
        target: The targeted decision (e.g. "Evacuate").
        valid_col: Boolean column; false (or a missing outcome) marks an undecided answer, which is
            counted in ``n_excluded`` and left out of the rate.

    Returns:
        One row per (case, group value): ``case_cols``, ``group_col``, ``n_units``, ``n_valid``,
        ``n_excluded``, ``k``, ``rate``, ``ci_low``, ``ci_high`` (Wilson 95 %). A group with no
        answered unit has ``rate`` and the interval NaN. Rows missing a case or group value are
        left out altogether.
    """
    keys = [*case_cols, group_col]
    data = df.dropna(subset=keys).reset_index(drop=True)
    answered = _answered(data, outcome_col, valid_col)
    units = data.groupby(keys, sort=True).size().rename("n_units").reset_index()
    rates = group_rates(
        data[keys].assign(_outcome=data[outcome_col], valid=answered), keys, "_outcome", target
    )
    out = units.merge(rates, on=keys, how="left").rename(columns={"n": "n_valid"})
    out[["n_valid", "k"]] = out[["n_valid", "k"]].fillna(0).astype(int)
    out["n_excluded"] = out["n_units"] - out["n_valid"]
    return out[[*keys, "n_units", "n_valid", "n_excluded", "k", "rate", "ci_low", "ci_high"]]


def _test_against_null(observed: float, null: np.ndarray, alpha: float) -> dict:
    """The observed DPD against simulated null DPDs (``analysis.parity.null_test``), with the
    DPD expected by chance alone."""
    threshold, p_value, significant = null_test(observed, null, alpha)
    return {
        "dpd": observed,
        "threshold": threshold,
        "chance_dpd": float(null.mean()),
        "p_value": p_value,
        "significant": significant,
    }


def rate_extremes(groups: pd.Series, rates: np.ndarray) -> dict[str, Any]:
    """The groups with the highest and the lowest rate (``max_group``, ``min_group``); none
    when every rate is the same (a DPD of 0 has no highest group: naming the first group as
    both would read as a difference)."""
    rates = np.asarray(rates, dtype=float)
    if rates.max() == rates.min():
        return {"max_group": None, "min_group": None}
    return {
        "max_group": groups.iloc[int(np.argmax(rates))],
        "min_group": groups.iloc[int(np.argmin(rates))],
    }


def _empty_case(n_groups: int, n_valid: int, n_excluded: int, pooled: float) -> dict:
    return {
        "n_groups": n_groups,
        "n_valid": n_valid,
        "n_excluded": n_excluded,
        "pooled_rate": pooled,
        "dpd": np.nan,
        "threshold": np.nan,
        "chance_dpd": np.nan,
        "p_value": np.nan,
        "significant": False,
        "max_group": None,
        "min_group": None,
        "test": None,
        "can_reject": False,
    }


def case_parity(
    rates: pd.DataFrame,
    case_cols: Sequence[str],
    group_col: str,
    *,
    units: pd.DataFrame | None = None,
    unit: str = "decision",
    alpha: float = 0.05,
    n_simulations: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """DPD of each case and its test against parity, with units as the exchangeable draws.

    A case whose units each answered once gets the paper's parametric bootstrap (3.3): group
    counts drawn binomially at the pooled rate. A case where some unit answered more than once
    (replicates of a persona) gets a permutation test that relabels whole units between groups,
    the observed labelling counted as one (``permutation.parity_permutation_null``); the
    binomial bootstrap would treat a persona's replicates as independent agents and reject
    far above alpha.

    Args:
        rates: Output of :func:`case_rates`.
        case_cols: Columns whose values identify a case.
        group_col: Group column of ``rates``.
        units: Answers per unit (``units.unit_counts`` keyed by ``case_cols`` and
            ``group_col``); None when every answer is its own unit.
        unit: What a unit is (``persona``, ``name``, ...), printed beside each test.
        alpha: Level of the test; the threshold is the ``1 - alpha`` critical value of the null.
        n_simulations: Null draws (or relabellings) per case.
        seed: Base seed; each case's draws are seeded from it and the case key (:func:`case_seed`).

    Returns:
        One row per case: ``case_cols``, ``n_groups`` (groups with an answer, the ones compared),
        ``n_valid``, ``n_excluded``, ``pooled_rate``, ``dpd``, ``threshold``, ``chance_dpd`` (mean
        DPD under the null: what chance alone gives at these sizes), ``p_value``, ``significant``
        (``dpd > threshold``), ``max_group``, ``min_group``, ``test``, ``unit``, ``n_units``
        (units with an answer) and ``can_reject`` (false when even the most extreme data could
        not give ``p < alpha``, e.g. three agents per value). A case with fewer than two
        answered groups has NaN statistics and ``significant`` false.
    """
    by_case = {} if units is None else dict(iter(units.groupby(list(case_cols), sort=True)))
    rows = []
    for key, case in rates.groupby(list(case_cols), sort=True):
        answered = case[case["n_valid"] > 0]
        n, k = answered["n_valid"].to_numpy(), answered["k"].to_numpy()
        n_valid, n_excluded = int(n.sum()), int(case["n_excluded"].sum())
        pooled = float(k.sum() / n_valid) if n_valid else np.nan
        case_units = by_case.get(key)
        key = _key_tuple(key)
        if case_units is not None:
            case_units = case_units[case_units["n"] > 0]
        n_units = n_valid if case_units is None else len(case_units)
        if len(answered) < 2:
            row = _empty_case(len(answered), n_valid, n_excluded, pooled)
        else:
            repeated = case_units is not None and bool((case_units["n"] > 1).any())
            test = _unit_null if repeated else _binomial_null
            null, can_reject = test(
                answered, case_units, group_col, n_simulations, case_seed(seed, key)
            )
            group_rate = k / n
            row = {
                "n_groups": len(answered),
                "n_valid": n_valid,
                "n_excluded": n_excluded,
                "pooled_rate": pooled,
                **_test_against_null(demographic_parity_difference(group_rate), null, alpha),
                **rate_extremes(answered[group_col], group_rate),
                "test": UNIT_TEST if repeated else BINOMIAL_TEST,
                "can_reject": bool(can_reject(alpha)),
            }
            if repeated:  # the observed labelling is one of the relabellings
                row["threshold"] = critical_value(np.r_[null, row["dpd"]], alpha)
                row["p_value"] = resampling_p_value(null, row["dpd"])
                row["significant"] = bool(row["p_value"] < alpha)
        row.update(unit=unit, n_units=n_units)
        rows.append({**dict(zip(case_cols, key, strict=True)), **row})
    return pd.DataFrame(rows, columns=[*case_cols, *_PARITY_COLUMNS])


def _binomial_null(
    answered: pd.DataFrame,
    case_units: pd.DataFrame | None,
    group_col: str,
    n_simulations: int,
    seed: int,
) -> tuple[np.ndarray, Callable[[float], bool]]:
    """The paper's null: each group's count binomial at the pooled rate. It can reject only if
    the most extreme DPD (1) is rarer than alpha under it."""
    n, k = answered["n_valid"].to_numpy(), answered["k"].to_numpy()
    null = parity_null_dpd(n, float(k.sum() / n.sum()), n_simulations, seed)
    extreme = float(np.mean(null >= 1 - _TIE))
    return null, lambda alpha: extreme < alpha


def _unit_null(
    answered: pd.DataFrame,
    case_units: pd.DataFrame,
    group_col: str,
    n_simulations: int,
    seed: int,
) -> tuple[np.ndarray, Callable[[float], bool]]:
    """Whole units relabelled between groups. It can reject only if there are more than
    ``1 / alpha`` distinct labellings."""
    codes = pd.Categorical(case_units[group_col], categories=answered[group_col]).codes
    _, null = parity_permutation_null(
        case_units["n"].to_numpy(),
        case_units["k"].to_numpy(),
        codes,
        n_permutations=n_simulations,
        seed=seed,
    )
    bound = smallest_p(np.bincount(codes, minlength=len(answered)))
    return null, lambda alpha: max(bound, 1 / (n_simulations + 1)) < alpha


def _labels_for(
    key: tuple, labels: Mapping[Hashable, Sequence[str]] | None
) -> Sequence[str] | None:
    """Labels listed for a case: by its full key first, then by any single value of the key."""
    if labels is None:
        return None
    # The bare value of a single-column key is among ``key``'s own values.
    for candidate in (key, *key):
        if candidate in labels:
            return labels[candidate]
    return None


def explicit_rates(
    df: pd.DataFrame,
    case_cols: Sequence[str],
    answer_col: str = "answer",
    *,
    unknown: str | None = "Unknown",
    labels: Mapping[Hashable, Sequence[str]] | None = None,
    valid_col: str = "valid",
) -> pd.DataFrame:
    """Selection rate of each answer label over all valid question-answer trials of a case.

    Follows footnote 1 of the paper: the denominator is every valid trial, "Unknown" included
    (Female 30 %, Male 10 %, Non-binary 5 %, Unknown the rest).

    Args:
        df: One row per trial.
        case_cols: Columns whose values identify a case.
        answer_col: Column holding the chosen label.
        unknown: The label meaning "cannot tell"; it always gets a row (rate 0 when never chosen).
            None when the question had no such option.
        labels: Labels offered, so those never chosen appear with rate 0. Keys are a full case key
            (a tuple in ``case_cols`` order, or the bare value for a single case column) or any one
            value of the key, e.g. an attribute name such as "gender". Answers outside the list
            still get their own row.
        valid_col: Boolean column; false (or a missing answer) marks a trial that did not parse.

    Returns:
        One row per (case, answer label): ``case_cols``, ``answer``, ``n_trials``, ``n_valid``,
        ``k``, ``rate``, ``ci_low``, ``ci_high`` (Wilson 95 %).
    """
    keys = list(case_cols)
    data = df.dropna(subset=keys).reset_index(drop=True)
    data["_answered"] = _answered(data, answer_col, valid_col)
    rows = []
    for key, case in data.groupby(keys, sort=True):
        key = _key_tuple(key)
        case_answered = case[case["_answered"]]
        counts = case_answered[answer_col].astype(str).value_counts()
        offered = list(_labels_for(key, labels) or [])
        if unknown is not None:
            offered.append(unknown)
        chosen = sorted(set(counts.index) - set(offered))
        for label in dict.fromkeys([*offered, *chosen]):
            rows.append(
                {
                    **dict(zip(keys, key, strict=True)),
                    "answer": label,
                    "n_trials": len(case),
                    "n_valid": len(case_answered),
                    "k": int(counts.get(label, 0)),
                }
            )
    out = pd.DataFrame(rows, columns=[*keys, "answer", "n_trials", "n_valid", "k"])
    n, k = out["n_valid"].to_numpy(dtype=float), out["k"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["rate"] = np.where(n > 0, k / np.where(n > 0, n, 1), np.nan)
        low, high = wilson_interval(k, n)
    out["ci_low"] = np.where(n > 0, low, np.nan)
    out["ci_high"] = np.where(n > 0, high, np.nan)
    return out


def explicit_null_dpd(
    n_valid: int, n_labels: int, unknown_share: float, n_simulations: int, seed: int = 0
) -> np.ndarray:
    """DPD under no explicit preference: each trial answers Unknown with ``unknown_share``,
    otherwise one of ``n_labels`` labels uniformly at random (multinomial draws)."""
    probs = np.r_[unknown_share, np.full(n_labels, (1 - unknown_share) / n_labels)]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_valid, probs, size=n_simulations)[:, 1:]
    rates = counts / n_valid
    return rates.max(axis=1) - rates.min(axis=1)


def explicit_parity(
    rates: pd.DataFrame,
    case_cols: Sequence[str],
    *,
    unknown: str | None = "Unknown",
    alpha: float = 0.05,
    n_simulations: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Explicit-bias DPD per case (footnote 1) and its multinomial bootstrap test.

    DPD is the largest minus the smallest selection rate over the labels other than ``unknown``.
    Under the null every valid trial answers Unknown with the observed Unknown share and otherwise
    picks a label uniformly; the threshold is the ``1 - alpha`` quantile of the simulated DPDs.

    Args:
        rates: Output of :func:`explicit_rates`.
        case_cols: Columns whose values identify a case.
        unknown: The "cannot tell" label, excluded from the DPD; None if there is none.
        alpha: Level of the test.
        n_simulations: Null draws per case.
        seed: Base seed; each case is seeded from it and its key (:func:`case_seed`).

    Returns:
        One row per case with the columns of :func:`case_parity` plus ``n_unknown``. Here
        ``n_groups`` counts the labels compared, ``n_excluded`` the trials that did not parse and
        ``pooled_rate`` is the rate every label would have under the null,
        ``(n_valid - n_unknown) / (n_groups * n_valid)``. A case with fewer than two labels or no
        valid trial has NaN statistics and ``significant`` false.
    """
    rows = []
    for key, case in rates.groupby(list(case_cols), sort=True):
        key = _key_tuple(key)
        is_unknown = case["answer"] == unknown
        compared = case[~is_unknown]
        n_valid = int(case["n_valid"].iloc[0])
        n_unknown = int(case.loc[is_unknown, "k"].sum())
        n_excluded = int(case["n_trials"].iloc[0]) - n_valid
        m = len(compared)
        pooled = (n_valid - n_unknown) / (m * n_valid) if m and n_valid else np.nan
        if m < 2 or n_valid == 0:
            row = _empty_case(m, n_valid, n_excluded, pooled)
        else:
            label_rate = compared["rate"].to_numpy()
            null = explicit_null_dpd(
                n_valid, m, n_unknown / n_valid, n_simulations, case_seed(seed, key)
            )
            row = {
                "n_groups": m,
                "n_valid": n_valid,
                "n_excluded": n_excluded,
                "pooled_rate": pooled,
                **_test_against_null(demographic_parity_difference(label_rate), null, alpha),
                **rate_extremes(compared["answer"], label_rate),
                "test": EXPLICIT_TEST,
                "can_reject": bool(np.mean(null >= 1 - _TIE) < alpha),
            }
        # Each valid trial is a draw of this null: trials are its unit.
        row.update(unit="trial", n_units=n_valid)
        rows.append({**dict(zip(case_cols, key, strict=True)), **row, "n_unknown": n_unknown})
    return pd.DataFrame(rows, columns=[*case_cols, *_PARITY_COLUMNS, "n_unknown"])


def _dpd_summary(cases: pd.DataFrame, suffix: str, ddof: int) -> dict[str, float | int]:
    dpd = cases["dpd"].dropna()
    return {
        f"n_cases_{suffix}": int(dpd.size),
        f"mean_dpd_{suffix}": float(dpd.mean()) if dpd.size else np.nan,
        f"sd_dpd_{suffix}": float(dpd.std(ddof=ddof)) if dpd.size > ddof else np.nan,
        f"n_significant_{suffix}": int(cases["significant"].astype(bool).sum()),
    }


def implicit_vs_explicit(
    implicit_cases: pd.DataFrame,
    explicit_cases: pd.DataFrame,
    by: Sequence[str] = ("model_label",),
    *,
    ddof: int = 1,
) -> pd.DataFrame:
    """Compare implicit and explicit case DPDs per model with a two-sample Student t-test (5.1).

    Cases whose DPD is NaN are left out. The paper's standard deviations match ``ddof=0``: its
    GPT-4o explicit DPDs (one case at 1, eleven at 0) give sd 0.276, not 0.289.

    Args:
        implicit_cases: Output of :func:`case_parity`.
        explicit_cases: Output of :func:`explicit_parity`.
        by: Columns identifying a model (or any unit of comparison).
        ddof: Delta degrees of freedom of the reported standard deviations.

    Returns:
        One row per ``by`` value: ``by``, ``n_cases_implicit``, ``mean_dpd_implicit``,
        ``sd_dpd_implicit``, ``n_significant_implicit``, the same four ending ``_explicit``,
        ``t_statistic``, ``p_value`` (two-sided, equal variances) and ``df``. The test is NaN when
        either side has fewer than two cases.
    """
    keys = list(by)
    implicit = {_key_tuple(k): g for k, g in implicit_cases.groupby(keys, sort=True)}
    explicit = {_key_tuple(k): g for k, g in explicit_cases.groupby(keys, sort=True)}
    empty = pd.DataFrame({"dpd": pd.Series(dtype=float), "significant": pd.Series(dtype=bool)})
    from scipy import stats  # here, not at the top: validating a study never needs scipy.stats

    rows = []
    for key in sorted(set(implicit) | set(explicit)):
        imp, exp = implicit.get(key, empty), explicit.get(key, empty)
        a, b = imp["dpd"].dropna().to_numpy(), exp["dpd"].dropna().to_numpy()
        t_stat = p_value = df = np.nan
        if a.size >= 2 and b.size >= 2:
            # Constant DPDs (e.g. a model answering Unknown to every question) are expected here;
            # scipy's precision-loss warning about them is noise, and it gives NaN when both are.
            with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                result = stats.ttest_ind(a, b, equal_var=True)
            t_stat, p_value, df = float(result.statistic), float(result.pvalue), a.size + b.size - 2
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                **_dpd_summary(imp, "implicit", ddof),
                **_dpd_summary(exp, "explicit", ddof),
                "t_statistic": t_stat,
                "p_value": p_value,
                "df": df,
            }
        )
    stat_cols = [f"{s}_{side}" for side in ("implicit", "explicit") for s in _SUMMARY]
    return pd.DataFrame(rows, columns=[*keys, *stat_cols, "t_statistic", "p_value", "df"])


def ablation_table(
    cases: pd.DataFrame,
    case_cols: Sequence[str],
    condition_col: str = "persona_condition",
    *,
    by: Sequence[str] = ("model_label",),
    conditions: Sequence[str] | None = ("no_persona", "non_contextualized", "contextualized"),
) -> pd.DataFrame:
    """The persona ablation (4.3, 5.4, Fig. 5) as one long table.

    Shape: one row per (case, condition), holding that case's test under that condition, with the
    summary of its (``by``, condition) group repeated on each row. The per-condition summary alone
    is ``table.drop_duplicates([*by, condition_col])[[*by, condition_col, "n_cases",
    "n_significant", "mean_dpd"]]``.

    Args:
        cases: Output of :func:`case_parity` run with ``condition_col`` among its case columns.
        case_cols: Columns identifying a case across conditions (``condition_col`` may be among
            them; it is set aside).
        condition_col: Column naming the persona condition.
        by: Case columns the summary is taken within (e.g. per model); () for one summary.
        conditions: Order of the conditions in the table; conditions not listed follow,
            alphabetically. None sorts all alphabetically.

    Returns:
        Columns: ``case_cols`` (without ``condition_col``), ``condition_col``, ``dpd``,
        ``threshold``, ``p_value``, ``significant``, then the summary ``n_cases`` (cases with a
        DPD), ``n_significant`` and ``mean_dpd``.
    """
    keys = [c for c in case_cols if c != condition_col]
    missing = [c for c in by if c not in keys]
    if missing:
        raise ValueError(f"summary columns {missing} are not among the case columns {keys}")
    present = sorted(cases[condition_col].dropna().unique())
    listed = [c for c in conditions or () if c in present]
    order = listed + [c for c in present if c not in listed]
    table = cases[[*keys, condition_col, "dpd", "threshold", "p_value", "significant"]].copy()
    table[condition_col] = pd.Categorical(table[condition_col], categories=order, ordered=True)
    group = [*by, condition_col]
    summary = table.groupby(group, observed=True, sort=False).agg(
        n_cases=("dpd", "count"),
        n_significant=("significant", "sum"),
        mean_dpd=("dpd", "mean"),
    )
    table = table.join(summary, on=group)
    table = table.sort_values([*by, condition_col, *[k for k in keys if k not in by]])
    table[condition_col] = table[condition_col].astype(str)
    table["n_significant"] = table["n_significant"].astype(int)
    return table.reset_index(drop=True)


@dataclass(frozen=True)
class Prediction:
    """One empirical prediction of a decision's direction (paper Table 3).

    Attributes:
        scenario: Scenario name.
        attribute: Sociodemographic axis.
        higher: Axis values predicted to take the targeted decision more often.
        lower: Axis values predicted to take it less often.
        statement: The prediction as the paper words it.
        evidence: The paper's synthesized evidence, with its citation numbers.
        reported: The paper's own alignment verdict for GPT-4o, when given.
    """

    scenario: str
    attribute: str
    higher: list[str]
    lower: list[str]
    statement: str
    evidence: str
    reported: str | None = None


def load_predictions(path: str | Path = DEFAULT_PREDICTIONS) -> list[Prediction]:
    """Read predictions from YAML: a top-level ``predictions`` list of mappings with the
    :class:`Prediction` fields (``higher`` and ``lower`` are lists of axis values)."""
    document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries = document.get("predictions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a top-level `predictions` list")
    predictions = []
    for number, entry in enumerate(entries, start=1):
        try:
            prediction = Prediction(
                scenario=str(entry["scenario"]),
                attribute=str(entry["attribute"]),
                higher=[str(v) for v in entry["higher"]],
                lower=[str(v) for v in entry["lower"]],
                statement=str(entry["statement"]),
                evidence=str(entry["evidence"]),
                reported=entry.get("reported"),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: prediction {number} is missing {error}") from error
        if not prediction.higher or not prediction.lower:
            raise ValueError(f"{path}: prediction {number} needs both `higher` and `lower` values")
        if set(prediction.higher) & set(prediction.lower):
            raise ValueError(f"{path}: prediction {number} lists a value as higher and lower")
        predictions.append(prediction)
    return predictions


def _mean_rate(rates: pd.Series, values: Sequence[str]) -> float:
    """Unweighted mean of the listed values' rates; NaN if any value has no rate."""
    picked = rates.reindex(list(values))
    return float(picked.mean()) if picked.notna().all() else np.nan


def directional_alignment(
    rates: pd.DataFrame,
    predictions: Sequence[Prediction],
    *,
    scenario_col: str = "scenario",
    attribute_col: str = "attribute",
    group_col: str = "value",
    by: Sequence[str] = ("model_label", "persona_condition"),
    rate_col: str = "rate",
) -> pd.DataFrame:
    """Whether observed targeted-decision rates point the way each prediction says (5.5).

    Args:
        rates: Output of :func:`case_rates` (the rate of each scenario's targeted decision).
        predictions: Predictions, e.g. ``load_predictions()``.
        scenario_col: Scenario column of ``rates``.
        attribute_col: Axis column of ``rates``.
        group_col: Axis-value column of ``rates``.
        by: Columns each prediction is checked within (e.g. model and persona condition).
        rate_col: Rate column of ``rates``.

    Returns:
        One row per (``by`` value, prediction): ``by``, ``scenario``, ``attribute``,
        ``statement``, ``higher``, ``lower`` (values joined by ", "), ``rate_higher``,
        ``rate_lower`` (unweighted means of the listed values' rates), ``difference``
        (higher - lower) and ``aligned`` (difference > 0; a tie is not aligned). When a listed
        value has no rate the rates are NaN and ``aligned`` is None.
    """
    keys = list(by)
    missing = [c for c in keys if c not in rates.columns]
    if missing:
        raise ValueError(f"rates lack the columns {missing}; pass `by` with the ones it has")
    groups = rates.groupby(keys, sort=True) if keys else [((), rates)]
    rows = []
    for key, frame in groups:
        key = _key_tuple(key)
        for prediction in predictions:
            case = frame[
                (frame[scenario_col] == prediction.scenario)
                & (frame[attribute_col] == prediction.attribute)
            ]
            by_value = case.groupby(group_col)[rate_col].mean()
            high, low = (
                _mean_rate(by_value, prediction.higher),
                _mean_rate(by_value, prediction.lower),
            )
            difference = high - low
            rows.append(
                {
                    **dict(zip(keys, key, strict=True)),
                    "scenario": prediction.scenario,
                    "attribute": prediction.attribute,
                    "statement": prediction.statement,
                    "higher": ", ".join(prediction.higher),
                    "lower": ", ".join(prediction.lower),
                    "rate_higher": high,
                    "rate_lower": low,
                    "difference": difference,
                    "aligned": None if np.isnan(difference) else bool(difference > 0),
                }
            )
    columns = [*keys, "scenario", "attribute", "statement", "higher", "lower"]
    columns += ["rate_higher", "rate_lower", "difference", "aligned"]
    return pd.DataFrame(rows, columns=columns)
