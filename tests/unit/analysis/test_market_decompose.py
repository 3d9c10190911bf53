"""The drift decomposition of a market against hand-worked values."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.market_decompose import decompose_drift

SWITCHES = ("readers", "attrition")


def table(drift: dict[str, float], replicates: int = 1) -> pd.DataFrame:
    """A composition table of workforces of 20 that start 10 / 10, whose women's share at
    cycle 1 is 0.5 + ``drift[off]`` (replicate r adds r / 20 to every trajectory)."""
    rows = []
    for off, d in drift.items():
        for r in range(replicates):
            women = round(20 * (0.5 + d) + r)
            for cycle, w in ((0, 10), (1, women)):
                rows += [
                    ("base", off, r, cycle, "female", w),
                    ("base", off, r, cycle, "male", 20 - w),
                ]
    columns = ["policy", "off", "replicate", "cycle", "group", "workforce"]
    return pd.DataFrame(rows, columns=columns)


def test_two_switches_by_hand() -> None:
    """v(none) = 0.3, v(readers) = 0.1, v(attrition) = 0.2, v(both) = 0.05: alone, readers
    removes 0.2 and attrition 0.1; Shapley: readers (0.2 + 0.15) / 2 = 0.175, attrition
    (0.1 + 0.05) / 2 = 0.075, summing to 0.3 - 0.05."""
    drift = {"none": 0.3, "readers": 0.1, "attrition": 0.2, "readers|attrition": 0.05}
    out = decompose_drift(table(drift), SWITCHES).set_index(["group", "switch"])
    women = out.loc["female"]
    assert np.allclose(women.loc[["readers", "attrition"], "removed_alone"], [0.2, 0.1])
    assert np.allclose(women.loc[["readers", "attrition"], "shapley"], [0.175, 0.075])
    assert np.allclose(women["drift"], 0.3) and np.allclose(women["drift_all_off"], 0.05)
    assert np.allclose(out.loc["male", "shapley"], -women["shapley"])


def test_shapley_values_add_up_to_what_the_switches_explain() -> None:
    switches = ("readers", "attrition", "referrals")
    rng = np.random.default_rng(5)
    drift = {
        "|".join(c) or "none": float(rng.uniform(-0.4, 0.4)) // 0.05 * 0.05
        for n in range(4)
        for c in itertools.combinations(switches, n)
    }
    out = decompose_drift(table(drift, replicates=3), switches)
    women = out[out["group"] == "female"]
    assert np.isclose(women["shapley"].sum(), drift["none"] - drift["readers|attrition|referrals"])
    assert (women["replicates"] == 3).all()


def test_a_missing_trajectory_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape("no trajectory with readers|attrition off")):
        decompose_drift(table({"none": 0.1, "readers": 0.0, "attrition": 0.0}), SWITCHES)
