"""Decision rates by group and the demographic parity difference with its binomial null test.

Follows Li, Shirado & Das (2025), section 3.3: DPD is the largest minus the smallest rate of the
targeted decision across groups; its significance comes from simulating DPD under parity, each
group's count drawn from a binomial with the pooled rate, and comparing the observed DPD with the
95th percentile of the simulated values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

_Z95 = 1.959963984540054
_TIE = 1e-12


def group_rates(
    df: pd.DataFrame,
    by: str | Sequence[str],
    outcome: str,
    target: str,
    *,
    confidence_z: float = _Z95,
) -> pd.DataFrame:
    """Rate of ``outcome == target`` per group, with Wilson score intervals.

    Only rows with a valid answer count (``valid`` true when the column exists); rows whose
    group value is missing are left out.

    Returns:
        One row per group: the group columns, ``n`` (valid answers), ``k`` (targeted decisions),
        ``rate``, ``ci_low``, ``ci_high``.
    """
    keys = [by] if isinstance(by, str) else list(by)
    data = df[df["valid"].astype(bool)] if "valid" in df.columns else df
    data = data.dropna(subset=keys)
    hit = (data[outcome] == target).astype(int)
    grouped = hit.groupby([data[k] for k in keys], sort=True)
    out = pd.DataFrame({"n": grouped.size(), "k": grouped.sum()}).reset_index()
    out["rate"] = out["k"] / out["n"]
    low, high = wilson_interval(out["k"].to_numpy(), out["n"].to_numpy(), confidence_z)
    out["ci_low"], out["ci_high"] = low, high
    return out


def wilson_interval(k: np.ndarray, n: np.ndarray, z: float = _Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for ``k`` successes in ``n`` trials (element-wise)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    p = np.divide(k, n, out=np.zeros_like(k), where=n > 0)
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return centre - half, centre + half


def dpd_from_counts(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The demographic parity difference along the last axis: ``max - min`` of ``k / n`` over
    the groups with an answer (``n > 0``).

    The one definition every test uses. Fewer than two answered groups give NaN, never 0: a
    single group has no disparity to measure, and 0 would read as "measured parity".
    """
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    answered = n > 0
    rate = np.divide(k, n, out=np.zeros(k.shape), where=answered)
    high = np.where(answered, rate, -np.inf).max(axis=-1)
    low = np.where(answered, rate, np.inf).min(axis=-1)
    with np.errstate(invalid="ignore"):
        return np.where(answered.sum(axis=-1) >= 2, high - low, np.nan)


def resampling_p_value(null: np.ndarray, observed: float, *, tolerance: float = _TIE) -> float:
    """Monte Carlo p-value ``(1 + #{null >= observed}) / (1 + B)``: the observed data count as
    one draw, so the test is exact at any ``B`` and never prints 0 (Phipson & Smyth 2010).
    Draws within ``tolerance`` of the observed value are ties and count as extreme."""
    draws = np.asarray(null, dtype=float)
    return float((1 + np.count_nonzero(draws >= observed - tolerance)) / (1 + draws.size))


def demographic_parity_difference(rates: Sequence[float] | np.ndarray) -> float:
    """``max(rate) - min(rate)`` over groups."""
    values = np.asarray(rates, dtype=float)
    if values.size == 0:
        raise ValueError("demographic parity difference needs at least one group")
    return float(values.max() - values.min())


def parity_null_dpd(
    n: Sequence[int] | np.ndarray, pooled_rate: float, n_simulations: int, seed: int = 0
) -> np.ndarray:
    """DPD values simulated under parity: each group's count ~ Binomial(n_g, pooled rate)."""
    sizes = np.asarray(n, dtype=int)
    rng = np.random.default_rng(seed)
    counts = rng.binomial(sizes, pooled_rate, size=(n_simulations, sizes.size))
    rates = counts / sizes
    return rates.max(axis=1) - rates.min(axis=1)


