"""The market figures draw the numbers of their tables: one line per group at the mean shares,
a band at the interval (none with one market), a bar per group at its applicants and hires;
nothing a reader needs falls off the canvas."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection

from biasim.analysis import market_figures
from biasim.analysis.figures import add_banner
from biasim.analysis.stats import market as ms
from biasim.simulator.report.outputs import SYNTHETIC_NOTE
from tests.figure_bounds import clipped
from tests.unit.analysis.test_market_stats import TWO


def test_the_trajectories_draw_each_groups_mean_share_and_its_band() -> None:
    trajectory = ms.trajectory(TWO)
    fig = market_figures.plot_market_trajectories(
        trajectory, "sex", "95% t interval", {"f": 0.5, "m": 0.5}
    )
    assert [ax.get_title() for ax in fig.axes] == list(market_figures.PANELS.values())
    for ax, measure in zip(fig.axes, market_figures.PANELS, strict=True):
        rows = trajectory[trajectory["measure"] == measure]
        lines = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
        assert len(lines) == 2
        for line, group in zip(lines, ["f", "m"], strict=True):
            expected = rows[rows["group"] == group].sort_values("cycle")["mean"].to_numpy()
            assert np.allclose(line.get_ydata(), expected)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == 2
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["f", "m", "band: interval", "population share"]
    assert "band = 95% t interval" in fig._supxlabel.get_text()
    assert clipped(fig) == []


def test_one_market_has_no_band_and_says_so() -> None:
    one = ms.trajectory(TWO[TWO["replicate"] == 0])
    fig = market_figures.plot_market_trajectories(one, "sex", "none: one replicate market")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "band: interval" not in legend
    for ax in fig.axes:
        # No interval: the bands enclose nothing.
        assert [p for band in ax.collections for p in band.get_paths() if len(p.vertices)] == []
    assert "none: one replicate market" in fig._supxlabel.get_text()


def test_the_funnel_bars_are_the_applicants_and_hires() -> None:
    funnel = ms.funnel(TWO)
    fig = market_figures.plot_market_funnel(funnel, "sex", 2)
    ax = fig.axes[0]
    heights = [round(p.get_height()) for p in ax.patches]
    wide = funnel.set_index(["group", "cycle"])
    expected = []
    for group in ["f", "m"]:
        expected += [int(wide.loc[(group, c), "applicants"]) for c in (1, 2)]
        expected += [int(wide.loc[(group, c), "hires"]) for c in (1, 2)]
    assert heights == expected
    assert ax.get_ylabel() == "people, summed over 2 markets"
    assert clipped(fig) == []


def test_the_synthetic_banner_covers_no_legend() -> None:
    """The banner a synthetic run adds sits in a band of its own, above each figure's legend."""
    figures = [
        market_figures.plot_market_trajectories(ms.trajectory(TWO), "sex", "interval"),
        market_figures.plot_market_funnel(ms.funnel(TWO), "sex", 2),
    ]
    for fig in figures:
        add_banner(fig, SYNTHETIC_NOTE)
        FigureCanvasAgg(fig).draw()
        banner = fig.texts[-1].get_window_extent()
        for legend in fig.legends:
            assert not banner.overlaps(legend.get_window_extent())
        assert clipped(fig) == []
