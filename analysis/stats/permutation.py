"""Permutation tests whose exchangeable unit is a name, a persona or a single answer.

When the same names (or personas, or replicates of one prompt) answer in several strata, the
answers of one unit are not independent: a name the model happens to like is accepted more often
in every role. Tests that treat strata, or answers, as independent then reject far more often than
their level. The honest null permutes each *unit's* group label, once, and applies that one
relabelling to every stratum the unit answered in.

One engine serves every such test here: :func:`block_permutation_sums` relabels units within
blocks (units that answered in the same set of strata are exchangeable with each other) and sums
any per-unit values by group. The tests built on it:

* :func:`joint_permutation_test`: each group against the population (or a reference group),
  stratified, with one relabelling of units for all strata;
* :func:`parity_permutation_test`: the demographic parity difference with units as the
  exchangeable draws;
* :func:`tail_counts`: per-stratum tails of each group's rate (``analysis.disparity``).

Monte Carlo p-values are ``(1 + b) / (1 + B)``: the observed labelling counts as one permutation,
so a p-value is never 0 and the test is exact at any ``B`` (Phipson & Smyth 2010).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from biasim.analysis.stats.parity import (
    ParityTest,
    critical_value,
    dpd_from_counts,
    resampling_p_value,
)
from biasim.analysis.stats.units import log_factorial

# Elements of a permuted index matrix handled at once: 4 Mi values = 32 MiB per temporary array.
_CHUNK_ELEMENTS = 1 << 22
_LOW32 = (1 << 32) - 1
# Sums of floating-point residuals differ in their last bits between orderings; ties within this
# tolerance count as ties.
_TOL = 1e-9


def block_permutation_sums(
    values: np.ndarray,
    group: np.ndarray,
    block: np.ndarray,
    n_groups: int,
    n_permutations: int,
    rng: np.random.Generator,
) -> Iterator[np.ndarray]:
    """Per-group sums of unit values under random relabellings within blocks.

    Each relabelling permutes the units' group labels within every block independently, so each
    block keeps its number of units per group. Integer values stay integers (exact sums).

    Args:
        values: One row per unit, shape ``(U,)`` or ``(U, m)``.
        group: Group code ``0 .. n_groups - 1`` of each unit.
        block: Block code of each unit (all zeros: one block).
        n_groups: Number of group codes.
        n_permutations: Relabellings drawn.
        rng: Random generator.

    Yields:
        Arrays of shape ``(rows, n_groups)`` (or ``(rows, n_groups, m)``), ``rows`` relabellings
        at a time, ``n_permutations`` rows in all.
    """
    values = np.asarray(values)
    flat = values.ndim == 1
    v = values.reshape(values.shape[0], -1)
    units = v.shape[0]
    order = np.lexsort((group, block))
    v, g, b = v[order], np.asarray(group)[order], np.asarray(block)[order]
    new_block = np.r_[True, b[1:] != b[:-1]]
    block_starts = np.flatnonzero(new_block)
    block_ends = np.r_[block_starts[1:], units]
    cells = np.flatnonzero(new_block | np.r_[True, g[1:] != g[:-1]])
    cell_group = g[cells]
    per_group = [np.flatnonzero(cell_group == code) for code in range(n_groups)]
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // max(1, units * v.shape[1]))
    for done in range(0, n_permutations, rows_per_chunk):
        rows = min(rows_per_chunk, n_permutations - done)
        if v.shape[1] == 1:
            # One value per unit: shuffle the values themselves (no index gather), twice as fast.
            arranged = np.empty((rows, units, 1), dtype=v.dtype)
            for start, end in zip(block_starts, block_ends, strict=True):
                part = np.broadcast_to(v[start:end, 0], (rows, end - start))
                arranged[:, start:end, 0] = rng.permuted(part, axis=1)
        else:
            index = np.empty((rows, units), dtype=np.intp)
            for start, end in zip(block_starts, block_ends, strict=True):
                span = np.arange(start, end)
                index[:, start:end] = rng.permuted(np.broadcast_to(span, (rows, span.size)), axis=1)
            arranged = v[index]
        cell_sums = np.add.reduceat(arranged, cells, axis=1)
        sums = np.zeros((rows, n_groups, v.shape[1]), dtype=cell_sums.dtype)
        for code, where in enumerate(per_group):
            if where.size:
                sums[:, code] = cell_sums[:, where].sum(axis=1)
        yield sums[:, :, 0] if flat else sums


def group_sums(values: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group sums of unit values under the observed labels (the statistic's input)."""
    values = np.asarray(values)
    out = np.zeros((n_groups, *values.shape[1:]), dtype=values.dtype)
    np.add.at(out, np.asarray(group), values)
    return out


