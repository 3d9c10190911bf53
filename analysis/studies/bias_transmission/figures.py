"""The Bias-Transmission study's figures (seed 000): each job's share of female names by
dominance, and each job's trait differences between the two groups compared.

Built like ``analysis.figures`` (a ``Figure`` without pyplot, written as PNG when asked).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from biasim.analysis.figures import _finish

#: Colours of the paper's job categories; other categories take the palette in turn.
_KNOWN = {"female": "#c0504d", "male": "#4f81bd", "parity": "#7f7f7f"}
_COLORS = ("#9bbb59", "#8064a2", "#f79646", "#4bacc6")


def plot_item_shares(
    table: pd.DataFrame,
    *,
    panel: str | None,
    category: str | None,
    positive: str,
    measure: str = "pairings with a {positive} target",
    interval: str = "95% Wilson CI",
    path: str | Path | None = None,
) -> Figure:
    """One panel per ``panel`` value (e.g. experiment): each item's share with its 95% interval,
    items sorted by category then share, a dashed line at chance (0.5).

    Args:
        table: Item shares (``item``, ``share``, ``ci_low``, ``ci_high`` and the
            ``panel`` and ``category`` columns when given).
        panel: Column whose values get a panel each, or ``None`` for one panel.
        category: Column colouring the items (e.g. dominance), or ``None``.
        positive: The value the shares count, for the axis label.
        measure: What the share is of (``{positive}`` is filled in), for the axis label.
        interval: How the intervals were made, for the axis label.
        path: When given, the PNG is written there.

    Returns:
        The figure.
    """
    panels: Sequence[object] = list(dict.fromkeys(table[panel])) if panel else [None]
    most = max((int((table[panel] == p).sum()) if panel else len(table)) for p in panels)
    fig = Figure(figsize=(6.5 * len(panels), max(3.5, 0.22 * most + 1.6)), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    categories = list(dict.fromkeys(table[category])) if category else []
    others = iter(_COLORS * len(categories))
    colors = {c: _KNOWN.get(c) or next(others) for c in categories}
    for ax, value in zip(axes, panels, strict=True):
        rows = table if panel is None else table[table[panel] == value]
        order = [category, "share"] if category else ["share"]
        rows = rows.sort_values(order, ascending=True, kind="stable")
        y = np.arange(len(rows))
        color = [colors.get(c, "#333333") for c in rows[category]] if category else "#333333"
        errors = np.vstack([rows["share"] - rows["ci_low"], rows["ci_high"] - rows["share"]]).clip(
            min=0
        )
        ax.errorbar(rows["share"], y, xerr=errors, fmt="none", ecolor="#555555", capsize=2, lw=1)
        ax.scatter(rows["share"], y, c=color, s=22, zorder=3)
        ax.axvline(0.5, color="#999999", linestyle="--", linewidth=1)
        # The mark reads off the interval drawn beside it: the test's alpha or adjustment can
        # call an item "not different" whose 95% interval excludes 0.5, which reads as an error.
        covers = (rows["ci_low"] <= 0.5) & (rows["ci_high"] >= 0.5)
        labels = [
            f"{item}{' (ns)' if ns else ''}" for item, ns in zip(rows["item"], covers, strict=True)
        ]
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(
            f"share of {measure.format(positive=positive)} ({interval})\n"
            "(ns) = the interval includes chance (0.5)"
        )
        ax.grid(axis="x", color="#e6e6e6", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
        if value is not None:
            ax.set_title(str(value))
    if categories:
        handles = [
            axes[0].scatter([], [], c=colors[c], s=22, label=f"{category}: {c or 'none'}")
            for c in categories
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
    return _finish(fig, path)


def plot_trait_differences(
    differences: pd.DataFrame,
    *,
    panel: str,
    cluster: str,
    path: str | Path | None = None,
) -> Figure:
    """One panel per ``panel`` value: each trait's mean difference between the groups compared
    (e.g. men's letters minus women's), one marker per ``cluster`` value (job), a line at 0.

    Args:
        differences: ``panel``, ``cluster``, ``trait``, ``difference`` and ``label`` (what was
            subtracted from what, e.g. ``male - female``).
        panel: Column whose values get a panel each (e.g. the experiment).
        cluster: Column whose values get a marker colour each (the job).
        path: When given, the PNG is written there.

    Returns:
        The figure.
    """
    panels = list(dict.fromkeys(differences[panel]))
    traits = list(dict.fromkeys(differences["trait"]))
    fig = Figure(
        figsize=(max(6.0, 5.0 * len(panels)), 0.32 * len(traits) + 1.8), layout="constrained"
    )
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    clusters = list(dict.fromkeys(differences[cluster]))
    # A colour per job while they can be told apart; beyond that grey dots and their mean.
    few = len(clusters) <= 8
    y = {t: i for i, t in enumerate(reversed(traits))}
    for ax, value in zip(axes, panels, strict=True):
        rows = differences[differences[panel] == value]
        for j, name in enumerate(clusters):
            part = rows[rows[cluster] == name]
            offset = (j - (len(clusters) - 1) / 2) * 0.6 / max(len(clusters) - 1, 1)
            ax.scatter(
                part["difference"],
                [y[t] + offset for t in part["trait"]],
                s=18 if few else 8,
                color=f"C{j}" if few else "#9a9a9a",
                label=str(name) if few else None,
            )
        if not few:
            mean = rows.groupby("trait")["difference"].mean()
            ax.scatter(
                mean.to_numpy(),
                [y[t] for t in mean.index],
                s=40,
                color="black",
                marker="D",
                label=f"mean over {len(clusters)} {cluster}s",
                zorder=3,
            )
        ax.axvline(0, color="#999999", linestyle="--", linewidth=1)
        ax.set_yticks(list(y.values()), list(y.keys()), fontsize=8)
        ax.set_xlabel(f"mean score difference ({rows['label'].iloc[0]}), one dot per {cluster}")
        ax.grid(axis="x", color="#e6e6e6", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_title(str(value))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize=8)
    return _finish(fig, path)
