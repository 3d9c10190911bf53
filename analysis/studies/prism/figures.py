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
    scores: pd.DataFrame,
    dims: list[str],
    path: str | Path | None = None,
    baselines: pd.DataFrame | None = None,
) -> Figure:
    """Figure 5: histograms of posting and application scores per dimension, shared bins,
    with each side's no-gender-signal baseline (``dimension``, ``side``, ``baseline``) dashed."""
    fig, axes = _grid(len(dims))
    rows = {} if baselines is None else {(r.dimension, r.side): r for r in baselines.itertuples()}
    for ax, dim in zip(axes, dims, strict=True):
        x = scores[f"posting_{dim}"].dropna().to_numpy(float)
        y = scores[f"application_{dim}"].dropna().to_numpy(float)
        bins = np.histogram_bin_edges(np.r_[x, y], bins=30)
        ax.hist(x, bins=bins, color=POSTING_COLOR, alpha=0.55, label=f"Job postings (n = {len(x)})")
        ax.hist(
            y, bins=bins, color=APPLICATION_COLOR, alpha=0.55, label=f"Applications (n = {len(y)})"
        )
        ax.axvline(0, color="#555555", lw=0.8, ls=":")
        _draw_baselines(ax, [rows[dim, s] for s in ("posting", "application") if (dim, s) in rows])
        ax.set_title(NAMES.get(dim, dim), fontsize=11)
        ax.set_xlabel("Bias score (+ masculine, − feminine; read against the baseline)")
        ax.set_ylabel("Texts")
        ax.legend(fontsize=8)
    return _finish(fig, path)


def _draw_baselines(ax, rows: list) -> None:
    """Each side's baseline (dashed) and the null range of the mean score (grey band)."""
    if not rows:
        return
    low, high = min(r.low for r in rows), max(r.high for r in rows)
    ax.axvspan(low, high, color="#e8e8e8", zorder=0, label="95 % null of a mean (no gender signal)")
    for row in rows:
        color = POSTING_COLOR if row.side == "posting" else APPLICATION_COLOR
        label = f"{row.side} baseline {row.baseline:.2f}"
        ax.axvline(row.baseline, color=color, lw=1.3, ls="--", label=label)


def plot_models(table: pd.DataFrame, dims: list[str], path: str | Path | None = None) -> Figure:
    """Scores per dimension side by side across models (masked LMs: the paper's Figures 6-7
    as one comparison): each model's posting and application means as dots, and each side's
    no-gender-signal baseline as a tick inside its 95 % null range (grey bar).

    Args:
        table: :func:`simulator.kinds.sections.prism_baseline.models_table` rows.
        dims: Dimensions, one panel each.
    """
    fig, axes = _grid(len(dims))
    models = list(dict.fromkeys(table["model_label"]))
    for ax, dim in zip(axes, dims, strict=True):
        rows = table[table["dimension"] == dim].set_index("model_label")
        for i, model in enumerate(models):
            if model not in rows.index:
                continue
            row = rows.loc[model]
            for offset, side, color in (
                (-0.15, "posting", POSTING_COLOR),
                (0.15, "application", APPLICATION_COLOR),
            ):
                x = i + offset
                low, high = row.get(f"{side}_low"), row.get(f"{side}_high")
                if pd.notna(low) and pd.notna(high):
                    ax.vlines(x, low, high, color="#bbbbbb", lw=7, zorder=1)
                    ax.hlines(row[f"{side}_baseline"], x - 0.08, x + 0.08, color="#555555", lw=1.5)
                ax.scatter(
                    [x],
                    [row[f"{side}_mean"]],
                    color=color,
                    s=40,
                    zorder=3,
                    label=f"{side} mean" if i == 0 else None,
                )
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(_tick_labels(table, models), fontsize=8, rotation=15, ha="right")
        ax.set_xlim(-0.6, len(models) - 0.4)
        ax.set_title(NAMES.get(dim, dim), fontsize=11)
        ax.set_ylabel("Mean bias score")
    axes[0].plot([], [], color="#bbbbbb", lw=7, label="95 % null of the mean, no gender signal")
    axes[0].plot([], [], color="#555555", lw=1.5, label="baseline (its centre)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=9)
    return _finish(fig, path)


def _tick_labels(table: pd.DataFrame, models: list[str]) -> list[str]:
    """Each model's label, with its masked LM's folder or hub name when the table has one."""
    lm = table.drop_duplicates("model_label").set_index("model_label").get("masked_lm")
    out = []
    for model in models:
        name = str(lm[model]).rstrip("/").rsplit("/", 1)[-1] if lm is not None else ""
        out.append(f"{model}\n({name})" if name and name != model else model)
    return out
