"""The four-fifths "chance of a flag" with units as the draws (issue 27).

Oracles: the relabellings enumerated with itertools, and, under a simulated null with name-level
heterogeneity, the share of no-bias data sets that the four-fifths rule actually flags.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.disparity import (
    acceptance_rates,
    disparity_report,
    flag_chance_basis,
    impact_ratios,
    impact_ratios_by_stratum,
    unit_flag_chance,
)


def _names(rng: np.random.Generator, names: int, answers: int, sd: float) -> pd.DataFrame:
    """Four groups of ``names`` names, each answering ``answers`` times in each of 4 roles with
    its own propensity (logit shift N(0, sd)) and no group effect."""
    groups = np.array(["A", "B", "C", "D"])
    name = np.array([f"{g}{i}" for g in groups for i in range(names)])
    rate = 1 / (1 + np.exp(-rng.normal(0.0, sd, size=name.size)))
    per_name = 4 * answers
    accepted = rng.random((name.size, per_name)) < rate[:, None]
    return pd.DataFrame(
        {
            "group": np.repeat(np.repeat(groups, names), per_name),
            "name": np.repeat(name, per_name),
            "role": np.tile(np.repeat([f"r{i}" for i in range(4)], answers), name.size),
            "outcome": np.where(accepted.ravel(), "accept", "reject"),
        }
    )


def test_unit_flag_chance_matches_enumerated_relabellings():
    # Six names, three per group, each answering 10 times in one role: 20 labellings of which
    # name sets go to A. Each labelling's pooled rates give the ratio; the flag chance is the
    # share below 0.8.
    accepted = {"a1": 9, "a2": 8, "a3": 7, "b1": 2, "b2": 6, "b3": 5}
    rows = [
        (name[0].upper(), name, "accept" if j < k else "reject")
        for name, k in accepted.items()
        for j in range(10)
    ]
    df = pd.DataFrame(rows, columns=["group", "name", "outcome"])
    names = list(accepted)
    flags_a = flags_any = total = 0
    for chosen in itertools.combinations(names, 3):
        a = sum(accepted[n] for n in chosen) / 30
        b = sum(accepted[n] for n in names if n not in chosen) / 30
        top = max(a, b)
        flags_a += a / top < 0.8
        flags_any += min(a, b) / top < 0.8
        total += 1
    ratios = impact_ratios(acceptance_rates(df, ["group"], "outcome", "accept"), seed=1)
    n_perm = 20_000
    got = unit_flag_chance(
        ratios, df, ["group"], "outcome", "accept", "name", n_permutations=n_perm
    )
    exact_any, exact_a = flags_any / total, flags_a / total
    tolerance = 4 * np.sqrt(0.25 / n_perm)
    assert got["p_any_flag_by_chance"].iloc[0] == pytest.approx(exact_any, abs=tolerance)
    assert got.loc[got["group"] == "A", "p_flag_by_chance"].iloc[0] == pytest.approx(
        exact_a, abs=tolerance
    )
    assert set(got["flag_chance_unit"]) == {"name"} and set(got["flag_chance_units"]) == {6}
    # The binomial draws treat the 60 answers as independent and say flags are rare.
    assert ratios["p_any_flag_by_chance"].iloc[0] < exact_any / 2
    assert flag_chance_basis("name") == "relabelling whole units: name"


def test_disparity_report_uses_units_for_the_flag_chance_when_given():
    df = _names(np.random.default_rng(3), names=6, answers=5, sd=1.5)
    with_units = disparity_report(
        df,
        "group",
        "outcome",
        positive="accept",
        unit_col="name",
        stratum_col="role",
        n_permutations=200,
    )
    without = disparity_report(df, "group", "outcome", positive="accept", n_permutations=200)
    assert with_units["flag_chance_unit"] == "name"
    assert without["flag_chance_unit"] == "answer"
    assert with_units["p_any_flag_by_chance"] > without["p_any_flag_by_chance"]


def test_flag_chance_per_stratum_relabels_units_within_the_stratum():
    # Five answers per name and role: within a role a name is still a unit of five answers.
    df = _names(np.random.default_rng(4), names=6, answers=5, sd=1.5)
    _, by_unit = impact_ratios_by_stratum(
        df, "role", "group", "outcome", "accept", n_simulations=500, unit_col="name"
    )
    _, by_answer = impact_ratios_by_stratum(
        df, "role", "group", "outcome", "accept", n_simulations=500
    )
    assert set(by_unit["flag_chance_unit"]) == {"name"}
    assert set(by_unit["flag_chance_units"]) == {24}
    assert "flag_chance_unit" not in by_answer
    assert (
        by_unit.groupby("role")["p_any_flag_by_chance"].first()
        > by_answer.groupby("role")["p_any_flag_by_chance"].first()
    ).all()


@pytest.mark.slow
def test_printed_flag_chance_matches_the_null_flag_frequency():
    # 500 no-bias data sets: 4 groups of 10 names, each name answering 5 times in each of 4
    # roles with its own propensity (sd 0.7 on the logit). The chance printed for a data set
    # (500 relabellings of whole names) averaged over the data sets must match the share of
    # data sets the four-fifths rule flags, within 3 standard errors of that share (about
    # 0.02 at 0.3); the binomial chance, which treats answers as independent, is far below.
    rng = np.random.default_rng(20261126)
    printed, binomial, flagged = [], [], []
    for study in range(500):
        df = _names(rng, names=10, answers=5, sd=0.7)
        ratios = impact_ratios(
            acceptance_rates(df, ["group"], "outcome", "accept"), n_simulations=500, seed=study
        )
        units = unit_flag_chance(
            ratios, df, "group", "outcome", "accept", "name", stratum_col="role",
            n_permutations=500, seed=study,
        )  # fmt: skip
        printed.append(units["p_any_flag_by_chance"].iloc[0])
        binomial.append(ratios["p_any_flag_by_chance"].iloc[0])
        flagged.append(bool(ratios["four_fifths_flag"].any()))
    rate = float(np.mean(flagged))
    se = np.sqrt(rate * (1 - rate) / len(flagged))
    assert 0.1 < rate < 0.9  # the rule flags often enough here to measure the match
    assert abs(float(np.mean(printed)) - rate) < 3 * se
    assert float(np.mean(binomial)) < rate / 2
