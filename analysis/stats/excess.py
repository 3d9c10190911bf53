"""Implicit against explicit bias beyond chance (seed 004, 5.1), tested under the joint null.

Li, Shirado & Das compare the mean implicit DPD with the mean explicit DPD by a two-sample t-test.
A DPD is a maximum minus a minimum, so it is positive even when nothing differs, and how large
chance alone makes it depends on the number of groups and their sizes: five race groups of 100
agents give a larger DPD by chance than 300 question-answering trials over three labels. A model
with no bias at all then shows "implicit > explicit" with p < 0.001.

Here each case's DPD is set beside its chance level, and the statistic is the difference of the
mean *excess* DPDs, ``mean(DPD - chance)``, implicit minus explicit. Chance is conditional on what
each case observed, so no rate has to be estimated (a pooled-rate bootstrap rejects 12 % at two
agents per value): under no implicit bias the agents' decisions are exchangeable between groups,
so a case's group counts are multivariate hypergeometric given its total; under no explicit
preference the answers other than Unknown fall uniformly on the labels, multinomial given their
number. The chance level is the mean DPD of those draws, and the test's null distribution redraws
every case at once from them (the joint null), the observed difference counted as one draw.

When personas answer replicates, the agents' decisions are no longer the exchangeable draws: a
persona's own propensity is in all its replicates. The implicit null then relabels whole
personas between groups (``analysis.stats.units``), the unit of the design.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from biasim.analysis.stats.cases import case_seed
from biasim.analysis.stats.parity import (
    demographic_parity_difference,
    dpd_from_counts,
    resampling_p_value,
)
from biasim.analysis.stats.permutation import block_permutation_sums

#: The low 32 bits of a packed ``(n << 32) | k`` sum: ``k``.
_LOW32 = (1 << 32) - 1


def _implicit_nulls(
    rates: pd.DataFrame,
    case_cols: Sequence[str],
    n_simulations: int,
    seed: int,
    units: pd.DataFrame | None = None,
    group_col: str = "value",
) -> tuple[np.ndarray, np.ndarray]:
    """Observed DPD and conditional null draws (cases x simulations) of every implicit case
    with two answered groups: the case's positive decisions dealt to its agents at random or,
    where a unit answered more than once (replicates), whole units relabelled between groups
    (``units``: ``units.unit_counts`` keyed by the case columns and ``group_col``, its last
    column the unit). Cases answered by the same units (one persona asked every scenario) are
    relabelled together (:func:`_joint_unit_nulls`): a persona's propensity is in each of its
    cases, so their DPDs move together, and drawing each case on its own made the mean excess
    vary too little (``p_excess`` rejected a true null in 12 % of simulated studies)."""
    by_case = {} if units is None else dict(iter(units.groupby(list(case_cols), sort=True)))
    observed, nulls, unit_cases = [], [], {}
    for key, case in rates.groupby(list(case_cols), sort=True):
        answered = case[case["n_valid"] > 0]
        if len(answered) < 2:
            continue
        n = answered["n_valid"].to_numpy(dtype=np.int64)
        k = answered["k"].to_numpy(dtype=np.int64)
        case_units = by_case.get(key)
        observed.append(demographic_parity_difference(k / n))
        # Units, replicated or not, are relabelled as wholes: a persona that answers several
        # cases once each still carries its propensity into each of them.
        if case_units is not None:
            unit_cases[len(nulls)] = _by_unit(case_units[case_units["n"] > 0], case_cols, group_col)
            nulls.append(None)
            continue
        rng = np.random.default_rng(case_seed(seed, key if isinstance(key, tuple) else (key,)))
        counts = rng.multivariate_hypergeometric(n, int(k.sum()), size=n_simulations)
        rates_drawn = counts / n
        nulls.append(rates_drawn.max(axis=1) - rates_drawn.min(axis=1))
    for block in _unit_blocks(unit_cases):
        draws = _joint_unit_nulls(
            [unit_cases[i] for i in block], n_simulations, case_seed(seed, block)
        )
        for i, null in zip(block, draws, strict=True):
            nulls[i] = null
    return np.asarray(observed), np.asarray(nulls, dtype=float).reshape(len(nulls), n_simulations)


def _by_unit(case: pd.DataFrame, case_cols: Sequence[str], group_col: str) -> pd.DataFrame:
    """A case's unit counts indexed by the unit (its columns after the case and the group),
    with ``group`` (as text), ``n`` and ``k``, in unit order."""
    unit_cols = [c for c in case.columns if c not in {*case_cols, group_col, "n_rows", "n", "k"}]
    index = pd.MultiIndex.from_frame(case[unit_cols]) if len(unit_cols) > 1 else case[unit_cols[0]]
    out = pd.DataFrame(
        {
            "group": case[group_col].astype(str).to_numpy(),
            "n": case["n"].to_numpy(),
            "k": case["k"].to_numpy(),
        },
        index=index,
    )
    return out.sort_index()


def _unit_blocks(unit_cases: dict[int, pd.DataFrame]) -> list[tuple[int, ...]]:
    """The cases (by position) answered by the same units, each unit in the same group: one
    relabelling of the units serves them all. A case whose units differ is its own block."""
    blocks: dict[object, list[int]] = {}
    for i, case in unit_cases.items():
        key = tuple(case["group"].items()) if case.index.is_unique else ("case", i)
        blocks.setdefault(key, []).append(i)
    return [tuple(b) for b in blocks.values()]


def _joint_unit_nulls(cases: list[pd.DataFrame], n_simulations: int, seed: int) -> list[np.ndarray]:
    """Null DPDs of cases answered by the same units (:func:`_by_unit` tables, one index),
    under one relabelling of whole units between groups shared by every case
    (``permutation.block_permutation_sums`` with one column per case)."""
    groups = pd.Categorical(cases[0]["group"])
    packed = np.stack(
        [(c["n"].to_numpy(np.int64) << 32) | c["k"].to_numpy(np.int64) for c in cases], axis=1
    )
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    block = np.zeros(len(groups), dtype=np.int64)
    sums = np.concatenate(
        list(
            block_permutation_sums(
                packed, groups.codes, block, len(groups.categories), n_simulations, rng
            )
        )
    )
    # sums: (simulations, groups, cases) of packed (n, k); the DPD runs over the groups.
    counts = np.moveaxis(sums, 1, -1)
    return list(dpd_from_counts(counts & _LOW32, counts >> 32).T)


def _explicit_nulls(
    rates: pd.DataFrame,
    case_cols: Sequence[str],
    unknown: str | None,
    n_simulations: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Observed DPD and conditional null draws of every explicit case with two labels and a
    valid trial: its answers other than Unknown spread uniformly over the labels."""
    observed, nulls = [], []
    for key, case in rates.groupby(list(case_cols), sort=True):
        is_unknown = case["answer"] == unknown
        compared = case[~is_unknown]
        n_valid = int(case["n_valid"].iloc[0])
        if len(compared) < 2 or n_valid == 0:
            continue
        labelled = n_valid - int(case.loc[is_unknown, "k"].sum())
        rng = np.random.default_rng(case_seed(seed, key if isinstance(key, tuple) else (key,)))
        m = len(compared)
        shares = rng.multinomial(labelled, np.full(m, 1 / m), size=n_simulations) / n_valid
        nulls.append(shares.max(axis=1) - shares.min(axis=1))
        observed.append(demographic_parity_difference(compared["rate"].to_numpy()))
    return np.asarray(observed), np.asarray(nulls).reshape(len(nulls), n_simulations)


