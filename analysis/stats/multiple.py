"""Adjusting p-values over an explicitly declared family of tests.

One definition of each procedure, used by every analysis that reports a family of tests (groups
against the population, roles, distinctive terms).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _as_pvalues(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError("p-values must be a one-dimensional sequence")
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    return p


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error rate).

    Args:
        p_values: Unadjusted p-values of the family, in any order.

    Returns:
        Adjusted p-values in the input order; reject where ``adjusted <= alpha``.
    """
    p = _as_pvalues(p_values)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="mergesort")
    stepped = (m - np.arange(m)) * p[order]
    adjusted = np.minimum(np.maximum.accumulate(stepped), 1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out


def benjamini_hochberg(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg step-up adjustment (controls the false discovery rate).

    Args:
        p_values: Unadjusted p-values of the family, in any order.

    Returns:
        Adjusted p-values (q-values) in the input order; reject where ``adjusted <= alpha``.
    """
    p = _as_pvalues(p_values)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="mergesort")
    ranked = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out


def adjust(p_values: Sequence[float] | np.ndarray, method: str) -> np.ndarray:
    """Adjust by name: ``holm``, ``bh`` (Benjamini–Hochberg) or ``none``."""
    if method == "holm":
        return holm(p_values)
    if method == "bh":
        return benjamini_hochberg(p_values)
    if method == "none":
        return _as_pvalues(p_values).copy()
    raise ValueError(f"unknown adjustment `{method}`; use holm, bh or none")
