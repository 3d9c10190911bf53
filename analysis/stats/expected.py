"""Expected decisions: group means of a decision's probability (from log-probabilities), their
DPD and a permutation test with the persona instance as the unit.

A probability per call is a continuous propensity, so the binomial null of the sampled rates
does not apply. Under the null the units' group labels are exchangeable within a case: the DPD
of the pooled group means (sum of probabilities over answers) is recomputed under relabellings
of whole units, so replicates of one persona never count as independent draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ExpectedParity:
    """The DPD of expected decisions and its permutation test.

    Attributes:
        dpd: Largest minus smallest group mean probability.
        p_value: Share of relabellings (the observed one counted) with a DPD at least as large.
        n_permutations: Relabellings drawn.
        units: Units (persona instances) relabelled.
    """

    dpd: float
    p_value: float
    n_permutations: int
    units: int


def _dpd(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """DPD of each row of group sums and counts (groups without answers left out)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return np.nanmax(means, axis=-1) - np.nanmin(means, axis=-1)


def expected_parity_test(
    n_u: np.ndarray,
    s_u: np.ndarray,
    group_u: np.ndarray,
    *,
    n_permutations: int = 2000,
    seed: int = 0,
) -> ExpectedParity:
    """Test equal expected decisions across groups, units relabelled as wholes.

    Args:
        n_u: Answers (with a probability) per unit.
        s_u: Sum of the answers' probabilities per unit.
        group_u: Group code per unit (``0 .. G - 1``).
        n_permutations: Relabellings drawn.
        seed: Seed of the relabellings.

    Raises:
        ValueError: Fewer than two groups with answers.
    """
    n_u, s_u = np.asarray(n_u, dtype=float), np.asarray(s_u, dtype=float)
    g = np.asarray(group_u, dtype=np.int64)
    groups = int(g.max()) + 1 if g.size else 0
    counts = np.bincount(g, weights=n_u, minlength=groups)
    if (counts > 0).sum() < 2:
        raise ValueError("expected decisions need answers in at least two groups")
    observed = _dpd(np.bincount(g, weights=s_u, minlength=groups), counts)
    rng = np.random.default_rng(seed)
    labels = rng.permuted(np.tile(g, (n_permutations, 1)), axis=1)
    flat = (labels + groups * np.arange(n_permutations)[:, None]).ravel()
    size = groups * n_permutations
    sums = np.bincount(flat, weights=np.tile(s_u, n_permutations), minlength=size)
    ns = np.bincount(flat, weights=np.tile(n_u, n_permutations), minlength=size)
    null = _dpd(sums.reshape(n_permutations, groups), ns.reshape(n_permutations, groups))
    at_least = int((null >= observed - 1e-12).sum())
    return ExpectedParity(
        dpd=float(observed),
        p_value=(at_least + 1) / (n_permutations + 1),
        n_permutations=n_permutations,
        units=int(g.size),
    )
