"""Swap labels relabelled within their counterfactual set: the null of a counterfactual design.

In a counterfactual design one writer answers the same prompt several times with only a name
or attribute swapped; the responses sharing that prompt are a *pair* (or a set). When the swap
changes nothing, the responses of a pair are exchangeable among themselves, whatever the writer
or the prompt does to all of them: so the null permutes the swap labels within each pair,
independently across pairs, and the pair is the unit of exchangeability. A writer's pairs stay
its own (each pair has one writer), so writer effects and names shared across pairs are kept as
the design made them. Every pair keeps its count of each label, so group sizes are fixed.

This yields each relabelling's labels rather than per-group sums
(``permutation.block_permutation_sums``, the engine of statistics that are functions of group
sums): the Wasserstein distance and the quantiles of a score distribution need to know which
responses each relabelling puts under each value.

Monte Carlo p-values are ``(1 + b) / (1 + B)`` (``parity.resampling_p_value``), except where
relabellings tie with the observed statistic (a share above a threshold, a quantile or a
decision of discrete scores): there the ties are broken at random (:func:`tie_broken_p_value`),
which makes the test's size exactly alpha instead of well below it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from biasim.analysis.stats.units import log_factorial

# Labels permuted at once: 4 Mi values per temporary array.
_CHUNK_ELEMENTS = 1 << 22


def within_pair_labels(
    labels: np.ndarray, pair: np.ndarray, n_permutations: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Relabellings of ``labels`` that permute them within each ``pair`` code independently.

    Yields:
        Arrays of shape ``(rows, len(labels))``, ``n_permutations`` rows in all.
    """
    labels, pair = np.asarray(labels), np.asarray(pair)
    order = np.argsort(pair, kind="stable")
    block = pair[order].astype(float)
    n = labels.size
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // max(1, n))
    for done in range(0, n_permutations, rows_per_chunk):
        rows = min(rows_per_chunk, n_permutations - done)
        # A uniform key in [0, 1) added to the block code sorts rows within their block only.
        shuffled = np.argsort(rng.random((rows, n)) + block, axis=1)
        out = np.empty((rows, n), dtype=labels.dtype)
        out[:, order] = labels[order][shuffled]
        yield out


#: What a p whose ties were broken at random says beside it.
TIES_NOTE = "ties with the observed value broken at random (randomized p: exact size)"


def tie_broken_p_value(
    null: np.ndarray, observed: float, u: float, tolerance: float = 1e-12
) -> tuple[float, bool]:
    """Monte Carlo p with the observed value's ties broken at random, and whether any tied.

    The observed statistic is one of ``1 + B`` exchangeable draws under the null; ranking it
    among them with ties ordered at random makes its rank uniform, so ``P(p <= alpha)`` is
    alpha (up to ``1 / (1 + B)``) however discrete the statistic. Without ties this is the
    usual ``(1 + #{null >= observed}) / (1 + B)``, so continuous statistics keep their p.

    Args:
        null: The statistic under each relabelling (larger: more extreme).
        observed: The statistic of the data.
        u: A uniform draw in [0, 1) (seeded by the caller, so the p is reproducible).
        tolerance: Draws this close to ``observed`` are ties.
    """
    draws = np.asarray(null, dtype=float)
    above = int(np.count_nonzero(draws > observed + tolerance))
    ties = int(np.count_nonzero(np.abs(draws - observed) <= tolerance))
    if ties == 0:
        return (1 + above) / (1 + draws.size), False
    # The observed and its `ties` equals fill ranks above+1 .. above+ties+1 in random order.
    return (above + 1 + np.floor(u * (ties + 1))) / (1 + draws.size), True


def distinct_relabellings_log(labels: np.ndarray, pair: np.ndarray) -> float:
    """Log of how many distinct labellings the within-pair null can give (per pair, the
    multinomial coefficient of its label counts; multiplied over pairs)."""
    labels, pair = np.asarray(labels), np.asarray(pair)
    _, pair_code = np.unique(pair, return_inverse=True)
    _, label_code = np.unique(labels, return_inverse=True)
    counts = np.zeros((pair_code.max() + 1, label_code.max() + 1))
    np.add.at(counts, (pair_code, label_code), 1)
    return float((log_factorial(counts.sum(axis=1)) - log_factorial(counts).sum(axis=1)).sum())


def unreachable_note(labels: np.ndarray, pair: np.ndarray, alpha: float = 0.05) -> str | None:
    """Why no p below ``alpha`` is possible (too few distinct relabellings), or None."""
    log_ways = distinct_relabellings_log(labels, pair)
    if log_ways < np.log(1 / alpha):
        return (
            f"only {np.exp(log_ways):.0f} distinct relabellings within pairs: "
            f"no p below {alpha:g} is possible"
        )
    return None
