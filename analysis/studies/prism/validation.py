"""PRISM against human ratings (Ding et al. 2024, section 3.4 and Figure 4a): the Spearman
correlation of each dimension's scores with ratings people gave the same texts (the paper's
experts rated job advertisements on an ordinal scale, 7 neutral, below feminine, above
masculine, and report rho = 0.853).

The interval is Fisher's z with Bonett and Wright's (2000) standard error for Spearman's rho,
``sqrt((1 + rho^2 / 2) / (n - 3))``; the unit is the rated text (texts are taken as
independent, so a text rated twice should be given once, with its mean rating).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from biasim.analysis.figures import _finish

#: Fewest rated texts a correlation is reported on (the interval needs n > 3).
MIN_RATED = 4


def spearman_interval(
    x: np.ndarray, y: np.ndarray, level: float = 0.95
) -> tuple[float, float, float]:
    """Spearman's rho of ``x`` and ``y`` and its Fisher-z interval (Bonett-Wright SE).

    Returns:
        ``(rho, low, high)``; NaN when fewer than :data:`MIN_RATED` pairs or a side is constant.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n < MIN_RATED or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan
    rho = float(stats.spearmanr(x, y).statistic)
    z = math.atanh(min(max(rho, -0.999999), 0.999999))
    half = stats.norm.ppf(0.5 + level / 2) * math.sqrt((1 + rho**2 / 2) / (n - 3))
    return rho, math.tanh(z - half), math.tanh(z + half)


def rating_correlations(scores: pd.DataFrame, ratings: pd.Series, dims: list[str]) -> pd.DataFrame:
    """Per dimension: rated texts scored, Spearman rho with the ratings and its 95 % interval.

    Args:
        scores: One row per rated text, a column per dimension (NaN for a text not scored).
        ratings: The ratings, aligned with ``scores``.
        dims: Dimensions to report.
    """
    rows = []
    for dim in dims:
        both = pd.DataFrame({"score": scores[dim].to_numpy(), "rating": ratings.to_numpy()})
        both = both.dropna()
        rho, low, high = spearman_interval(both["score"], both["rating"])
        rows.append(
            {"dimension": dim, "n": len(both), "spearman_rho": rho, "low": low, "high": high}
        )
    return pd.DataFrame(rows)


def plot_validation(
    scores: pd.DataFrame,
    ratings: pd.Series,
    table: pd.DataFrame,
    names: dict[str, str],
    path: str | Path | None = None,
) -> Figure:
    """Figure 4a: each dimension's PRISM score against the human rating of the same texts.

    Args:
        scores: One row per rated text, a column per dimension.
        ratings: The ratings.
        table: :func:`rating_correlations` (the annotation of each panel).
        names: Dimension -> title.
    """
    dims = table["dimension"].tolist()
    cols = min(len(dims), 2)
    rows = math.ceil(len(dims) / cols)
    fig = Figure(figsize=(5.2 * cols, 4.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[len(dims) :]:
        ax.set_visible(False)
    for ax, row in zip(axes, table.itertuples(), strict=False):
        ax.scatter(ratings, scores[row.dimension], s=22, color="#4f81bd", alpha=0.8)
        text = (
            f"Spearman ρ = {row.spearman_rho:.3f} (95 % CI {row.low:.3f} to {row.high:.3f})"
            if np.isfinite(row.spearman_rho)
            else f"no correlation: fewer than {MIN_RATED} texts, or one side constant"
        )
        # Above the panel, not over the points.
        title = f"{names.get(row.dimension, row.dimension)}\n{text}, n = {row.n}"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("Human rating")
        ax.set_ylabel("PRISM bias score")
    return _finish(fig, path)
