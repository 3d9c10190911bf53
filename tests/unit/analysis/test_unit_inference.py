"""The unit-aware inference core: one DPD definition, one Monte Carlo p-value, tests whose null
relabels units (personas with replicates) checked against exact enumeration."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from biasim.analysis.stats import cases as case_stats
from biasim.analysis.stats import disparity
from biasim.analysis.stats.parity import dpd_from_counts, resampling_p_value
from biasim.analysis.stats.units import smallest_p, unit_counts, unit_label
from biasim.analysis.studies.prism.stats import variance_tests
from biasim.families.hiring_emails.stats import email_outcomes


def test_one_dpd_definition_is_nan_without_two_answered_groups() -> None:
    k = np.array([[3, 1, 0], [2, 0, 0], [0, 0, 0]])
    n = np.array([[4, 4, 0], [4, 0, 0], [0, 0, 0]])
    dpd = dpd_from_counts(k, n)
    assert dpd[0] == pytest.approx(0.5)  # the empty third group is left out
    assert np.isnan(dpd[1]) and np.isnan(dpd[2])  # one group, none: no disparity to measure
    # Broadcasts permuted counts against fixed group sizes.
    draws = dpd_from_counts(np.array([[1, 3], [2, 2]]), np.array([4, 4]))
    assert draws.tolist() == [0.5, 0.0]


def test_resampling_p_counts_the_observed_draw() -> None:
    null = np.array([0.1, 0.2, 0.3, 0.3 - 1e-15, 0.5])
    # Two draws at least 0.3 (one a tie up to rounding) plus the observed one, over 6.
    assert resampling_p_value(null, 0.3) == pytest.approx(4 / 6)
    assert resampling_p_value(null, 0.9) == pytest.approx(1 / 6)


def _replicated(rng: np.random.Generator, units: int, replicates: int, sd: float) -> pd.DataFrame:
    """One case: two groups of ``units`` personas each answering ``replicates`` times with a
    persona propensity N(0, sd) on the logit and no group effect."""
    rows = []
    for group in ("a", "b"):
        for index in range(units):
            p = 1 / (1 + np.exp(-rng.normal(0, sd)))
            for _ in range(replicates):
                rows.append(
                    {"case": "c", "value": group, "agent_index": index, "hit": rng.random() < p}
                )
    return pd.DataFrame(rows).assign(valid=True)


def _exact_unit_p(units: pd.DataFrame) -> float:
    """Share of all relabellings of whole units (group sizes kept) with DPD >= observed."""
    n, k = units["n"].to_numpy(), units["k"].to_numpy()
    is_a = (units["value"] == "a").to_numpy()
    observed = dpd_from_counts([k[is_a].sum(), k[~is_a].sum()], [n[is_a].sum(), n[~is_a].sum()])
    values = []
    for chosen in combinations(range(len(units)), int(is_a.sum())):
        a = np.zeros(len(units), dtype=bool)
        a[list(chosen)] = True
        values.append(dpd_from_counts([k[a].sum(), k[~a].sum()], [n[a].sum(), n[~a].sum()]))
    return float(np.mean(np.asarray(values) >= observed - 1e-12))


def test_a_case_with_replicates_relabels_whole_units_as_exact_enumeration_does() -> None:
    rows = _replicated(np.random.default_rng(3), units=4, replicates=5, sd=1.5)
    rates = case_stats.case_rates(rows, ["case"], "value", "hit", True)
    units = unit_counts(rows, ["case", "value"], ["agent_index"], "hit")
    assert units["n"].tolist() == [5] * 8 and units["k"].sum() == rows["hit"].sum()
    case = case_stats.case_parity(
        rates, ["case"], "value", units=units, unit="persona", n_simulations=40_000
    ).iloc[0]
    assert case["test"] == case_stats.UNIT_TEST
    assert (case["unit"], case["n_units"]) == ("persona", 8)
    assert case["p_value"] == pytest.approx(_exact_unit_p(units), abs=0.01)
    # 8 units in two groups of 4: 70 labellings, so p can go below 0.05.
    assert case["can_reject"]


def test_without_replicates_the_paper_test_is_kept() -> None:
    rows = _replicated(np.random.default_rng(4), units=30, replicates=1, sd=0.0)
    rates = case_stats.case_rates(rows, ["case"], "value", "hit", True)
    units = unit_counts(rows, ["case", "value"], ["agent_index"], "hit")
    with_units = case_stats.case_parity(rates, ["case"], "value", units=units, unit="persona")
    plain = case_stats.case_parity(rates, ["case"], "value")
    assert with_units["test"].iloc[0] == case_stats.BINOMIAL_TEST
    for column in ("dpd", "threshold", "p_value", "chance_dpd", "significant"):
        assert with_units[column].iloc[0] == plain[column].iloc[0]
    assert unit_label("persona", 60) == "unit: persona, 60 units"


def test_too_few_units_are_said_to_be_unable_to_reject() -> None:
    # Three groups of one persona each: 6 labellings, the smallest p is 1/6 at best.
    assert smallest_p([1, 1, 1]) == pytest.approx(1 / 6)
    rows = pd.DataFrame(
        {
            "case": "c",
            "value": np.repeat(["a", "b", "c"], 5),
            "agent_index": 0,
            "hit": [True] * 5 + [False] * 10,
            "valid": True,
        }
    )
    rates = case_stats.case_rates(rows, ["case"], "value", "hit", True)
    units = unit_counts(rows, ["case", "value"], ["agent_index"], "hit")
    case = case_stats.case_parity(rates, ["case"], "value", units=units).iloc[0]
    assert case["dpd"] == 1.0 and not case["significant"] and not case["can_reject"]
    # The paper's binomial test at one agent per value cannot reject either, and says so.
    single = rows.groupby("value").head(1)
    rates = case_stats.case_rates(single, ["case"], "value", "hit", True)
    assert not case_stats.case_parity(rates, ["case"], "value")["can_reject"].iloc[0]


def test_two_groups_against_their_population_are_one_contrast() -> None:
    table = pd.DataFrame(
        {
            "group": ["a", "b"],
            "p_greater": [0.02, 0.99],
            "p_less": [0.99, 0.02],
            "p_two_sided": [0.04, 0.04],
            "compared_with": "population",
        }
    )
    out = disparity.adjust_joint(table, "holm")
    # Holm over the contrast's two directions (statsmodels as the oracle), not over four.
    expected = multipletests([0.02, 0.99], method="holm")[1]
    assert out["p_greater_adjusted"].tolist() == pytest.approx([expected[0], expected[1]])
    assert out["p_less_adjusted"].tolist() == pytest.approx([expected[1], expected[0]])
    assert out["p_adjusted"].tolist() == [0.04, 0.04]
    three = pd.concat([table, table.iloc[[0]].assign(group="c")], ignore_index=True)
    assert disparity.adjust_joint(three, "holm")["p_greater_adjusted"].iloc[0] == pytest.approx(
        multipletests([0.02, 0.99, 0.02, 0.99, 0.99, 0.02], method="holm")[1][0]
    )


def test_levene_one_sided_follows_the_deviations_it_tests() -> None:
    # Postings: mostly at the median with two far outliers (larger variance, smaller mean
    # absolute deviation); applications: a moderate spread.
    x = np.array([0.0] * 16 + [12.0, -12.0])
    y = np.linspace(-5, 5, 18)
    assert x.var() > y.var()
    dev_x, dev_y = np.abs(x - np.median(x)), np.abs(y - np.median(y))
    oracle = stats.ttest_ind(dev_x, dev_y, alternative="greater").pvalue
    assert variance_tests(x, y)["levene_p_one_sided"] == pytest.approx(oracle)


def test_validity_pairs_relabel_whole_names_as_exact_enumeration_does() -> None:
    rng = np.random.default_rng(8)
    names = pd.DataFrame(
        {"race": np.repeat(["a", "b"], 4), "persona_name": [f"n{i}" for i in range(8)]}
    )
    emails = names.loc[names.index.repeat(3)].reset_index(drop=True)
    emails["outcome"] = np.where(rng.random(len(emails)) < 0.6, "accept", "invalid")
    _, pairs = email_outcomes.validity_by_group(
        emails, "race", "outcome", unit_col="persona_name", n_permutations=40_000
    )
    row = pairs.iloc[0]
    assert row["test"] == "unit permutation" and (row["n_units_a"], row["n_units_b"]) == (4, 4)
    assert row["test_emails"] in ("z", "fisher") and 0 <= row["p_emails"] <= 1
    units = (
        emails.assign(k=emails["outcome"] != "invalid")
        .groupby(["race", "persona_name"], as_index=False)
        .agg(n=("k", "size"), k=("k", "sum"))
        .rename(columns={"race": "value"})
    )
    assert row["p_value"] == pytest.approx(_exact_unit_p(units), abs=0.01)
