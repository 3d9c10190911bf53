"""Scores and rankings of a decision tool (analysis.audit.scores) against hand-computed values
and independent oracles: positions and top-k counts by hand, Wilson's interval by its closed
form checked on a textbook case, the Mann-Whitney p against full enumeration of the relabellings,
the sweep's rates and ratios by hand and its interval against eeoc.ratio_interval."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.audit.eeoc import ratio_interval
from biasim.analysis.audit.scores import (
    rank_positions,
    sweep_figure,
    threshold_sweep,
    wilson_interval,
)

SCORES = pd.DataFrame(
    {
        "sex": ["f", "f", "f", "m", "m", "m", "m"],
        "score": [0.9, 0.4, 0.2, 0.8, 0.7, 0.6, 0.4],
    }
)


def test_positions_and_top_k_by_hand() -> None:
    table = rank_positions(SCORES, "score", "sex", k=2).set_index("sex")
    # Ranking (1 = best): 0.9 f 1, 0.8 m 2, 0.7 m 3, 0.6 m 4, 0.4 f/m tie 5.5, 0.2 f 7.
    assert table.loc["f", "mean_position"] == pytest.approx((1 + 5.5 + 7) / 3)
    assert table.loc["m", "mean_position"] == pytest.approx((2 + 3 + 4 + 5.5) / 4)
    assert table.loc["f", "median_position"] == 5.5
    assert table.loc["m", "median_position"] == 3.5
    # Top 2 = scores >= 0.8: one woman of 3, one man of 4.
    assert table.loc["f", "n_top_k"] == 1 and table.loc["m", "n_top_k"] == 1
    assert table.loc["f", "top_k_rate"] == pytest.approx(1 / 3)
    low, high = wilson_interval(1, 3)
    assert (table.loc["f", "top_k_rate_ci_low"], table.loc["f", "top_k_rate_ci_high"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )


def test_wilson_interval_matches_its_closed_form() -> None:
    # 8 of 20, z = 1.96: [0.2188, 0.6134], worked by hand from the closed form.
    low, high = wilson_interval(8, 20)
    assert low == pytest.approx(0.2188, abs=2e-4) and high == pytest.approx(0.6134, abs=2e-4)
    assert wilson_interval(0, 5)[0] == 0.0 and math.isnan(wilson_interval(0, 0)[0])


def test_mann_whitney_p_matches_full_enumeration() -> None:
    df = pd.DataFrame(
        {"g": ["a"] * 4 + ["b"] * 5, "s": [3.1, 5.2, 1.0, 7.7, 2.2, 9.9, 8.1, 6.4, 4.0]}
    )
    p = rank_positions(df, "s", "g").set_index("g").loc["a", "mann_whitney_p"]
    ranks = df["s"].rank().to_numpy()
    observed = ranks[:4].sum()
    centre = 4 * 10 / 2
    sums = [ranks[list(c)].sum() for c in itertools.combinations(range(9), 4)]
    exact = np.mean([abs(s - centre) >= abs(observed - centre) - 1e-9 for s in sums])
    assert p == pytest.approx(exact)


def test_sweep_rates_and_ratios_by_hand(tmp_path) -> None:
    sweep = threshold_sweep(SCORES, "score", "sex", cutoffs=[0.5, 0.85, 1.0])
    at = sweep.set_index(["cutoff", "sex"])
    # At 0.5: women 1/3, men 3/4 (reference); ratio (1/3)/(3/4).
    assert at.loc[(0.5, "f"), "n_selected"] == 1 and at.loc[(0.5, "m"), "n_selected"] == 3
    assert at.loc[(0.5, "f"), "impact_ratio"] == pytest.approx((1 / 3) / (3 / 4))
    assert (
        at.loc[(0.5, "f"), "impact_ratio_ci_low"],
        at.loc[(0.5, "f"), "impact_ratio_ci_high"],
    ) == (
        pytest.approx(ratio_interval(1, 3, 3, 4)[0]),
        pytest.approx(ratio_interval(1, 3, 3, 4)[1]),
    )
    assert at.loc[(0.5, "m"), "impact_ratio"] == 1.0
    # At 0.85 only one woman is selected: men's ratio 0; at 1.0 no one, so no ratio.
    assert at.loc[(0.85, "m"), "impact_ratio"] == 0.0 and at.loc[(0.85, "f"), "impact_ratio"] == 1
    assert at.loc[[(1.0, "f"), (1.0, "m")], "impact_ratio"].isna().all()
    default = threshold_sweep(SCORES, "score", "sex")
    assert sorted(default["cutoff"].unique()) == sorted(
        np.unique(SCORES["score"].quantile([q / 10 for q in range(1, 10)]))
    )
    png = sweep_figure(sweep.dropna(), "sex", tmp_path / "sweep.png", "sweep")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_strata_are_ranked_apart() -> None:
    df = pd.concat([SCORES.assign(job="a"), SCORES.assign(job="b", score=SCORES["score"] + 10)])
    table = rank_positions(df, "score", "sex", by=["job"], k=2)
    assert len(table) == 4
    # Each job ranks its own applicants: positions as in the single-stratum case.
    assert (
        table.groupby("job")["mean_position"].apply(list).tolist()
        == [pytest.approx([(1 + 5.5 + 7) / 3, 3.625])] * 2
    )