@dataclass(frozen=True)
class ParityTest:
    """The DPD of a grouping and its test against parity.

    Attributes:
        dpd: Observed demographic parity difference.
        threshold: Critical value of DPD under the null (the paper's parity threshold): the
            DPD is significant exactly when it exceeds this.
        p_value: Share of null DPDs at least as large as the observed one.
        significant: ``p_value < alpha``, equivalently ``dpd > threshold``.
        pooled_rate: Targeted-decision rate over all groups.
        n_simulations: Simulations drawn.
    """

    dpd: float
    threshold: float
    p_value: float
    significant: bool
    pooled_rate: float
    n_simulations: int

    def as_dict(self) -> dict[str, float | bool | int]:
        """Plain-value view for JSON."""
        return asdict(self)


def critical_value(null: np.ndarray, alpha: float) -> float:
    """The largest simulated value ``v`` with ``share(null >= v) >= alpha``.

    An observed statistic is significant exactly when it exceeds this value (by more than
    floating-point noise), and then its p-value ``share(null >= observed)`` is below ``alpha``:
    threshold, p-value and flag can never disagree, as an interpolated quantile can. It is the
    paper's "95th percentile of the simulated DPDs" for ``alpha = 0.05``, read off the draws.
    """
    values = np.sort(np.asarray(null, dtype=float))[::-1]
    if values.size == 0:
        raise ValueError("the null distribution is empty")
    rank = max(1, int(np.ceil(alpha * values.size - 1e-9)))
    return float(values[min(rank, values.size) - 1])


def null_test(observed: float, null: np.ndarray, alpha: float) -> tuple[float, float, bool]:
    """Compare an observed DPD with DPDs simulated under the null.

    Returns:
        ``(threshold, p_value, significant)``: the critical value of the null
        (:func:`critical_value`, the paper's parity threshold), the share of simulated DPDs at
        least as large as the observed one, and ``p_value < alpha`` (equivalently, the observed
        DPD exceeds the threshold by more than floating-point noise).
    """
    threshold = critical_value(null, alpha)
    # Simulated and observed rates are the same fractions k/n: a DPD equal to a simulated one
    # up to rounding is a tie, never "larger".
    p_value = float(np.mean(null >= observed - _TIE))
    return threshold, p_value, bool(p_value < alpha)


def parity_test(
    n: Sequence[int] | np.ndarray,
    k: Sequence[int] | np.ndarray,
    *,
    alpha: float = 0.05,
    n_simulations: int = 10_000,
    seed: int = 0,
) -> ParityTest:
    """Test whether group rates ``k / n`` differ more than parity would explain."""
    sizes = np.asarray(n, dtype=int)
    hits = np.asarray(k, dtype=int)
    if sizes.size < 2 or (sizes <= 0).any():
        raise ValueError("the parity test needs at least two groups, each with an answer")
    pooled = float(hits.sum() / sizes.sum())
    observed = demographic_parity_difference(hits / sizes)
    null = parity_null_dpd(sizes, pooled, n_simulations, seed)
    threshold, p_value, significant = null_test(observed, null, alpha)
    return ParityTest(
        dpd=observed,
        threshold=threshold,
        p_value=p_value,
        significant=significant,
        pooled_rate=pooled,
        n_simulations=n_simulations,
    )


#: Outcomes of a unit in a results table.
STATUSES: tuple[str, ...] = ("answered", "invalid", "error", "skipped")


def status_rates(df: pd.DataFrame, by: str | Sequence[str]) -> pd.DataFrame:
    """Share of answered, invalid, error and skipped outcomes per group.

    A difference here is itself a bias signal: a model that refuses or garbles answers more for
    one group treats that group differently. ``skipped`` counts units that never ran because an
    earlier stage of the same agent gave no valid answer.
    """
    keys = [by] if isinstance(by, str) else list(by)
    # Only the columns counted: dropping rows from every column copied the whole results.
    data = df[[*dict.fromkeys(keys), "status"]].dropna(subset=keys)
    counts = pd.crosstab([data[k] for k in keys], data["status"])
    for status in STATUSES:
        if status not in counts.columns:
            counts[status] = 0
    out = counts[list(STATUSES)].copy()
    out.insert(0, "n", out.sum(axis=1))
    for status in STATUSES:
        out[f"{status}_rate"] = out[status] / out["n"]
    return out.reset_index()
