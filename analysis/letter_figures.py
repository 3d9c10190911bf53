"""The reference-letter figure: lexicon odds ratios with their intervals, and the share of
positive / formal / agentic sentences per group with the paper's one-sided p."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .figures import _p_text

COLORS = ("#4f81bd", "#c0504d")


def plot_letters(
    lexicon: pd.DataFrame, style: pd.DataFrame, groups: tuple[str, str], title: str
) -> Figure:
    """Two panels: odds ratio per lexicon category (log axis, bootstrap 95 % interval, > 1 =
    likelier in ``groups[0]``'s letters) and mean style share per group.

    Args:
        lexicon: :func:`analysis.lexicon.lexicon_odds_ratios` output.
        style: One row per style dimension with ``dimension``, ``mean_<group>``, ``sd_<group>``,
            ``n_<group>`` and ``p_student``.
        groups: ``(first, second)``.
        title: The figure's title.
    """
    fig = Figure(figsize=(11, 0.35 * max(len(lexicon), len(style), 4) + 2.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    y = np.arange(len(lexicon))[::-1]
    err = np.vstack(
        [lexicon["odds_ratio"] - lexicon["ci_low"], lexicon["ci_high"] - lexicon["odds_ratio"]]
    )
    left.errorbar(lexicon["odds_ratio"], y, xerr=err, fmt="o", color="#333333", capsize=3)
    left.axvline(1.0, color="#999999", linestyle="--", linewidth=1)
    left.set_xscale("log")
    # Plain numbers on the log axis (the default 10^x labels need mathtext fonts).
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.set_yticks(
        y,
        [
            f"{c} ({_p_text(p)})"
            for c, p in zip(lexicon["category"], lexicon["p_permutation"], strict=True)
        ],
    )
    left.set_xlabel(f"odds ratio, {groups[0]} / {groups[1]} (95 % bootstrap interval)")
    left.set_title("Lexicon categories (permutation p)")
    width = 0.38
    x = np.arange(len(style))
    for k, group in enumerate(groups):
        se = style[f"sd_{group}"] / np.sqrt(style[f"n_{group}"])
        right.bar(
            x + (k - 0.5) * width,
            style[f"mean_{group}"],
            width,
            yerr=1.96 * se,
            color=COLORS[k],
            label=group,
            capsize=3,
        )
    right.set_xticks(
        x,
        [f"{d}\n{_p_text(p)}" for d, p in zip(style["dimension"], style["p_student"], strict=True)],
    )
    right.set_ylim(0, 1.2)
    right.set_ylabel("share of sentences (mean, 95 % interval)")
    right.set_title(f"Language style ({groups[0]} > {groups[1]}, Student one-sided)")
    right.legend(loc="upper right", ncols=2)
    fig.suptitle(title)
    return fig
