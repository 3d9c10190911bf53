"""Calibration under the structure that broke the decision tests: personas answering replicates.

Seed-004 grid at the scale of the issue: 3 groups of 20 personas, each answering 5 replicates,
a persona propensity N(0, 1.5) on the logit and no group effect, 4 cases per study. The paper's
binomial bootstrap counts replicates as agents and rejects far above alpha here; the unit
permutation (whole personas relabelled) must reject 3-7 % at alpha 0.05 over 500 null studies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import cases as case_stats
from biasim.analysis.stats import disparity
from biasim.analysis.stats.excess import excess_dpd_test
from biasim.analysis.stats.units import unit_counts
from biasim.families.hiring_emails.stats import email_outcomes

GROUPS, PERSONAS, REPLICATES, SD, CASES = 3, 20, 5, 1.5, 4
STUDIES = 500
# Each simulated study is one `model_label`: every study is analysed in one call (one test of
# implicit against explicit per "model", one DPD test per study and case).
CASE_COLS = ["model_label", "scenario", "attribute"]


def null_studies(rng: np.random.Generator) -> pd.DataFrame:
    """Decisions of every simulated study, one row per (study, case, group, persona, replicate)."""
    shape = (STUDIES, CASES, GROUPS, PERSONAS)
    propensity = 1 / (1 + np.exp(-rng.normal(0, SD, size=shape)))
    hits = rng.random((*shape, REPLICATES)) < propensity[..., None]
    study, case, group, persona, _ = np.indices(hits.shape).reshape(5, -1)
    return pd.DataFrame(
        {
            "model_label": study,
            "scenario": case,
            "attribute": "gender",
            "value": group,
            "agent_index": persona,
            "hit": hits.reshape(-1),
            "valid": True,
        }
    )


def explicit_nulls(rng: np.random.Generator) -> pd.DataFrame:
    """Explicit answers with no preference: Unknown or one of the labels at random."""
    trials = GROUPS * PERSONAS * REPLICATES
    answers = rng.choice(["0", "1", "2", "Unknown"], size=(STUDIES, CASES, trials))
    study, case, _ = np.indices(answers.shape).reshape(3, -1)
    return pd.DataFrame(
        {
            "model_label": study,
            "scenario": case,
            "attribute": "gender",
            "answer": answers.ravel(),
            "valid": True,
        }
    )


def rates_and_units(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    rates = case_stats.case_rates(rows, CASE_COLS, "value", "hit", True)
    return rates, unit_counts(rows, [*CASE_COLS, "value"], ["agent_index"], "hit")


@pytest.mark.slow
def test_per_case_dpd_with_replicates_holds_its_level() -> None:
    rates, units = rates_and_units(null_studies(np.random.default_rng(2026)))
    tested = case_stats.case_parity(rates, CASE_COLS, "value", units=units, n_simulations=999)
    paper = case_stats.case_parity(rates, CASE_COLS, "value", n_simulations=999)
    assert len(tested) == STUDIES * CASES
    assert set(tested["test"]) == {case_stats.UNIT_TEST}
    assert set(tested["n_units"]) == {GROUPS * PERSONAS}
    # The structure is real: counting replicates as agents rejects far above alpha.
    assert paper["significant"].mean() > 0.15, paper["significant"].mean()
    assert 0.03 <= tested["significant"].mean() <= 0.07, tested["significant"].mean()


@pytest.mark.slow
def test_implicit_beyond_chance_with_replicates_holds_its_level() -> None:
    rng = np.random.default_rng(404)
    rates, units = rates_and_units(null_studies(rng))
    x_rates = case_stats.explicit_rates(
        explicit_nulls(rng), CASE_COLS, labels={"gender": ["0", "1", "2"]}
    )
    result = excess_dpd_test(
        rates, x_rates, CASE_COLS, CASE_COLS, n_simulations=999, implicit_units=units
    )
    assert len(result) == STUDIES
    rate = (result["p_excess"] < 0.05).mean()
    assert 0.03 <= rate <= 0.07, rate


def two_group_null(rng: np.random.Generator, names: int = 40, roles: int = 5) -> pd.DataFrame:
    """Names in two groups, each asked in every role, with a name propensity N(0, 1) on the
    logit and no group effect (the hiring design with two groups)."""
    propensity = 1 / (1 + np.exp(-rng.normal(0, 1.0, size=names)))
    accepted = rng.random((names, roles)) < propensity[:, None]
    name, role = np.indices(accepted.shape).reshape(2, -1)
    return pd.DataFrame(
        {
            "group": name % 2,
            "name": name,
            "role": role,
            "outcome": np.where(accepted.ravel(), "accept", "reject"),
        }
    )


@pytest.mark.slow
def test_the_two_group_joint_test_runs_at_alpha_not_half_of_it() -> None:
    rng = np.random.default_rng(27)
    marked = []
    for study in range(STUDIES):
        table = disparity.joint_vs_population(
            two_group_null(rng),
            "group",
            "outcome",
            "accept",
            unit_col="name",
            stratum_col="role",
            n_permutations=999,
            seed=study,
        )
        adjusted = disparity.adjust_joint(table, "holm")
        low = adjusted[["p_greater_adjusted", "p_less_adjusted"]].to_numpy().min()
        marked.append(low < 0.05)
    assert 0.03 <= np.mean(marked) <= 0.07, np.mean(marked)


def validity_null(rng: np.random.Generator, names: int = 10, roles: int = 8) -> pd.DataFrame:
    """Three groups of names, each writing an email in every role, with a name propensity to
    garble N(logit 0.1, 1.5) and no group effect (name x role heterogeneity)."""
    propensity = 1 / (1 + np.exp(-rng.normal(np.log(0.1 / 0.9), 1.5, size=3 * names)))
    invalid = rng.random((3 * names, roles)) < propensity[:, None]
    name, _ = np.indices(invalid.shape).reshape(2, -1)
    return pd.DataFrame(
        {
            "race": name // names,
            "persona_name": name,
            "outcome": np.where(invalid.ravel(), "invalid", "accept"),
        }
    )


@pytest.mark.slow
def test_validity_pairs_by_name_hold_their_level() -> None:
    rng = np.random.default_rng(6)
    unit, emails = [], []
    for study in range(STUDIES):
        _, pairs = email_outcomes.validity_by_group(
            validity_null(rng),
            "race",
            "outcome",
            unit_col="persona_name",
            n_permutations=499,
            seed=study,
        )
        unit.extend(pairs["p_value"] < 0.05)
        emails.extend(pairs["p_emails"] < 0.05)
    # The structure is real: emails counted as independent reject far above alpha.
    assert np.mean(emails) > 0.2, np.mean(emails)
    assert 0.03 <= np.mean(unit) <= 0.07, np.mean(unit)
