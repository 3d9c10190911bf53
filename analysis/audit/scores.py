"""Scores and rankings as answers of their own: what a résumé scorer or ranker does to each group.

A tool that scores (or ranks) applicants selects no one by itself; whoever uses it picks a
cut-off or the top k. Beside LL144's scoring rate (:mod:`biasim.analysis.audit.ll144`), an audit
of such a tool reads:

* :func:`rank_positions`: per category, the mean and median position in the ranking of the
  whole stratum (1 = the highest score; tied scores share their mean position), the share of the
  category in the top k with a Wilson 95 % interval, and a Mann-Whitney test of the category's
  scores against everyone else's. Unit of exchangeability: the applicant, each scored once (the
  caller withholds the p where applicants repeat);
* :func:`threshold_sweep`: at each cut-off, each category's selection rate (score at or above
  the cut-off) and impact ratio against the highest-rate category, with Katz's interval
  (:func:`biasim.analysis.audit.eeoc.ratio_interval`): how the four-fifths reading moves with a
  cut-off the vendor does not fix;
* :func:`sweep_figure`: that sweep drawn, one line and band per category.

Plain pandas/numpy/scipy; nothing here imports the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from biasim.analysis.audit.eeoc import FOUR_FIFTHS, Z_95, ratio_interval

POSITION_COLUMNS: tuple[str, ...] = (
    "n",
    "mean_position",
    "median_position",
    "mean_score",
    "top_k",
    "n_top_k",
    "top_k_rate",
    "top_k_rate_ci_low",
    "top_k_rate_ci_high",
    "mann_whitney_p",
)
SWEEP_COLUMNS: tuple[str, ...] = (
    "cutoff",
    "n",
    "n_selected",
    "selection_rate",
    "impact_ratio",
    "impact_ratio_ci_low",
    "impact_ratio_ci_high",
)
#: Cut-offs of the default sweep: these quantiles of the stratum's scores.
SWEEP_QUANTILES: tuple[float, ...] = tuple(q / 10 for q in range(1, 10))


def wilson_interval(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95 % score interval for the proportion ``k / n`` (NaNs when ``n`` is 0)."""
    if n == 0:
        return float("nan"), float("nan")
    p, z2 = k / n, Z_95**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _strata(df: pd.DataFrame, by: Sequence[str]):
    if not by:
        yield (), df
        return
    for key, part in df.groupby(list(by), sort=False, observed=True):
        yield (key if isinstance(key, tuple) else (key,)), part


def rank_positions(
    df: pd.DataFrame,
    score_col: str,
    group_col: str,
    *,
    by: Sequence[str] = (),
    k: int | None = None,
) -> pd.DataFrame:
    """Each category's place in the ranking by ``score_col`` (higher is better), per stratum.

    Args:
        df: One row per applicant scored; rows with a missing score or group are left out.
        score_col: The tool's score.
        group_col: The category column (e.g. sex).
        by: Strata ranked separately (a model, a job).
        k: The top k read for ``top_k_rate``; default a tenth of the stratum, at least 1.

    Returns:
        The ``by`` columns, ``group_col`` and :data:`POSITION_COLUMNS`. ``n_top_k`` counts the
        category's applicants among the k best (ties at the k-th score all counted as in, so
        the top may hold more than k); ``mann_whitney_p`` is two-sided, the category against
        the rest of its stratum (NaN with one category).
    """
    rows = []
    known = df[df[score_col].notna() & df[group_col].notna()]
    for key, part in _strata(known, by):
        scores = part[score_col].astype(float)
        positions = scores.rank(ascending=False, method="average")
        top = k or max(1, len(part) // 10)
        kth = np.sort(scores.to_numpy())[::-1][min(top, len(part)) - 1]
        for value, members in part.groupby(group_col, sort=False, observed=True):
            mine = scores.loc[members.index]
            rest = scores.drop(members.index)
            n_top = int((mine >= kth).sum())
            low, high = wilson_interval(n_top, len(mine))
            p = mannwhitneyu(mine, rest, alternative="two-sided").pvalue if len(rest) else np.nan
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    group_col: value,
                    "n": len(mine),
                    "mean_position": float(positions.loc[members.index].mean()),
                    "median_position": float(positions.loc[members.index].median()),
                    "mean_score": float(mine.mean()),
                    "top_k": top,
                    "n_top_k": n_top,
                    "top_k_rate": n_top / len(mine),
                    "top_k_rate_ci_low": low,
                    "top_k_rate_ci_high": high,
                    "mann_whitney_p": float(p),
                }
            )
    return pd.DataFrame(rows, columns=[*by, group_col, *POSITION_COLUMNS])


