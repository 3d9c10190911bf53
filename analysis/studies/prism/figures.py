"""PRISM's figures (Ding et al. 2024): Figure 3, the scatter density of application on posting
scores per dimension with the DBSCAN-filtered fit, and Figure 5, the histograms of both sides.

Inputs are the paired score table of :func:`analysis.prism_stats.prism_tables`
(``posting_<dim>``, ``application_<dim>``) and its ``fit`` table; figures are built without
pyplot and written with :func:`analysis.figures.save_figure`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from biasim.analysis.figures import _finish, _p_text
from biasim.analysis.studies.prism.stats import dbscan_inliers

POSTING_COLOR = "#4f81bd"
APPLICATION_COLOR = "#c0504d"
NAMES = {
    "psy": "Psychological cues",
    "role": "Role description",
    "wfc": "Work-family characteristics",
    "gsc": "Social characteristics",
}


def _grid(n: int) -> tuple[Figure, list]:
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(5.2 * cols, 4.4 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def plot_scatter_density(
    scores: pd.DataFrame, fits: pd.DataFrame, dims: list[str], path: str | Path | None = None
) -> Figure:
    """Figure 3: application vs posting score per dimension, darker where points are denser.

    DBSCAN outliers are drawn as grey crosses; the line and the annotation are the filtered
    fit (Pearson r with its p, slope, intercept, Spearman rho, the number of pairs removed).
    """
    fig, axes = _grid(len(dims))
    for ax, dim in zip(axes, dims, strict=True):
        pair = scores[[f"posting_{dim}", f"application_{dim}"]].dropna()
        x, y = pair.iloc[:, 0].to_numpy(float), pair.iloc[:, 1].to_numpy(float)
        keep = dbscan_inliers(x, y)
        if keep.any():
            ax.hexbin(x[keep], y[keep], gridsize=30, cmap="Blues", mincnt=1, bins="log")
        ax.scatter(x[~keep], y[~keep], marker="x", color="#999999", s=14, label="DBSCAN outlier")
        row = fits.query("dimension == @dim and dbscan").iloc[0]
        if np.isfinite(row["slope"]):
            grid = np.linspace(x[keep].min(), x[keep].max(), 2)
            ax.plot(grid, row["intercept"] + row["slope"] * grid, color="#222222", lw=1.4)
        fitted = (
            f"r = {row['pearson_r']:.3f} ({_p_text(row['pearson_p'])})\n"
            f"slope = {row['slope']:.3f}, intercept = {row['intercept']:.3f}\n"
            f"Spearman ρ = {row['spearman_rho']:.3f}\n"
            if np.isfinite(row["slope"])
            else "no fit: fewer than 3 pairs kept, or one side constant\n"
        )
        ax.text(
            0.03,
            0.97,
            fitted + f"n = {int(row['n'])}, removed = {int(row['removed'])}",
            transform=ax.transAxes,
            va="top",
            fontsize=8.5,
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "#cccccc"},
        )
        ax.set_title(NAMES.get(dim, dim), fontsize=11)
        ax.set_xlabel("Job posting bias score")
        ax.set_ylabel("Job application bias score")
        if (~keep).any():
            ax.legend(loc="lower right", fontsize=8)
    return _finish(fig, path)


def plot_histograms(
    scores: pd.DataFrame, dims: list[str], path: str | Path | None = None
) -> Figure:
    """Figure 5: histograms of posting and application scores per dimension, shared bins."""
    fig, axes = _grid(len(dims))
    for ax, dim in zip(axes, dims, strict=True):
        x = scores[f"posting_{dim}"].dropna().to_numpy(float)
        y = scores[f"application_{dim}"].dropna().to_numpy(float)
        bins = np.histogram_bin_edges(np.r_[x, y], bins=30)
        ax.hist(x, bins=bins, color=POSTING_COLOR, alpha=0.55, label=f"Job postings (n = {len(x)})")
        ax.hist(
            y, bins=bins, color=APPLICATION_COLOR, alpha=0.55, label=f"Applications (n = {len(y)})"
        )
        ax.axvline(0, color="#555555", lw=0.8, ls=":")
        ax.set_title(NAMES.get(dim, dim), fontsize=11)
        ax.set_xlabel("Bias score (negative feminine, positive masculine)")
        ax.set_ylabel("Texts")
        ax.legend(fontsize=8)
    return _finish(fig, path)
