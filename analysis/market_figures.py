"""Figures of a labour market over cycles, from the tables of ``analysis.stats.market``.

* trajectories: ``measure``, ``cycle``, ``group``, ``mean``, ``ci_low``, ``ci_high``
  (:func:`analysis.stats.market.trajectory`);
* funnel: ``cycle``, ``group``, ``applicants``, ``hires`` (:func:`analysis.stats.market.funnel`).

Built without pyplot, as every figure of ``analysis.figures``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, PercentFormatter

from biasim.analysis.figures import FUNNEL_MARKERS, _finish

#: Panel titles of the trajectories, per measure of the trajectory table.
PANELS = {
    "hires": "Share of the cycle's hires",
    "workforce": "Share of the workforce (end of cycle)",
    "readers": "Share of the cycle's decision-makers",
}


def plot_market_trajectories(
    trajectory: pd.DataFrame,
    by: str,
    band: str,
    population: Mapping[str, float] | None = None,
    *,
    path: str | Path | None = None,
) -> Figure:
    """One panel per measure (hires, workforce, decision-makers): each group's mean share per
    cycle as a line, its interval as a shaded band, and its share of the applicant population
    as a dotted line of the same colour.

    Args:
        trajectory: The trajectory table (see the module docstring).
        by: The persona axis whose values are the groups (legend title).
        band: What the band is, printed under the panels (e.g. ``95% t interval of the mean
            over 20 replicate markets``; with one market there is none: say why).
        population: Group -> its share of the applicant population (the dotted lines).
        path: When given, the PNG is written there.
    """
    groups = list(dict.fromkeys(trajectory["group"]))
    fig = Figure(figsize=(11.5, 4.4), layout="constrained")
    axes = fig.subplots(1, len(PANELS), sharey=True)
    for ax, (measure, title) in zip(axes, PANELS.items(), strict=True):
        rows = trajectory[trajectory["measure"] == measure]
        for i, group in enumerate(groups):
            line = rows[rows["group"] == group].sort_values("cycle")
            color = f"C{i}"
            ax.fill_between(
                line["cycle"],
                line["ci_low"].astype(float),
                line["ci_high"].astype(float),
                color=color,
                alpha=0.18,
                linewidth=0,
            )
            ax.plot(
                line["cycle"],
                line["mean"],
                color=color,
                marker=FUNNEL_MARKERS[i % len(FUNNEL_MARKERS)],
                markersize=4,
                linewidth=1.8,
            )
            if population and group in population:
                # Groups with the same population share would hide each other's line.
                shared = list(population.values()).count(population[group]) > 1
                ax.axhline(
                    population[group],
                    color="#666666" if shared else color,
                    linestyle=":",
                    linewidth=1.2,
                )
        ax.set_title(title, fontsize=10.5)
        ax.set_xlabel("cycle (0 = initial workforce)" if measure == "workforce" else "cycle")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 1)
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
        ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel(f"mean share of each {by}")
    fig.legend(
        handles=_trajectory_handles(
            groups, bool(trajectory["ci_low"].notna().any()), population is not None
        ),
        loc="outside right center",
        title=by,
        frameon=False,
        fontsize=9,
    )
    fig.suptitle(f"Composition by {by} over the cycles", fontsize=12)
    fig.supxlabel(f"line = mean share; band = {band}", fontsize=9, color="#444444")
    return _finish(fig, path)


def _trajectory_handles(groups: Sequence[str], band: bool, population: bool) -> list:
    handles: list = [
        Line2D([], [], color=f"C{i}", marker=FUNNEL_MARKERS[i % len(FUNNEL_MARKERS)], label=g)
        for i, g in enumerate(groups)
    ]
    if band:
        handles.append(Patch(color="#888888", alpha=0.3, label="band: interval"))
    if population:
        handles.append(Line2D([], [], color="#888888", linestyle=":", label="population share"))
    return handles


def plot_market_funnel(
    funnel: pd.DataFrame, by: str, markets: int, *, path: str | Path | None = None
) -> Figure:
    """Per cycle, one bar per group: its applicants (light) with its hires drawn inside the
    same bar (dark; hires are some of the applicants), summed over the replicate markets.

    Args:
        funnel: The funnel table (see the module docstring).
        by: The persona axis whose values are the groups.
        markets: How many replicate markets the counts sum over (named on the axis).
        path: When given, the PNG is written there.
    """
    groups = list(dict.fromkeys(funnel["group"]))
    cycles = sorted(funnel["cycle"].unique())
    width = 0.8 / max(len(groups), 1)
    fig = Figure(figsize=(min(11.5, max(6.5, 0.4 * len(cycles) * len(groups) + 3)), 4.4))
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    x = np.arange(len(cycles))
    for i, group in enumerate(groups):
        rows = funnel[funnel["group"] == group].set_index("cycle").reindex(cycles, fill_value=0)
        offset = x - 0.4 + width * (i + 0.5)
        ax.bar(offset, rows["applicants"], width * 0.92, color=f"C{i}", alpha=0.3)
        ax.bar(offset, rows["hires"], width * 0.92, color=f"C{i}")
    ax.set_xticks(x, [str(c) for c in cycles])
    ax.set_xlabel("cycle")
    summed = "" if markets == 1 else f", summed over {markets} markets"
    ax.set_ylabel(f"people{summed}")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=f"C{i}", label=str(g)) for i, g in enumerate(groups)]
    handles += [
        Patch(facecolor="#444444", alpha=0.3, label="light: applied"),
        Patch(facecolor="#444444", label="dark: hired (of them)"),
    ]
    fig.legend(handles=handles, title=by, frameon=False, fontsize=9, loc="outside right center")
    ax.set_title(f"Applicants and hires per cycle, by {by}")
    return _finish(fig, path)
