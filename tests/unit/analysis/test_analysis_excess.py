"""Implicit against explicit bias beyond chance (seed 004): the excess-DPD test against an
enumerated oracle, and calibrated under a no-bias responder in the study's own structure, where
the paper's raw t-test is not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.stats import units
from biasim.analysis.stats.cases import case_parity, explicit_parity, implicit_vs_explicit
from biasim.analysis.stats.excess import excess_dpd_test
from biasim.simulator.kinds import get_kind

#: Seed 004's grid: four scenarios x three sociodemographic attributes (values per attribute).
ATTRIBUTES = {"gender": 3, "race": 5, "ideology": 3}
SCENARIOS = ("emergency", "authority", "sharing", "career")
CASES = ["model_label", "scenario", "attribute"]


def no_bias_study(
    rng: np.random.Generator, agents: int, trials: int = 100
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rates tables of a responder with no bias: every group of a scenario decides with the
    same probability; explicit questions are answered uniformly over labels and Unknown."""
    implicit, explicit = [], []
    for scenario in SCENARIOS:
        p = rng.uniform(0.2, 0.8)
        for attribute, values in ATTRIBUTES.items():
            k = rng.binomial(agents, p, size=values)
            for v in range(values):
                implicit.append(("m", scenario, attribute, f"v{v}", agents, int(k[v])))
            counts = rng.multinomial(trials, np.full(values + 1, 1 / (values + 1)))
            for v, label in enumerate([*(f"v{j}" for j in range(values)), "Unknown"]):
                explicit.append(("m", scenario, attribute, label, trials, int(counts[v])))
    rates = pd.DataFrame(implicit, columns=[*CASES, "value", "n_valid", "k"])
    rates["rate"] = rates["k"] / rates["n_valid"]
    answers = pd.DataFrame(explicit, columns=[*CASES, "answer", "n_valid", "k"])
    answers["n_trials"] = answers["n_valid"]
    answers["rate"] = answers["k"] / answers["n_valid"]
    return rates, answers


def test_chance_levels_match_the_exact_conditional_expectation() -> None:
    """One implicit case (groups of 2, 2 and 3 agents, 3 decisions) and one explicit case (6
    trials, 2 Unknown, 2 labels): the excess is DPD minus E[DPD] under the conditional null,
    here enumerated exactly (multivariate hypergeometric; binomial over the labels)."""
    n, k = np.array([2, 2, 3]), np.array([2, 0, 1])
    rates = pd.DataFrame(
        {
            "model_label": "m",
            "scenario": "s",
            "attribute": "a",
            "value": ["x", "y", "z"],
            "n_valid": n,
            "k": k,
            "rate": k / n,
        }
    )
    answers = pd.DataFrame(
        {
            "model_label": "m",
            "scenario": "s",
            "attribute": "a",
            "answer": ["x", "y", "Unknown"],
            "n_valid": 6,
            "n_trials": 6,
            "k": [3, 1, 2],
            "rate": np.array([3, 1, 2]) / 6,
        }
    )
    law = stats.multivariate_hypergeom
    implicit_chance = sum(
        law.pmf([a, b, 3 - a - b], n, 3) * (np.ptp(np.array([a, b, 3 - a - b]) / n))
        for a in range(3)
        for b in range(3)
        if 0 <= 3 - a - b <= 3
    )
    explicit_chance = sum(stats.binom.pmf(j, 4, 0.5) * abs(j - (4 - j)) / 6 for j in range(5))
    b = 200_000
    got = excess_dpd_test(rates, answers, CASES, CASES, n_simulations=b, seed=5).iloc[0]
    assert got["mean_excess_implicit"] == pytest.approx(1.0 - implicit_chance, abs=0.005)
    assert got["mean_excess_explicit"] == pytest.approx(2 / 6 - explicit_chance, abs=0.005)
    assert got["n_cases_implicit"] == 1 and got["n_cases_explicit"] == 1
    assert got["excess_difference"] == pytest.approx(
        got["mean_excess_implicit"] - got["mean_excess_explicit"]
    )
    assert got["significant_excess"] == (got["p_excess"] < 0.05)


def test_a_true_implicit_bias_is_found() -> None:
    rates, answers = no_bias_study(np.random.default_rng(1), agents=50)
    boost = rates["value"] == "v0"
    rates.loc[boost, "k"] = np.minimum(rates.loc[boost, "k"] + 20, 50)
    rates["rate"] = rates["k"] / rates["n_valid"]
    got = excess_dpd_test(rates, answers, CASES, CASES, n_simulations=2000).iloc[0]
    assert got["excess_difference"] > 0.2 and got["p_excess"] < 0.001


@pytest.mark.slow
@pytest.mark.parametrize("agents", [2, 20, 100])
def test_headline_is_calibrated_where_the_papers_t_test_is_not(agents: int) -> None:
    """1,000 studies of a responder with no bias at 2, 20 and 100 agents per value: the excess
    test rejects 3-7 %. The paper's t-test of raw DPDs compares chance levels, not bias: with
    few agents per value it rejects in most studies."""
    rng = np.random.default_rng(agents)
    excess, paper = [], []
    for study in range(1000):
        rates, answers = no_bias_study(rng, agents)
        test = excess_dpd_test(rates, answers, CASES, CASES, n_simulations=499, seed=study)
        excess.append(test["p_excess"].iloc[0] < 0.05)
        if study < 100:
            rates["n_excluded"] = 0
            implicit = case_parity(rates, CASES, "value", n_simulations=199, seed=study)
            explicit = explicit_parity(answers, CASES, n_simulations=199, seed=study)
            paper.append(implicit_vs_explicit(implicit, explicit)["p_value"].iloc[0] < 0.05)
    assert 0.03 <= np.mean(excess) <= 0.07
    if agents <= 20:
        assert np.mean(paper) > 0.5


def test_power_reads_the_test_run_without_unit_tables() -> None:
    """Called through the API without unit tables, the test writes its unit count as NA (not
    known there); power's reading of the row states the unit without a count, not a crash."""
    rates, answers = no_bias_study(np.random.default_rng(3), agents=20)
    row = excess_dpd_test(rates, answers, CASES, CASES, n_simulations=199).iloc[0]
    assert row["unit"] == "decision" and pd.isna(row["n_units"])
    tested = units.Tested.of(row, "p_excess")  # the row as the API returns it: NA
    assert (tested.p, tested.unit, tested.n_units) == (row["p_excess"], "decision", None)
    assert tested.label == "decision"
    # A left merge (the kind's comparison table) turns it into NaN.
    assert units.Tested.of({**row.to_dict(), "n_units": float("nan")}, "p_excess") == tested
    summary = {"implicit_vs_explicit": [row.to_dict()]}
    power = get_kind("explicit_bias").power_tests(summary)
    assert power["implicit vs explicit beyond chance"] == tested
