"""Two designs compared unpaired: the rates against counts, and the test's calibration under a
null that keeps the designs' structure (pools of different sizes, picks competing in a pool)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.designs import design_rate_tests

GROUPS = np.array(["female", "male"])


def simulate(rng: np.random.Generator, weights: dict[str, float] | None = None) -> pd.DataFrame:
    """Design `a`: 60 pools of 8 applicants, 2 picked at random; design `b`: 120 pools of 4,
    1 picked, weighing an applicant by ``weights`` (none: at random); groups drawn at random
    (60 % women)."""
    rows = []
    for design, pools, size, k in (("a", 60, 8, 2), ("b", 120, 4, 1)):
        for c in range(pools):
            groups = rng.choice(GROUPS, size=size, p=[0.6, 0.4])
            own = (weights or {}) if design == "b" else {}
            w = np.array([own.get(g, 1.0) for g in groups])
            picked = rng.choice(size, size=k, replace=False, p=w / w.sum())
            for i, g in enumerate(groups):
                rows.append((design, f"{design}/pool{c}", g, i in picked))
    return pd.DataFrame(rows, columns=["design", "cluster", "gender", "selected"])


def test_rates_and_changes_are_the_counts() -> None:
    outcomes = simulate(np.random.default_rng(1))
    table = design_rate_tests(outcomes, "gender", ("a", "b")).set_index("value")
    for value in GROUPS:
        for design, suffix in (("a", "_a"), ("b", "_b")):
            mine = outcomes[(outcomes["design"] == design) & (outcomes["gender"] == value)]
            assert table.loc[value, f"entered{suffix}"] == len(mine)
            assert np.isclose(table.loc[value, f"rate{suffix}"], mine["selected"].mean())
        assert np.isclose(
            table.loc[value, "change"], table.loc[value, "rate_b"] - table.loc[value, "rate_a"]
        )
        entered = [
            outcomes[(outcomes["design"] == d) & (outcomes["gender"] == value)]["cluster"].nunique()
            for d in ("a", "b")
        ]
        assert table.loc[value, "df"] == min(entered) - 1
    assert (table["unit"] == "first-stage pool").all() and (table["pools_a"] == 60).all()


def test_too_few_pools_give_no_p_and_say_why() -> None:
    outcomes = simulate(np.random.default_rng(2))
    few = outcomes[~outcomes["cluster"].isin([f"a/pool{c}" for c in range(55)])]
    table = design_rate_tests(few, "gender", ("a", "b"))
    assert table["p_value"].isna().all() and table["note"].str.contains("fewer than 10").all()


@pytest.mark.slow
def test_a_change_of_design_that_keeps_every_rate_is_flagged_at_the_nominal_rate() -> None:
    """Calibration, unit the first-stage pool: 400 simulated pairs of designs with every
    group's rate a quarter under both; women's test flags 3-7 % at 0.05."""
    rng = np.random.default_rng(46)
    p = [
        design_rate_tests(simulate(rng), "gender", ("a", "b"))["p_value"].iloc[0]
        for _ in range(400)
    ]
    rate = float(np.mean(np.array(p) < 0.05))
    assert 0.03 <= rate <= 0.07, rate


def few_pools_and_a_small_group(rng: np.random.Generator) -> pd.DataFrame:
    """Design `a`: 10 pools of 4 or 12 applicants; design `b`: 40 pools of 4 or 8; a quarter
    of each pool picked at random; 10 % women, so many pools have none."""
    rows = []
    for design, pools, sizes in (("a", 10, (4, 12)), ("b", 40, (4, 8))):
        for c in range(pools):
            size = int(rng.choice(sizes))
            picked = rng.choice(size, size=size // 4, replace=False)
            for i, g in enumerate(rng.choice(GROUPS, size=size, p=[0.1, 0.9])):
                rows.append((design, f"{design}/pool{c}", g, i in picked))
    return pd.DataFrame(rows, columns=["design", "cluster", "gender", "selected"])


@pytest.mark.slow
def test_pools_a_small_group_did_not_enter_are_not_units_of_its_test() -> None:
    """Calibration with few pools of unequal sizes and a group absent from many: 300 null pairs
    of designs; women's test flags 3-7 % at 0.05. Counting every pool of a design as a unit
    (C / (C - 1), df min(C) - 1) flagged 12.7 % of 600 such pairs (6.3 % with the pools they
    entered)."""
    rng = np.random.default_rng(48)
    tables = [
        design_rate_tests(few_pools_and_a_small_group(rng), "gender", ("a", "b"))
        for _ in range(300)
    ]
    p = np.array([t["p_value"].iloc[0] for t in tables])
    assert np.isnan(p).mean() < 0.01
    rate = float(np.mean(p[~np.isnan(p)] < 0.05))
    assert 0.03 <= rate <= 0.07, rate


def test_the_df_counts_the_pools_the_value_entered() -> None:
    outcomes = simulate(np.random.default_rng(3))
    a = outcomes["design"] == "a"
    absent = outcomes["cluster"].isin([f"a/pool{c}" for c in range(20)])
    outcomes.loc[a & absent & (outcomes["gender"] == "female"), "gender"] = "male"
    row = design_rate_tests(outcomes, "gender", ("a", "b")).set_index("value").loc["female"]
    entered = outcomes[a & (outcomes["gender"] == "female")]["cluster"].nunique()
    assert row["pools_a"] == 60 and row["df"] == entered - 1 == 39


def test_a_design_that_favours_men_is_found() -> None:
    """Power: design `b`'s readers weigh a man 3 to 1; women's rate falls there."""
    rng = np.random.default_rng(47)
    p = [
        design_rate_tests(simulate(rng, {"male": 3.0}), "gender", ("a", "b"))["p_value"].iloc[0]
        for _ in range(20)
    ]
    assert np.mean(np.array(p) < 0.05) >= 0.8