def tail_counts(
    n_u: np.ndarray,
    k_u: np.ndarray,
    g_u: np.ndarray,
    n_groups: int,
    n_permutations: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """How many relabellings give each group a rate >= and <= its observed rate (one block).

    Units with ``n_u`` answers and ``k_u`` positives are shuffled between groups whose sizes (in
    units) stay fixed; every group ``0 .. n_groups - 1`` must own a unit.
    """
    # n and k travel in one int64 (n in the high 32 bits): one gather moves both, and sums of
    # the packed values are the packed sums while sum(k) < 2**32.
    packed = (np.asarray(n_u, dtype=np.int64) << 32) | np.asarray(k_u, dtype=np.int64)
    observed = group_sums(packed, g_u, n_groups)
    n_obs, k_obs = observed >> 32, observed & _LOW32
    greater = np.zeros(n_groups, dtype=np.int64)
    less = np.zeros(n_groups, dtype=np.int64)
    block = np.zeros(packed.size, dtype=np.int64)
    for sums in block_permutation_sums(packed, g_u, block, n_groups, n_permutations, rng):
        n_p, k_p = sums >> 32, sums & _LOW32
        # d' >= d  <=>  k'/n' >= k/n  <=>  k' n >= k n': integer arithmetic, so ties are exact.
        lhs, rhs = k_p * n_obs, k_obs * n_p
        greater += (lhs >= rhs).sum(axis=0)
        less += (lhs <= rhs).sum(axis=0)
    return greater, less


def smallest_p(units: int, in_group: np.ndarray) -> np.ndarray:
    """Smallest two-sided p-value a permutation of ``units`` units can give a group of each size.

    A group of ``m`` units out of ``U`` has at most ``C(U, m)`` distinct memberships; the most
    extreme one is reached by at least one of them, so p >= 2 / C(U, m) (capped at 1).
    """
    m = np.asarray(in_group, dtype=float)
    log_ways = log_factorial(units) - log_factorial(m) - log_factorial(units - m)
    return np.minimum(1.0, 2.0 * np.exp(-log_ways))


def unit_cells(
    data: pd.DataFrame, unit_col: str, g: np.ndarray, s: np.ndarray, hit: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Collapse answers to (unit, stratum) cells.

    Returns:
        ``unit`` code per cell, ``stratum`` code per cell, ``n`` and ``k`` per cell, and the group
        code of each unit (indexed by unit code).

    Raises:
        ValueError: A unit occurs in more than one group.
    """
    u, _ = pd.factorize(data[unit_col])
    n_units = int(u.max()) + 1 if u.size else 0
    group_of = np.full(n_units, -1, dtype=np.int64)
    group_of[u] = g
    mixed = group_of[u] != g
    if mixed.any():
        bad = data[unit_col].to_numpy()[np.flatnonzero(mixed)[0]]
        raise ValueError(
            f"`{unit_col}` value {bad!r} occurs in more than one group; a unit must belong to "
            "exactly one group to be permuted as a unit"
        )
    n_strata = int(s.max()) + 1 if s.size else 1
    cell = u * n_strata + s
    codes, inverse = np.unique(cell, return_inverse=True)
    n = np.bincount(inverse, minlength=codes.size)
    k = np.bincount(inverse, weights=hit, minlength=codes.size).round().astype(np.int64)
    return codes // n_strata, codes % n_strata, n, k, group_of


def signature_blocks(units: pd.Series, strata: pd.Series) -> pd.Series:
    """Block code per unit value: units asked in exactly the same strata share a block.

    Pass every row a unit was *asked* in, answered or not: blocks built from answered rows
    alone would split units by where their answers happened to be invalid, down to one unit per
    block, and nothing could be relabelled. In a design where every name answers in every role
    this is one block (the joint relabelling); where each stratum has its own names it is one
    block per stratum (within-stratum tests).
    """
    frame = pd.DataFrame({"unit": units.to_numpy(), "stratum": strata.to_numpy()}).dropna()
    # A unit's rows repeat its strata (replicates, templates): one row per pair is enough, and
    # keeps the units in order of first appearance.
    frame = frame.drop_duplicates()
    signature = frame.groupby("unit", sort=False)["stratum"].agg(lambda s: tuple(sorted(set(s))))
    codes, _ = pd.factorize(signature)
    return pd.Series(codes.astype(np.int64), index=signature.index)


def unit_blocks(part: pd.DataFrame, unit_col: str, blocks: pd.Series | None) -> np.ndarray:
    """Block code of each unit in ``unit_cells`` order (one block when ``blocks`` is None)."""
    _, uniques = pd.factorize(part[unit_col])
    if blocks is None:
        return np.zeros(len(uniques), dtype=np.int64)
    return blocks.reindex(uniques).fillna(-1).to_numpy(dtype=np.int64)


def joint_permutation_test(
    data: pd.DataFrame,
    g: np.ndarray,
    groups: pd.DataFrame,
    s: np.ndarray,
    hit: np.ndarray,
    *,
    unit_col: str,
    reference: int | None = None,
    n_permutations: int = 5000,
    seed: int = 0,
    blocks: pd.Series | None = None,
) -> pd.DataFrame:
    """Each group against the population (or a reference group), stratified, units relabelled once.

    The statistic of group ``G`` is its excess of positive answers over what the strata it
    answered in would give it, ``T_G = sum over its answers of (y - p_s)`` with ``p_s`` the rate
    of stratum ``s`` among the compared units; ``d = T_G / n_G`` is the excess rate. Under the
    null the units' group labels are exchangeable, so the labels are permuted within blocks of
    units that answered in the same strata, and one relabelling applies to every stratum.

    Args:
        data: Answered rows, holding ``unit_col``.
        g: Group code of each row (indexing ``groups``).
        groups: The group values, one row per code.
        s: Stratum code of each row (all zeros without strata).
        hit: 1 where the row's answer is positive.
        unit_col: Column naming the exchangeable unit.
        reference: Group code compared against; None compares each group with the population.
        n_permutations: Monte Carlo relabellings.
        seed: Seed of the relabellings.
        blocks: Unit value -> block code (:func:`signature_blocks`); None relabels all units
            as one block.

    Returns:
        One row per group (the reference group excluded): the group columns, ``n``, ``k``,
        ``rate``, ``expected_rate`` (from its strata), ``d``, ``p_greater``, ``p_less``,
        ``p_two_sided``, ``n_units``, ``n_blocks``, ``smallest_p`` and ``n_permutations``.
    """
    n_groups = len(groups)
    rows = []
    targets = [c for c in range(n_groups) if c != reference]
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    # Versus the population all groups share one relabelling; versus a reference each pair is
    # its own comparison over the two groups' units.
    comparisons = [targets] if reference is None else [[c] for c in targets]
    for compared in comparisons:
        keep = np.isin(g, compared + ([reference] if reference is not None else []))
        part, gp, sp, hp = data[keep], g[keep], s[keep], hit[keep]
        cell_unit, cell_stratum, n, k, group_of = unit_cells(part, unit_col, gp, sp, hp)
        n_strata = int(sp.max()) + 1 if sp.size else 1
        stratum_rate = np.bincount(sp, weights=hp, minlength=n_strata) / np.maximum(
            np.bincount(sp, minlength=n_strata), 1
        )
        n_units = group_of.size
        residual = np.bincount(
            cell_unit, weights=k - n * stratum_rate[cell_stratum], minlength=n_units
        )
        expected = np.bincount(cell_unit, weights=n * stratum_rate[cell_stratum], minlength=n_units)
        answers = np.bincount(cell_unit, weights=n, minlength=n_units)
        block = unit_blocks(part, unit_col, blocks)
        observed = group_sums(residual, group_of, n_groups)
        greater = np.zeros(n_groups, dtype=np.int64)
        less = np.zeros(n_groups, dtype=np.int64)
        for sums in block_permutation_sums(
            residual, group_of, block, n_groups, n_permutations, rng
        ):
            greater += (sums >= observed - _TOL).sum(axis=0)
            less += (sums <= observed + _TOL).sum(axis=0)
        units_in = np.bincount(group_of, minlength=n_groups)
        answers_in = group_sums(answers, group_of, n_groups)
        expected_in = group_sums(expected, group_of, n_groups)
        for code in compared:
            n_g = float(answers_in[code])
            k_g = int(hp[gp == code].sum())
            p_g = (greater[code] + 1) / (n_permutations + 1)
            p_l = (less[code] + 1) / (n_permutations + 1)
            rows.append(
                {
                    **groups.iloc[code].to_dict(),
                    "n": int(n_g),
                    "k": k_g,
                    "rate": k_g / n_g if n_g else np.nan,
                    "expected_rate": expected_in[code] / n_g if n_g else np.nan,
                    "d": observed[code] / n_g if n_g else np.nan,
                    "p_greater": p_g,
                    "p_less": p_l,
                    "p_two_sided": min(1.0, 2 * min(p_g, p_l)),
                    "n_units": int(units_in[code]),
                    "n_blocks": int(np.unique(block).size),
                    "smallest_p": _smallest_in_blocks(block, group_of == code),
                    "n_permutations": n_permutations,
                }
            )
    columns = [*groups.columns, "n", "k", "rate", "expected_rate", "d", "p_greater", "p_less"]
    columns += ["p_two_sided", "n_units", "n_blocks", "smallest_p", "n_permutations"]
    return pd.DataFrame(rows, columns=columns)


def _smallest_in_blocks(block: np.ndarray, member: np.ndarray) -> float:
    """Smallest two-sided p a relabelling within blocks can give a group: 2 over the number of
    distinct memberships, the product over blocks of C(units in block, group's units in it)."""
    _, codes = np.unique(block, return_inverse=True)
    size = np.bincount(codes).astype(float)
    inside = np.bincount(codes, weights=member.astype(float), minlength=size.size)
    log_ways = log_factorial(size) - log_factorial(inside) - log_factorial(size - inside)
    return float(min(1.0, 2.0 * np.exp(-log_ways.sum())))


def parity_permutation_null(
    n_u: Sequence[int] | np.ndarray,
    k_u: Sequence[int] | np.ndarray,
    group_u: Sequence[int] | np.ndarray,
    *,
    block_u: Sequence[int] | np.ndarray | None = None,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> tuple[float, np.ndarray]:
    """The observed DPD of units' pooled group rates and its values under ``n_permutations``
    relabellings of the units' groups (within blocks); arguments as in
    :func:`parity_permutation_test`."""
    n_arr, k_arr = np.asarray(n_u, dtype=np.int64), np.asarray(k_u, dtype=np.int64)
    g = np.asarray(group_u, dtype=np.int64)
    n_groups = int(g.max()) + 1 if g.size else 0
    if n_groups < 2 or (np.bincount(g, minlength=n_groups) == 0).any():
        raise ValueError("the parity test needs at least two groups, each with a unit")
    block = np.zeros(g.size, dtype=np.int64) if block_u is None else np.asarray(block_u)
    packed = (n_arr << 32) | k_arr
    observed = group_sums(packed, g, n_groups)
    if ((observed >> 32) == 0).any():
        raise ValueError("the parity test needs an answer in every group")
    if _one_rate(n_arr, k_arr):
        # Every unit has the same rate (no answer invalid, say): every relabelling gives every
        # group that rate, so the null is all zeros, as drawing it would find, only slower.
        return float(_dpd(observed[None, :])[0]), np.zeros(n_permutations)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    null = np.concatenate(
        [
            _dpd(sums)
            for sums in block_permutation_sums(packed, g, block, n_groups, n_permutations, rng)
        ]
    )
    return float(_dpd(observed[None, :])[0]), null


def _one_rate(n: np.ndarray, k: np.ndarray) -> bool:
    """Whether every unit with an answer has the same rate ``k / n`` (exact, in integers)."""
    answered = n > 0
    n, k = n[answered], k[answered]
    return bool(n.size == 0 or (k * n[0] == k[0] * n).all())


def parity_permutation_test(
    n_u: Sequence[int] | np.ndarray,
    k_u: Sequence[int] | np.ndarray,
    group_u: Sequence[int] | np.ndarray,
    *,
    block_u: Sequence[int] | np.ndarray | None = None,
    alpha: float = 0.05,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> ParityTest:
    """The demographic parity difference tested with units (names, personas) as the draws.

    DPD is the largest minus the smallest pooled group rate ``sum(k) / sum(n)``. Under the null
    the units' group labels are exchangeable (within blocks), so DPD is recomputed under
    ``n_permutations`` relabellings; ``threshold`` is the critical value of that distribution
    and ``p_value`` counts the observed labelling as one relabelling.

    Args:
        n_u: Answers per unit.
        k_u: Positive answers per unit.
        group_u: Group code per unit (``0 .. G - 1``, every code present).
        block_u: Block code per unit (None: one block).
        alpha: Level of the test.
        n_permutations: Relabellings drawn.
        seed: Seed of the relabellings.
    """
    dpd, null = parity_permutation_null(
        n_u, k_u, group_u, block_u=block_u, n_permutations=n_permutations, seed=seed
    )
    n_arr, k_arr = np.asarray(n_u, dtype=np.int64), np.asarray(k_u, dtype=np.int64)
    p_value = resampling_p_value(null, dpd)
    threshold = critical_value(np.r_[null, dpd], alpha)
    return ParityTest(
        dpd=float(dpd),
        threshold=threshold,
        p_value=p_value,
        significant=bool(p_value < alpha),
        pooled_rate=float(k_arr.sum() / n_arr.sum()),
        n_simulations=n_permutations,
    )


def rate_permutation_null(
    n_u: Sequence[int] | np.ndarray,
    k_u: Sequence[int] | np.ndarray,
    group_u: Sequence[int] | np.ndarray,
    *,
    block_u: Sequence[int] | np.ndarray | None = None,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> np.ndarray:
    """Each group's pooled rate ``sum(k) / sum(n)`` under ``n_permutations`` relabellings of
    the units' groups within blocks, shape ``(n_permutations, G)``: the no-bias distribution
    of any statistic of the group rates (impact ratios, the four-fifths flag) when units,
    not answers, are the draws. A group whose relabelled units gave no answer has rate NaN."""
    n_arr, k_arr = np.asarray(n_u, dtype=np.int64), np.asarray(k_u, dtype=np.int64)
    g = np.asarray(group_u, dtype=np.int64)
    n_groups = int(g.max()) + 1 if g.size else 0
    block = np.zeros(g.size, dtype=np.int64) if block_u is None else np.asarray(block_u)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    draws = block_permutation_sums((n_arr << 32) | k_arr, g, block, n_groups, n_permutations, rng)
    packed = np.concatenate(list(draws))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (packed & _LOW32) / (packed >> 32)


def _dpd(packed_sums: np.ndarray) -> np.ndarray:
    """DPD of each row of packed (n, k) group sums (``parity.dpd_from_counts``)."""
    return dpd_from_counts(packed_sums & _LOW32, packed_sums >> 32)
