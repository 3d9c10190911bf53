"""The closed form of a small market: its composition is a Markov chain (the test oracle).

The market (as :data:`tests.market_studies.MARKET` declares it): two groups, a workforce of
``n``, each cycle one manager drawn uniformly from the workforce reads one pool of 2 applicants
drawn without replacement from the people of a population of ``m`` per group who are not
employed (an employee never applies; one who left applies again like anyone), and picks one
with probability proportional to a weight: ``weights[group]`` times ``in_group`` when the
author shares the manager's group. One employee drawn uniformly leaves, then the hire joins.
The state is the number of women in the workforce; the initial workforce is drawn without
replacement from the population (hypergeometric). Nothing here reads the engine.
With policies, each trajectory draws its applicants so, from the people it does not employ
(the engine's rule), so each trajectory is this chain, not only the base's.
"""

from __future__ import annotations

from math import comb

import numpy as np


def hire_probability(k: int, n: int, m: int, in_group: float, weights: dict[str, float]) -> float:
    """P(the cycle's hire is a woman | k women among n employees): the pool of 2 comes from
    the m - k women and m - (n - k) men out of work at the cycle's start."""
    women, men = m - k, m - (n - k)
    pairs = comb(women + men, 2)
    both_women, mixed = comb(women, 2) / pairs, women * men / pairs
    w_f, w_m = weights.get("female", 1.0), weights.get("male", 1.0)
    by_woman = w_f * in_group / (w_f * in_group + w_m)
    by_man = w_f / (w_f + w_m * in_group)
    return both_women + mixed * (k / n * by_woman + (1 - k / n) * by_man)


def transition_matrix(n: int, m: int, in_group: float, weights: dict[str, float]) -> np.ndarray:
    """P[k, k']: a woman leaves with probability k/n, a woman is hired with hire_probability."""
    matrix = np.zeros((n + 1, n + 1))
    for k in range(n + 1):
        leave, hire = k / n, hire_probability(k, n, m, in_group, weights)
        for left, p_left in ((1, leave), (0, 1 - leave)):
            for hired, p_hired in ((1, hire), (0, 1 - hire)):
                if p_left * p_hired > 0:  # (k = n: no man leaves; k = 0: no woman)
                    matrix[k, k - left + hired] += p_left * p_hired
    return matrix


def initial_distribution(n: int, m: int) -> np.ndarray:
    """Women among n employees drawn without replacement from m women and m men."""
    return np.array([comb(m, k) * comb(m, n - k) / comb(2 * m, n) for k in range(n + 1)])


def expected_trajectory(
    n: int, m: int, in_group: float, weights: dict[str, float], cycles: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle 1..cycles: the expected number of women at the end of the cycle and its
    variance, from the powers of the transition matrix."""
    matrix = transition_matrix(n, m, in_group, weights)
    states = np.arange(n + 1)
    dist = initial_distribution(n, m)
    means, variances = [], []
    for _ in range(cycles):
        dist = dist @ matrix
        mean = float(dist @ states)
        means.append(mean)
        variances.append(float(dist @ states**2) - mean**2)
    return np.array(means), np.array(variances)