def threshold_sweep(
    df: pd.DataFrame,
    score_col: str,
    group_col: str,
    *,
    by: Sequence[str] = (),
    cutoffs: Sequence[float] | None = None,
) -> pd.DataFrame:
    """Selection rates and impact ratios (with Katz's 95 % interval) at each cut-off.

    An applicant is selected at cut-off c when their score is at least c. The reference of
    each cut-off is the highest-rate category of the stratum; its ratio is 1 with interval
    [1, 1]; no ratio where no one is selected.

    Args:
        cutoffs: The cut-offs; default the :data:`SWEEP_QUANTILES` of each stratum's scores.

    Returns:
        The ``by`` columns, ``group_col`` and :data:`SWEEP_COLUMNS`, cut-off by cut-off.
    """
    rows = []
    known = df[df[score_col].notna() & df[group_col].notna()]
    for key, part in _strata(known, by):
        scores = part[score_col].astype(float)
        cuts = cutoffs if cutoffs is not None else np.unique(scores.quantile(SWEEP_QUANTILES))
        groups = scores.groupby(part[group_col], sort=False, observed=True)
        for cut in cuts:
            counts = {g: (int((s >= cut).sum()), len(s)) for g, s in groups}
            ref = max(counts, key=lambda g: counts[g][0] / counts[g][1])
            k_ref, n_ref = counts[ref]
            for value, (k_sel, n) in counts.items():
                ratio, low, high = _ratio(k_sel, n, k_ref, n_ref, value == ref)
                rows.append(
                    {
                        **dict(zip(by, key, strict=True)),
                        group_col: value,
                        "cutoff": float(cut),
                        "n": n,
                        "n_selected": k_sel,
                        "selection_rate": k_sel / n,
                        "impact_ratio": ratio,
                        "impact_ratio_ci_low": low,
                        "impact_ratio_ci_high": high,
                    }
                )
    return pd.DataFrame(rows, columns=[*by, group_col, *SWEEP_COLUMNS])


def _ratio(k: int, n: int, k_ref: int, n_ref: int, is_ref: bool) -> tuple[float, float, float]:
    if k_ref == 0:
        return float("nan"), float("nan"), float("nan")
    if is_ref:
        return 1.0, 1.0, 1.0
    return ((k / n) / (k_ref / n_ref), *ratio_interval(k, n, k_ref, n_ref))


def sweep_figure(sweep: pd.DataFrame, group_col: str, path: Path, title: str) -> Path:
    """The sweep drawn: each category's impact ratio against the cut-off, its interval as a
    band, the four-fifths line dashed. One panel; strata, if any, are drawn as separate lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    label_cols = [c for c in sweep.columns if c not in SWEEP_COLUMNS]
    for key, part in sweep.groupby(label_cols, sort=False, observed=True):
        label = " x ".join(map(str, key if isinstance(key, tuple) else (key,)))
        ax.plot(part["cutoff"], part["impact_ratio"], marker="o", label=label)
        ax.fill_between(
            part["cutoff"], part["impact_ratio_ci_low"], part["impact_ratio_ci_high"], alpha=0.2
        )
    ax.axhline(FOUR_FIFTHS, linestyle="--", color="grey", linewidth=1)
    ax.set_xlabel("cut-off (selected: score at or above it)")
    ax.set_ylabel("impact ratio (95% CI)")
    ax.set_title(title)
    ax.legend(title=group_col, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
