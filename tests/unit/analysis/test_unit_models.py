"""Model-based estimates: each against an independent oracle (statsmodels' own fits, a closed
form, or a known truth), and each saying when it is not fitted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf
from scipy import stats

from biasim.analysis.stats import unit_models


def clustered(seed: int = 0, names: int = 60, items: int = 4, reps: int = 3, sd: float = 1.0):
    rng = np.random.default_rng(seed)
    group = np.repeat(["A", "B"], names // 2)
    u, i, _ = np.meshgrid(np.arange(names), np.arange(items), np.arange(reps), indexing="ij")
    u, i = u.ravel(), i.ravel()
    logit = rng.normal(0, sd, names)[u] + rng.normal(0, 0.5, items)[i] + 0.7 * (group[u] == "B")
    hit = rng.random(u.size) < 1 / (1 + np.exp(-logit))
    return pd.DataFrame({"group": group[u], "name": u, "item": i, "hit": hit})


def test_gee_equals_logistic_estimates_with_statsmodels_cluster_robust_errors() -> None:
    df = clustered()
    table = unit_models.gee_odds_ratios(df, "group", "hit", "name", "item")
    oracle = smf.gee(
        "y ~ C(group) + C(item)",
        groups=df["name"],
        data=df.assign(y=df["hit"].astype(float)),
        family=sm.families.Binomial(),
        cov_struct=sm.cov_struct.Independence(),
    ).fit()
    (row,) = table.to_dict("records")
    assert row["estimate"] == pytest.approx(oracle.params["C(group)[T.B]"], rel=1e-6)
    g, n, k = df["name"].nunique(), len(df), 1 + 1 + 3
    correction = np.sqrt(g / (g - 1) * (n - 1) / (n - k))
    # Student's t on the fewer units of the two groups less one: 30 names a group, 29 df.
    half = stats.t.ppf(0.975, 29)
    se = (row["ci_high"] - row["ci_low"]) / (2 * half)
    assert se == pytest.approx(oracle.bse["C(group)[T.B]"] * correction, rel=1e-4)
    assert row["p_value"] == pytest.approx(2 * stats.t.sf(abs(row["estimate"]) / se, 29))
    assert row["odds_ratio"] == pytest.approx(np.exp(row["estimate"]))
    assert row["converged"] and row["n_units"] == 60 and row["unit"] == "name"


def test_gee_gives_no_p_where_a_group_has_one_unit() -> None:
    """One name a group: the contrast is constant within each cluster, so the sandwich variance
    comes out near 0; on the normal scale it printed p = 0 (golden an2024_hiring). Now no p."""
    df = clustered(names=60)
    one = df[df["name"].isin([0, 59])]
    (row,) = unit_models.gee_odds_ratios(one, "group", "hit", "name", "item").to_dict("records")
    assert np.isnan(row["p_value"]) and np.isnan(row["ci_low"]) and np.isfinite(row["estimate"])
    assert row["note"].startswith("no p-value where a group or the reference has one unit")


def test_mixed_model_without_unit_variation_is_the_plain_logistic_fit() -> None:
    df = clustered(sd=0.0, items=1, reps=8)
    table = unit_models.mixed_odds_ratios(df, "group", "hit", "name")
    plain = smf.logit("y ~ C(group)", data=df.assign(y=df["hit"].astype(float))).fit(disp=0)
    (row,) = table.to_dict("records")
    assert row["converged"]
    assert row["estimate"] == pytest.approx(plain.params["C(group)[T.B]"], abs=0.02)
    se = (row["ci_high"] - row["ci_low"]) / (2 * 1.959963984540054)
    assert se == pytest.approx(plain.bse["C(group)[T.B]"], rel=0.05)


def test_mixed_model_recovers_a_known_odds_ratio_and_unit_sd() -> None:
    df = clustered(seed=3, names=300, items=6, reps=4, sd=1.0)
    (row,) = unit_models.mixed_odds_ratios(df, "group", "hit", "name", "item").to_dict("records")
    assert row["converged"]
    assert row["ci_low"] < 0.7 < row["ci_high"]
    unit_sd = float(row["note"].split(": ")[1].split(",")[0])
    assert np.isnan(row["p_value"]) and "no p-value" in row["note"]
    assert unit_sd == pytest.approx(1.0, abs=0.25)


def test_discrim_eval_fixed_effect_is_the_difference_of_means_in_a_balanced_design() -> None:
    rng = np.random.default_rng(4)
    s, g, _ = np.meshgrid(np.arange(12), np.arange(2), np.arange(10), indexing="ij")
    s, g = s.ravel(), g.ravel()
    score = rng.normal(0, 0.5, 12)[s] + rng.normal(0.3, 0.3, 12)[s] * g + rng.normal(0, 1, s.size)
    df = pd.DataFrame({"scenario": s, "group": np.array(["A", "B"])[g], "score": score})
    (row,) = unit_models.discrim_eval_effects(df, "group", "score", "scenario").to_dict("records")
    means = df.groupby("group")["score"].mean()
    assert row["estimate"] == pytest.approx(means["B"] - means["A"], abs=1e-4)
    assert row["n_units"] == 12 and row["unit"] == "scenario"


def test_discrim_eval_refuses_when_a_unit_repeats_within_a_scenario() -> None:
    df = clustered().rename(columns={"item": "scenario"}).assign(score=1.0)
    (row,) = unit_models.discrim_eval_effects(df, "group", "score", "scenario", "name").to_dict(
        "records"
    )
    assert not row["converged"] and np.isnan(row["estimate"])
    assert "answers several times in one scenario" in row["note"]


@pytest.mark.parametrize("fit", [unit_models.gee_odds_ratios, unit_models.mixed_odds_ratios])
def test_a_case_with_one_outcome_is_not_fitted_and_says_so(fit) -> None:
    df = clustered().assign(hit=True)
    (row,) = fit(df, "group", "hit", "name", "item").to_dict("records")
    assert not row["converged"] and row["note"] == "not fitted: one group or one outcome"
