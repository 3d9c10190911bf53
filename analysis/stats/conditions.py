"""Does the disparity differ between conditions? A permutation test for persona ablations.

In an ablation every agent (persona, index, replicate, design cell, model) acts once under each
condition (e.g. the attribute term only, a name only, a generated persona). Under the null
hypothesis that the condition does not change how an agent answers, the condition labels of one
agent's answers are exchangeable. Relabelling them within each agent, with the block engine of
:mod:`analysis.permutation`, keeps every agent's own propensity, its name shared across
conditions and its replicates in place, so the test stays exact with agent-level heterogeneity.
The statistic is the range of the demographic parity differences over the compared conditions
(``|DPD_a - DPD_b|`` for two): power goes to a difference in disparity, not in the overall rate.

Where the unit holds several personas (a name drawn for several), its answers are not
exchangeable among themselves (each persona has its own propensity), so the unit is relabelled
whole (``whole_units``): one random permutation of the condition levels per unit, applied to all
its answers. Under the null that is exact when each persona answers under every condition alike;
shuffling the answers within a name instead rejected 0.25 % at 0.05 (personas sd 1 within names).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from biasim.analysis.stats.disparity import adjust_family
from biasim.analysis.stats.parity import dpd_from_counts
from biasim.analysis.stats.permutation import block_permutation_sums, group_sums

# DPDs of different relabellings that agree to floating-point noise count as ties.
_TOL = 1e-12


def condition_difference_test(
    df: pd.DataFrame,
    *,
    condition_col: str,
    conditions: Sequence[str],
    group_col: str,
    outcome_col: str,
    match_col: str,
    n_permutations: int = 2000,
    seed: int = 0,
    whole_units: bool = False,
) -> dict[str, float | int | str]:
    """Permutation test of the range of DPDs over ``conditions``, labels relabelled per agent.

    Args:
        df: One row per answered decision (excluded answers removed beforehand).
        condition_col: Column naming the condition.
        conditions: The conditions compared (two or more), in report order.
        group_col: Column naming the persona group.
        outcome_col: Boolean column: the targeted decision was made.
        match_col: Column identifying the unit (in one group); its answers under the
            conditions are relabelled among themselves.
        n_permutations: Monte Carlo relabellings.
        seed: Seed of the relabellings.
        whole_units: Relabel each unit's conditions by one permutation of the levels (a unit
            holding several personas) instead of shuffling its answers' labels.

    Returns:
        ``compared`` (the conditions joined by `` vs ``), ``dpd_<condition>`` for each,
        ``spread`` (largest minus smallest DPD), ``n`` (answers), ``n_matched`` (agents answering
        under two or more compared conditions) and ``p_value`` ((1 + #{T* >= T}) / (B + 1);
        NaN when a condition has fewer than two groups with answers).

    Raises:
        ValueError: Fewer than two conditions, or an agent in two groups.
    """
    conditions = list(conditions)
    if len(conditions) < 2:
        raise ValueError("compare at least two conditions")
    data = df[df[condition_col].isin(conditions)]
    n_cond = len(conditions)
    c_code = pd.Categorical(data[condition_col], categories=conditions).codes.astype(np.int64)
    g_code, _ = pd.factorize(data[group_col].astype(str), sort=True)
    n_groups = int(g_code.max()) + 1 if g_code.size else 0
    block, agents = pd.factorize(data[match_col])
    group_of = np.full(len(agents), -1, dtype=np.int64)
    group_of[block] = g_code
    if (group_of[block] != g_code).any():
        bad = agents[block[group_of[block] != g_code][0]]
        raise ValueError(f"`{match_col}` value {bad!r} answers in more than one group")
    # An agent's answers share its group, so relabelling their conditions is relabelling the
    # (condition, group) cells: answers per cell stay fixed and positives move.
    cell = c_code * n_groups + g_code
    hit = data[outcome_col].to_numpy(dtype=np.int64)
    n = np.bincount(cell, minlength=n_cond * n_groups).reshape(n_cond, n_groups)
    k = group_sums(hit, cell, n_cond * n_groups).reshape(n_cond, n_groups)
    dpds = dpd_from_counts(k, n) if n_groups else np.full(n_cond, np.nan)
    pairs = np.unique(np.c_[block, c_code], axis=0)[:, 0] if len(data) else np.array([], int)
    result: dict[str, float | int | str] = {
        "compared": " vs ".join(conditions),
        **{f"dpd_{c}": float(d) for c, d in zip(conditions, dpds, strict=True)},
        "spread": float(dpds.max() - dpds.min()),
        "n": len(data),
        "n_matched": int((np.bincount(pairs) >= 2).sum()) if pairs.size else 0,
        "p_value": float("nan"),
    }
    if np.isnan(dpds).any():
        return result
    observed = dpds.max() - dpds.min()
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    exceed = 0
    if whole_units:
        nulls = _whole_unit_dpds(
            hit, c_code, block, group_of, (n_cond, n_groups), n_permutations, rng
        )
    else:
        nulls = (
            # Answers per (condition, group) are fixed, so every relabelling has every DPD.
            dpd_from_counts(sums.reshape(-1, n_cond, n_groups), n)
            for sums in block_permutation_sums(
                hit, cell, block.astype(np.int64), n_cond * n_groups, n_permutations, rng
            )
        )
    for null in nulls:
        # A relabelling leaving a condition with one group (whole units only) has no spread:
        # counted as extreme, so the p-value never shrinks for want of a DPD.
        spread = null.max(axis=-1) - null.min(axis=-1)
        exceed += int(np.count_nonzero(~(spread < observed - _TOL)))
    result["p_value"] = (1 + exceed) / (n_permutations + 1)
    return result


def _whole_unit_dpds(
    hit: np.ndarray,
    c_code: np.ndarray,
    block: np.ndarray,
    group_of: np.ndarray,
    shape: tuple[int, int],
    n_permutations: int,
    rng: np.random.Generator,
    chunk: int = 200,
):
    """DPDs per condition under relabellings of whole units: each draw permutes every unit's
    condition levels at once. Yields arrays ``(draws, conditions)``."""
    n_cond, n_groups = shape
    units = group_of.size
    k = np.zeros((units, n_cond))
    n = np.zeros((units, n_cond))
    np.add.at(k, (block, c_code), hit)
    np.add.at(n, (block, c_code), 1)
    member = np.zeros((units, n_groups))
    member[np.arange(units), group_of] = 1
    for done in range(0, n_permutations, chunk):
        rows = min(chunk, n_permutations - done)
        order = rng.random((rows, units, n_cond)).argsort(axis=2)
        k_moved = np.take_along_axis(np.broadcast_to(k, order.shape), order, axis=2)
        n_moved = np.take_along_axis(np.broadcast_to(n, order.shape), order, axis=2)
        yield dpd_from_counts(
            np.einsum("ruc,ug->rcg", k_moved, member), np.einsum("ruc,ug->rcg", n_moved, member)
        )


def condition_difference_tests(
    df: pd.DataFrame,
    *,
    condition_col: str,
    conditions: Sequence[str],
    case_cols: Sequence[str],
    group_col: str,
    outcome_col: str,
    match_col: str,
    n_permutations: int = 2000,
    adjust: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    whole_units: bool = False,
) -> pd.DataFrame:
    """:func:`condition_difference_test` per case: all conditions at once (when more than two),
    then every pair.

    The family for ``adjust`` is the whole table. Each test draws from its own seed, derived
    from ``seed`` and its position.

    Returns:
        One row per case and comparison: ``case_cols``, the test's fields (``dpd_<condition>``
        only for the conditions compared), ``p_adjusted`` and ``significant``.
    """
    conditions = list(conditions)
    comparisons = ([conditions] if len(conditions) > 2 else []) + [
        list(pair) for pair in combinations(conditions, 2)
    ]
    keys = list(case_cols)
    parts = df.groupby(keys, sort=False) if keys else [((), df)]
    out = []
    index = 0
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        for compared in comparisons:
            test = condition_difference_test(
                part,
                condition_col=condition_col,
                conditions=compared,
                group_col=group_col,
                outcome_col=outcome_col,
                match_col=match_col,
                n_permutations=n_permutations,
                seed=seed + 7919 * index,
                whole_units=whole_units,
            )
            out.append({**dict(zip(keys, key, strict=True)), **test})
            index += 1
    columns = [*keys, "compared", *(f"dpd_{c}" for c in conditions)]
    columns += ["spread", "n", "n_matched", "p_value"]
    table = adjust_family(pd.DataFrame(out, columns=columns), "p_value", adjust)
    table["significant"] = table["p_adjusted"] < alpha
    return table
