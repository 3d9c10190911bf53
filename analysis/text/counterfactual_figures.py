"""The figure of a counterfactual text analysis: each score's distribution under each swapped
value, the sets' responses side by side (beyond the seed papers, issue 47)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure


def plot_swap_scores(scores: pd.DataFrame, swap: str, columns: Sequence[str], title: str) -> Figure:
    """One panel per score column: a box of the scores under each value of ``swap`` (the
    tails where audits find bias that means hide), with each value's count of scored texts."""
    fig = Figure(figsize=(4.2 * max(len(columns), 1) + 0.8, 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(columns), 1), squeeze=False)[0]
    values = sorted(scores[swap].astype(str).unique())
    for ax, column in zip(axes, columns, strict=False):
        data = [
            scores.loc[scores[swap].astype(str) == v, column].dropna().astype(float).to_numpy()
            for v in values
        ]
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(values) + 1))
        ax.set_xticklabels([f"{v}\n(n={len(d)})" for v, d in zip(values, data, strict=True)])
        # The scores table names a scorer's value `<scorer>_value`; the panel names the scorer.
        ax.set_title(column.removesuffix("_value"))
    fig.suptitle(title)
    # matplotlib's box marks, said once for readers who do not know them.
    fig.supxlabel(
        "box: middle half of the texts' scores; line: median; triangle: mean; circles: outliers",
        fontsize="small",
    )
    return fig
