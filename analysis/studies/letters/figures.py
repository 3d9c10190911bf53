"""The reference-letter figures: lexicon odds ratios with their intervals and the share of
positive / formal / agentic sentences per group with the paper's one-sided p; the style of
hallucinated sentences against whole letters; WEAT effect sizes of the salient words."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from biasim.analysis.figures import _p_text

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
    # Minor labels: all within a decade, 2s and 5s across a few, none across many (they would
    # run into each other).
    finite = np.concatenate([lexicon["ci_low"], lexicon["ci_high"], lexicon["odds_ratio"]])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    decades = np.log10(finite.max() / finite.min()) if len(finite) else 0.0
    keep = None if decades < 1 else (2, 5) if decades < 3 else ()

    def minor(v: float, _: int) -> str:
        mantissa = round(v / 10 ** np.floor(np.log10(v)))
        return f"{v:g}" if keep is None or mantissa in keep else ""

    left.xaxis.set_minor_formatter(minor if keep != () else NullFormatter())
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


def plot_hallucination(table: pd.DataFrame, groups: tuple[str, str], title: str) -> Figure:
    """Per style dimension and group, the mean share of the whole letters against that of
    their hallucinated sentences, with the paper's one-sided Student p and the paired p.

    Args:
        table: :func:`analysis.hallucination.hallucination_tests` records with a
            ``dimension`` column.
        groups: ``(first, second)``.
        title: The figure's title.
    """
    dims = list(dict.fromkeys(table["dimension"]))
    fig = Figure(figsize=(3.2 * len(dims) + 1, 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(dims), sharey=True))
    for ax, dim in zip(axes, dims, strict=True):
        part = table[table["dimension"] == dim].set_index("group")
        x = np.arange(2)
        for k, (col, shade) in enumerate((("mean_full", "#9aa7b8"), ("mean_hallucinated", None))):
            heights = [part.loc[g, col] if g in part.index else np.nan for g in groups]
            ax.bar(x + (k - 0.5) * 0.38, heights, 0.38, color=[shade or c for c in COLORS])
        ax.set_xticks(
            x,
            [
                f"{g}\n{part.loc[g, 'h1'] if g in part.index else ''}\n"
                f"{_p_text(part.loc[g, 'p_student']) if g in part.index else ''}, "
                f"paired {_p_text(part.loc[g, 'p_paired']) if g in part.index else ''}"
                for g in groups
            ],
            fontsize=8,
        )
        ax.set_title(dim)
        ax.set_ylim(0, 1.15)
    axes[0].set_ylabel("share of sentences (mean)")
    axes[0].legend(
        handles=[
            Patch(color="#9aa7b8", label="whole letter"),
            Patch(color=COLORS[0], label=f"hallucinated ({groups[0]})"),
            Patch(color=COLORS[1], label=f"hallucinated ({groups[1]})"),
        ],
        loc="upper left",
        fontsize=8,
    )
    fig.suptitle(title)
    return fig


def plot_weat(table: pd.DataFrame, groups: tuple[str, str], title: str) -> Figure:
    """WEAT effect size of each test on the salient words, with its permutation p.

    Args:
        table: :func:`analysis.weat.salient_weat` output (``model_label`` optional).
        groups: ``(first, second)``: a positive effect puts each group's words nearer its own
            attribute set.
        title: The figure's title.
    """
    labels = [
        f"{r.test}" + (f" ({r.model_label})" if "model_label" in table.columns else "")
        for r in table.itertuples()
    ]
    # Room for two title lines and a wrapped reason under each test, however few the tests.
    fig = Figure(figsize=(7, max(3.6, 0.7 * len(table) + 2.4)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(table))[::-1]
    effect = table["effect_size"].astype(float).fillna(0.0)
    ax.barh(y, effect, color=["#4f81bd" if e >= 0 else "#c0504d" for e in effect])
    ax.axvline(0, color="#999999", linewidth=1)
    ax.set_xlim(-2.1, 2.1)
    ax.set_yticks(
        y,
        [
            f"{label}\n{_p_text(p) if e is None else textwrap.fill(str(e), 34)}"
            for label, p, e in zip(labels, table["p_value"], table["excluded"], strict=True)
        ],
    )
    ax.set_xlabel(
        f"WEAT effect size (> 0: {groups[0]}'s salient words nearer {groups[0]} attributes)"
    )
    # One centred title over the figure: an axes title centred over an axes pushed right by
    # long test labels would reach past the canvas.
    fig.suptitle(f"{title}\nSalient nouns and adjectives against attribute word sets")
    return fig
