"""The figure of a counterfactual text analysis: each score's distribution under each swapped
value, the sets' responses side by side (beyond the seed papers, issue 47)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

#: The most texts drawn as dots per value (a random sample beyond): a scorer's few distinct
#: values (a stem count, a binary label) hide behind one box, and 16,800 dots are one blot.
DOTS = 2000


def plot_swap_scores(
    scores: pd.DataFrame,
    swap: str,
    columns: Sequence[str],
    title: str,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """One panel per score column: a box of the scores under each value of ``swap`` (the
    tails where audits find bias that means hide) over the texts as dots, with each value's
    count of scored texts; ``labels``: each column's y-axis label (what scored it). A score
    the same for every text says so in its panel rather than drawing a flat, empty box."""
    fig = Figure(figsize=(4.2 * max(len(columns), 1) + 0.8, 3.8), layout="constrained")
    axes = fig.subplots(1, max(len(columns), 1), squeeze=False)[0]
    values = sorted(scores[swap].astype(str).unique())
    rng = np.random.default_rng(0)
    for ax, column in zip(axes, columns, strict=False):
        data = [
            scores.loc[scores[swap].astype(str) == v, column].dropna().astype(float).to_numpy()
            for v in values
        ]
        _panel(ax, data, rng)
        ax.set_xticks(range(1, len(values) + 1))
        ax.set_xticklabels([f"{v}\n(n={len(d):,})" for v, d in zip(values, data, strict=True)])
        # The scores table names a scorer's value `<scorer>_value`; the panel names the scorer.
        ax.set_title(column.removesuffix("_value"))
        ax.set_ylabel((labels or {}).get(column, "score"))
    fig.suptitle(title)
    # matplotlib's box marks, said once for readers who do not know them.
    fig.supxlabel(
        "box: middle half of the texts' scores; line: median; triangle: mean\n"
        f"dots: the texts (at most {DOTS:,} per value, drawn at random), spread sideways",
        fontsize="small",
    )
    return fig


def _panel(ax: Axes, data: list[np.ndarray], rng: np.random.Generator) -> None:
    """The boxes and dots of one score, or a sentence when every text scores the same."""
    seen = np.unique(np.concatenate(data)) if any(len(d) for d in data) else np.array([])
    if len(seen) <= 1:
        said = f"every text scores {seen[0]:g}" if len(seen) else "no text scored"
        ax.text(
            0.5, 0.5, f"{said}:\nnothing differs", ha="center", va="center", transform=ax.transAxes
        )
        ax.set_yticks([])
        ax.set_xlim(0.5, len(data) + 0.5)
        return
    for i, d in enumerate(data, start=1):
        shown = d if len(d) <= DOTS else rng.choice(d, DOTS, replace=False)
        ax.scatter(
            i + rng.uniform(-0.3, 0.3, len(shown)),
            shown,
            s=6,
            alpha=0.35,
            color="tab:blue",
            linewidths=0,
            zorder=1,
        )
    ax.boxplot(data, showmeans=True, showfliers=False, zorder=2)
