"""Adverse impact under the EEOC's Uniform Guidelines (29 CFR 1607.4(D)), from selection tables.

Section 1607.4(D) reads a selection rate under four-fifths of the highest group's rate as
evidence of adverse impact; smaller differences may still be adverse impact when they are
significant "in both statistical and practical terms", and larger ones may not be when they rest
on small numbers. Each category row of an LL144-style table (``n``, ``n_selected``,
``selection_rate``, ``impact_ratio``, ``excluded``) gains, against the highest-rate category of
its table and stratum (the reference):

* ``impact_ratio_ci_low`` / ``impact_ratio_ci_high``: a 95 % interval for the ratio of rates
  (Katz's log interval; 0.5 added to every cell when a count is 0 or full);
* ``two_sd_z``: the pooled two-proportion z (rate minus the reference rate, in standard
  deviations; the agencies and courts read |z| > 2 as significant);
* ``fisher_p``: Fisher's exact two-sided p for the 2 x 2 table category vs reference. Unit of
  exchangeability: the applicant; each row of the table is one applicant decided once;
* ``shortfall``: practical significance, the additional selections the category would need for
  its rate to reach four-fifths of the reference rate (0 when it does);
* ``flip_changes_conclusion``: the one-person test: whether one more selection in the category
  (when it is under four-fifths) or one fewer (when it is not) changes the four-fifths reading.

The reference row has ratio 1 by construction: its interval is [1, 1] and it has no test.
Plain pandas/numpy/scipy; nothing here imports the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import fisher_exact

FOUR_FIFTHS = 0.8
#: Two-sided 95 % normal quantile of the impact-ratio interval.
Z_95 = 1.959963984540054
# Rates are fractions k / n; an exact 4/5 must not flip on a rounding error.
_TOL = 1e-12

_OBJECT = frozenset({"reference", "shortfall", "flip_changes_conclusion"})
EEOC_COLUMNS: tuple[str, ...] = (
    "reference",
    "impact_ratio_ci_low",
    "impact_ratio_ci_high",
    "two_sd_z",
    "fisher_p",
    "shortfall",
    "flip_changes_conclusion",
)


def ratio_interval(k: int, n: int, k_ref: int, n_ref: int) -> tuple[float, float]:
    """Katz's 95 % log interval for ``(k / n) / (k_ref / n_ref)``.

    Every cell gains 0.5 (each total 1) when a count is 0 or equals its total, where the log
    variance is otherwise infinite or zero.
    """
    if min(k, k_ref) == 0 or k == n or k_ref == n_ref:
        k, n, k_ref, n_ref = k + 0.5, n + 1, k_ref + 0.5, n_ref + 1
    log_ratio = math.log((k / n) / (k_ref / n_ref))
    se = math.sqrt(1 / k - 1 / n + 1 / k_ref - 1 / n_ref)
    return math.exp(log_ratio - Z_95 * se), math.exp(log_ratio + Z_95 * se)


def two_sd_z(k: int, n: int, k_ref: int, n_ref: int) -> float:
    """Pooled two-proportion z of ``k / n`` against ``k_ref / n_ref`` (NaN when both rates
    are 0 or both are 1: no variation to measure)."""
    pooled = (k + k_ref) / (n + n_ref)
    variance = pooled * (1 - pooled) * (1 / n + 1 / n_ref)
    if variance <= 0:
        return float("nan")
    return (k / n - k_ref / n_ref) / math.sqrt(variance)


def shortfall(k: int, n: int, reference_rate: float) -> int:
    """Selections a category of ``n`` with ``k`` selected lacks to reach four-fifths of
    ``reference_rate``."""
    needed = math.ceil(FOUR_FIFTHS * reference_rate * n - _TOL)
    return max(0, needed - k)


def _below(k: int, n: int, top: float) -> bool:
    return top > 0 and (k / n) / top < FOUR_FIFTHS - _TOL


def flip_changes_conclusion(counts: Sequence[tuple[int, int]], i: int) -> bool:
    """Whether moving one selection changes row ``i``'s four-fifths reading.

    ``counts`` are the ``(selected, n)`` of the categories in the calculation; the highest rate
    is recomputed after the move, so a move that makes row ``i`` the highest is counted right.
    """
    rates = [k / n for k, n in counts]
    k, n = counts[i]
    below = _below(k, n, max(rates))
    moved = k + 1 if below else k - 1
    if not 0 <= moved <= n:
        return False
    rates[i] = moved / n
    return _below(moved, n, max(rates)) != below


def eeoc_columns(
    table: pd.DataFrame, by_cols: Sequence[str], category_cols: Sequence[str]
) -> pd.DataFrame:
    """The table with :data:`EEOC_COLUMNS` added, each row against the highest-rate category
    of its stratum among the rows not ``excluded``; excluded rows get none."""
    out = table.copy()
    # Object columns hold None where a row has no value, so the JSON and CSV say null/empty.
    for col in EEOC_COLUMNS:
        out[col] = pd.Series(
            None if col in _OBJECT else np.nan,
            index=out.index,
            dtype=object if col in _OBJECT else float,
        )
    parts = (
        [part.index for _, part in out.groupby(list(by_cols), sort=False)]
        if by_cols
        else [out.index]
    )
    for index in parts:
        rows = out.loc[index]
        _fill_stratum(out, rows[~rows["excluded"].astype(bool)], category_cols)
    return out


def _fill_stratum(out: pd.DataFrame, rows: pd.DataFrame, category_cols: Sequence[str]) -> None:
    if rows.empty:
        return
    counts = list(zip(rows["n_selected"].astype(int), rows["n"].astype(int), strict=True))
    rates = rows["n_selected"] / rows["n"]
    ref = rates.idxmax()
    k_ref, n_ref = int(rows.at[ref, "n_selected"]), int(rows.at[ref, "n"])
    label = " x ".join(str(rows.at[ref, c]) for c in category_cols)
    for position, (i, row) in enumerate(rows.iterrows()):
        k, n = int(row["n_selected"]), int(row["n"])
        out.at[i, "reference"] = label
        if k_ref == 0:  # no one selected anywhere: no ratio, no reading
            continue
        out.at[i, "shortfall"] = shortfall(k, n, k_ref / n_ref)
        out.at[i, "flip_changes_conclusion"] = flip_changes_conclusion(counts, position)
        if i == ref:
            out.at[i, "impact_ratio_ci_low"] = out.at[i, "impact_ratio_ci_high"] = 1.0
            continue
        low, high = ratio_interval(k, n, k_ref, n_ref)
        out.at[i, "impact_ratio_ci_low"], out.at[i, "impact_ratio_ci_high"] = low, high
        out.at[i, "two_sd_z"] = two_sd_z(k, n, k_ref, n_ref)
        out.at[i, "fisher_p"] = fisher_exact([[k, n - k], [k_ref, n_ref - k_ref]]).pvalue