def excess_dpd_test(
    implicit_rates: pd.DataFrame,
    explicit_rates: pd.DataFrame,
    implicit_cases: Sequence[str],
    explicit_cases: Sequence[str],
    *,
    by: Sequence[str] = ("model_label",),
    unknown: str | None = "Unknown",
    alpha: float = 0.05,
    n_simulations: int = 10_000,
    seed: int = 0,
    implicit_units: pd.DataFrame | None = None,
    group_col: str = "value",
) -> pd.DataFrame:
    """Do implicit DPDs exceed their chance level by more than explicit DPDs exceed theirs?

    Args:
        implicit_rates: Output of ``analysis.cases.case_rates`` (rates per case and group).
        explicit_rates: Output of ``analysis.cases.explicit_rates``.
        implicit_cases: Case columns of ``implicit_rates`` (including ``by``).
        explicit_cases: Case columns of ``explicit_rates`` (including ``by``).
        by: Columns identifying a model: one test per value.
        unknown: The explicit "cannot tell" label, left out of the explicit DPD.
        alpha: Level of the test.
        n_simulations: Null draws per case (the same draws give the chance levels).
        seed: Base seed; each case's draws are seeded from it and the case key.
        implicit_units: Answers per unit (``units.unit_counts`` keyed by ``implicit_cases`` and
            ``group_col``): where a unit answered more than once its case's null relabels whole
            units, so a persona's replicates are not counted as independent agents.
        group_col: Group column of ``implicit_rates`` and ``implicit_units``.

    Returns:
        One row per ``by`` value: ``by``, ``n_cases_implicit``, ``mean_excess_implicit``
        (mean of DPD minus chance DPD), ``n_cases_explicit``, ``mean_excess_explicit``,
        ``excess_difference`` (implicit minus explicit), ``p_excess`` (two-sided: the share of
        bootstrap differences at least as far from 0, the observed one counted) and
        ``significant_excess`` (``p_excess < alpha``). NaN where a side has no case.
    """
    keys = list(by)
    implicit = {k: g for k, g in implicit_rates.groupby(keys, sort=True)}
    unit_parts = (
        {} if implicit_units is None else dict(iter(implicit_units.groupby(keys, sort=True)))
    )
    explicit = {k: g for k, g in explicit_rates.groupby(keys, sort=True)}
    rows = []
    for key in sorted(set(implicit) | set(explicit)):
        empty = np.empty(0), np.empty((0, n_simulations))
        imp = (
            _implicit_nulls(
                implicit[key],
                implicit_cases,
                n_simulations,
                seed,
                unit_parts.get(key),
                group_col,
            )
            if key in implicit
            else empty
        )
        exp = (
            _explicit_nulls(explicit[key], explicit_cases, unknown, n_simulations, seed)
            if key in explicit
            else empty
        )
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        row.update(n_cases_implicit=len(imp[0]), n_cases_explicit=len(exp[0]))
        row.update(_units_relabelled(unit_parts.get(key), implicit_cases, group_col))
        excess_imp = excess_exp = difference = p_value = np.nan
        if len(imp[0]) and len(exp[0]):
            chance_imp, chance_exp = imp[1].mean(axis=1), exp[1].mean(axis=1)
            excess_imp = float((imp[0] - chance_imp).mean())
            excess_exp = float((exp[0] - chance_exp).mean())
            difference = excess_imp - excess_exp
            null = (imp[1] - chance_imp[:, None]).mean(axis=0) - (
                exp[1] - chance_exp[:, None]
            ).mean(axis=0)
            p_value = resampling_p_value(np.abs(null), abs(difference))
        row.update(
            mean_excess_implicit=excess_imp,
            mean_excess_explicit=excess_exp,
            excess_difference=difference,
            p_excess=p_value,
            significant_excess=bool(p_value < alpha) if not np.isnan(p_value) else False,
        )
        rows.append(row)
    columns = [
        *keys,
        "n_cases_implicit",
        "mean_excess_implicit",
        "n_cases_explicit",
        "mean_excess_explicit",
        "excess_difference",
        "p_excess",
        "significant_excess",
        "unit",
        "n_units",
    ]
    return pd.DataFrame(rows, columns=columns)


def _units_relabelled(
    units: pd.DataFrame | None, case_cols: Sequence[str], group_col: str
) -> dict[str, object]:
    """The unit the implicit side's null relabels (its column) and how many units answered,
    across the cases of one ``by`` value; ``decision`` when every answer is its own unit (the
    count is then not known here: NA)."""
    if units is None:
        return {"unit": "decision", "n_units": pd.NA}
    unit_cols = [c for c in units.columns if c not in {*case_cols, group_col, "n_rows", "n", "k"}]
    answered = units[units["n"] > 0]
    return {"unit": "+".join(unit_cols), "n_units": len(answered.drop_duplicates(unit_cols))}
