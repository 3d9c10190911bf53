"""Two-group statistics of per-document sums with the unit of exchangeability respected.

Documents (letters) written by one writer, for one name, or from one biography share that unit's
habits: under "no group effect" the documents are not exchangeable one by one, their units are.
A unit either lies in one group (a writer who writes only for women: *nested*) or spans both
(a counterfactual pair, a writer who writes for both: *crossed*). The honest null differs:

* nested: relabel whole units between the groups (the unit's documents move together), and
  resample units within each group for an interval (cluster bootstrap);
* crossed: relabel documents within each unit (the unit's own level cancels), and resample whole
  units for an interval.

Both feed ``permutation.block_permutation_sums``, the one relabelling engine: this module only
arranges the values and blocks, so every per-document statistic that is a function of per-group
sums (odds ratios of hits over tokens, letter-weighted means of shares) gets its unit-aware
p-value and interval from the same code. Documents without a unit column are their own units.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasim.analysis.stats.parity import resampling_p_value
from biasim.analysis.stats.permutation import block_permutation_sums
from biasim.analysis.stats.units import smallest_p

NESTED = "nested"
CROSSED = "crossed"


@dataclass(frozen=True)
class UnitLayout:
    """How documents sit in units and groups, ready for relabelling and resampling.

    Attributes:
        layout: :data:`NESTED` (each unit in one group) or :data:`CROSSED` (some unit in both).
        unit: Unit code ``0 .. n_units - 1`` of each document.
        n_units: Number of units.
        units_per_group: Units in each group (nested), for the smallest reachable p.
    """

    layout: str
    unit: np.ndarray
    n_units: int
    units_per_group: tuple[int, int]

    @property
    def min_p(self) -> float:
        """The smallest p-value any data could give (one over the relabellings; 0 crossed,
        where each unit's documents are relabelled within it and the count is rarely small)."""
        return smallest_p(self.units_per_group) if self.layout == NESTED else 0.0


def unit_layout(code: np.ndarray, units: pd.Series | np.ndarray | None) -> UnitLayout:
    """The layout of documents with group ``code`` (0/1) in ``units`` (None: one per document).

    Raises:
        ValueError: A document has no unit, or the units mix the two layouts: some span both
            groups while others lie in one (neither relabelling is then valid for all of them).
    """
    code = np.asarray(code, dtype=np.int64)
    if units is None:
        ids = np.arange(code.size)
    else:
        ids = pd.factorize(pd.Series(np.asarray(units, dtype=object)))[0]
        if (ids < 0).any():
            raise ValueError(f"{int((ids < 0).sum())} documents have no unit")
    n_units = int(ids.max()) + 1 if ids.size else 0
    groups_of_unit = np.zeros((n_units, 2), dtype=bool)
    groups_of_unit[ids, code] = True
    spanning = groups_of_unit.all(axis=1)
    per_group = (int(groups_of_unit[:, 0].sum()), int(groups_of_unit[:, 1].sum()))
    if not spanning.any():
        return UnitLayout(NESTED, ids, n_units, per_group)
    if not spanning.all():
        raise ValueError(
            f"{int(spanning.sum())} of {n_units} units hold documents of both groups and the "
            "others of one only: relabelling whole units or relabelling within units would "
            "each be wrong for some of them"
        )
    return UnitLayout(CROSSED, ids, n_units, per_group)


def permuted_group_sums(
    values: np.ndarray,
    code: np.ndarray,
    layout: UnitLayout,
    n_permutations: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, Iterator[np.ndarray]]:
    """Observed per-group sums ``(2, m)`` of per-document ``values`` ``(N, m)``, and the same
    sums under relabellings that respect ``layout`` (chunks of ``(rows, 2, m)``)."""
    values = np.asarray(values)
    code = np.asarray(code, dtype=np.int64)
    observed = np.stack([values[code == 0].sum(0), values[code == 1].sum(0)])
    if layout.layout == NESTED:
        unit_values, unit_code = _unit_sums(values, code, layout)
        block = np.zeros(layout.n_units, dtype=np.int64)
        stream = block_permutation_sums(unit_values, unit_code, block, 2, n_permutations, rng)
    else:
        stream = block_permutation_sums(values, code, layout.unit, 2, n_permutations, rng)
    return observed, stream


def bootstrap_group_sums(
    values: np.ndarray,
    code: np.ndarray,
    layout: UnitLayout,
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per-group sums ``(n, 2, m)`` of ``n`` cluster-bootstrap resamples: units drawn with
    replacement within each group (nested), or whole units drawn with replacement (crossed)."""
    values = np.asarray(values)
    code = np.asarray(code, dtype=np.int64)
    if layout.layout == NESTED:
        unit_values, unit_code = _unit_sums(values, code, layout)
        sums = []
        for g in (0, 1):
            own = unit_values[unit_code == g]
            weights = rng.multinomial(len(own), np.full(len(own), 1 / len(own)), size=n)
            sums.append(weights @ own)
        return np.stack(sums, axis=1)
    weights = rng.multinomial(layout.n_units, np.full(layout.n_units, 1 / layout.n_units), size=n)
    per_doc = weights[:, layout.unit]
    return np.stack([per_doc[:, code == g] @ values[code == g] for g in (0, 1)], axis=1)


def _unit_sums(
    values: np.ndarray, code: np.ndarray, layout: UnitLayout
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's summed values and its group (nested layout: one group per unit)."""
    sums = np.zeros((layout.n_units, values.shape[1]), dtype=values.dtype)
    np.add.at(sums, layout.unit, values)
    unit_code = np.zeros(layout.n_units, dtype=np.int64)
    unit_code[layout.unit] = code
    return sums, unit_code


def mean_difference_test(
    shares: np.ndarray,
    code: np.ndarray,
    layout: UnitLayout,
    n_permutations: int,
    rng: np.random.Generator,
) -> float:
    """One-sided p of group 0's document-weighted mean share above group 1's, relabelling
    units as ``layout`` says: ``(1 + #{null >= observed}) / (1 + B)``."""
    values = np.column_stack([np.asarray(shares, dtype=float), np.ones(len(shares))])
    observed, stream = permuted_group_sums(values, code, layout, n_permutations, rng)
    draws = [_mean_gap(chunk) for chunk in stream]
    return resampling_p_value(np.concatenate(draws), float(_mean_gap(observed[None])[0]))


def _mean_gap(sums: np.ndarray) -> np.ndarray:
    """Group 0's mean minus group 1's from sums ``(rows, 2, [total, count])``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[:, 0, 0] / sums[:, 0, 1] - sums[:, 1, 0] / sums[:, 1, 1]


def repeats_within_groups(frame: pd.DataFrame, col: str, group_col: str) -> bool:
    """Whether ``col`` names units that repeat inside the groups: some value holds several
    rows, each value lies in one group, and every group has at least two values (one value per
    group is the group itself, e.g. Kelly and Joseph, not a unit that repeats)."""
    data = frame[[col, group_col]].dropna()
    if data.empty or data[col].nunique() == len(data):
        return False
    nested = bool((data.groupby(col)[group_col].nunique() == 1).all())
    return nested and bool((data.groupby(group_col)[col].nunique() >= 2).all())


def repeating_columns(frame: pd.DataFrame, group_col: str, skip: set[str]) -> list[str]:
    """Columns besides ``skip`` that look like units repeating within groups (writers, names):
    what a report warns about when no unit is given."""
    return [
        c
        for c in frame.columns
        if c not in skip and c != group_col and repeats_within_groups(frame, c, group_col)
    ]
