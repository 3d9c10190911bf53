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
    # With 60 names the bias-reduced (CR2) sandwich is within a few % of statsmodels'
    # plain one (CR0) times the usual factor G / (G - 1) (N - 1) / (N - K) (CR1); it is 0.6 %
    # above it here. Its exact value is checked against the matrix formula below.
    g, n, k = df["name"].nunique(), len(df), 1 + 1 + 3
    cr1 = oracle.bse["C(group)[T.B]"] * np.sqrt(g / (g - 1) * (n - 1) / (n - k))
    assert row["se"] == pytest.approx(cr1, rel=0.03)
    assert row["odds_ratio"] == pytest.approx(np.exp(row["estimate"]))
    assert row["converged"] and row["n_units"] == 60 and row["unit"] == "name"


def three_groups_few_names(seed: int = 2) -> pd.DataFrame:
    """Three groups of 4, 3 and 5 names, each name answering each of 3 items 1-4 times."""
    rng = np.random.default_rng(seed)
    names = 12
    group = np.array(["A"] * 4 + ["B"] * 3 + ["C"] * 5)
    times = rng.integers(1, 5, (names, 3))
    u, i = np.nonzero(times)
    u, i = np.repeat(u, times[u, i]), np.repeat(i, times[u, i])
    logit = rng.normal(0.0, 1.0, names)[u] + np.array([0.3, -0.2, 0.1])[i]
    hit = rng.random(u.size) < 1 / (1 + np.exp(-logit))
    return pd.DataFrame({"group": group[u], "name": u, "item": i, "hit": hit})


def cr2_by_matrices(df: pd.DataFrame, term: str) -> tuple[float, float]:
    """The CR2 standard error and Bell-McCaffrey (Satterthwaite) df of ``term`` by the textbook
    formulas with whole n x n matrices (Bell & McCaffrey 2002; Pustejovsky & Tipton 2018; working
    covariance diag(mu (1 - mu))): H = W^1/2 X M X' W^1/2, A_j = (I - H_jj)^-1/2,
    V = M sum_j X_j' W_j^1/2 A_j e_j e_j' A_j W_j^1/2 X_j M with e = W^-1/2 (y - mu),
    g_j = (I - H)[:, j] A_j W_j^1/2 X_j M c, df = (sum_j g_j'g_j)^2 / sum_ij (g_i'g_j)^2."""
    from scipy.linalg import fractional_matrix_power

    fit = smf.glm(
        "y ~ C(group) + C(item)",
        df.assign(y=df["hit"].astype(float)),
        family=sm.families.Binomial(),
    ).fit()
    x = np.asarray(fit.model.exog)
    mu = np.asarray(fit.mu)
    w = mu * (1 - mu)
    xt = np.sqrt(w)[:, None] * x
    e = (df["hit"].to_numpy(float) - mu) / np.sqrt(w)
    m = np.linalg.inv(xt.T @ xt)
    h = xt @ m @ xt.T
    c = m[:, list(fit.params.index).index(term)]
    meat, g = np.zeros_like(m), []
    for name in df["name"].unique():
        j = (df["name"] == name).to_numpy()
        a = np.real(fractional_matrix_power(np.eye(j.sum()) - h[np.ix_(j, j)], -0.5))
        meat += np.outer(xt[j].T @ a @ e[j], xt[j].T @ a @ e[j])
        g.append((np.eye(len(df)) - h)[:, j] @ a @ xt[j] @ c)
    gg = np.array(g) @ np.array(g).T
    return float(np.sqrt(c @ meat @ c)), float(np.trace(gg) ** 2 / np.sum(gg**2))


@pytest.mark.parametrize("seed", [2, 5])
def test_gee_cr2_se_and_df_equal_the_matrix_formula(seed: int) -> None:
    """Few names answering unequally often, three groups: the production route (thin QR per
    cluster, df through p x p matrices) against the whole-matrix formula to 1e-8."""
    df = three_groups_few_names(seed)
    table = unit_models.gee_odds_ratios(df, "group", "hit", "name", "item").set_index("group")
    for group in ("B", "C"):
        se, dof = cr2_by_matrices(df, f"C(group)[T.{group}]")
        row = table.loc[group]
        assert row["se"] == pytest.approx(se, rel=1e-8)
        assert 1 < dof < 12 - 3  # fewer than the names less the three groups
        z = abs(row["estimate"]) / se
        assert row["p_value"] == pytest.approx(2 * stats.t.sf(z, dof), rel=1e-8)
        half = stats.t.ppf(0.975, dof) * se
        assert row["ci_high"] - row["estimate"] == pytest.approx(half, rel=1e-8)


def test_gee_df_is_the_names_less_two_in_a_balanced_design() -> None:
    """Two groups of 5 names, each answering 6 times, the groups' rates equal (the same hits,
    names in reverse order): every answer has one weight, the fit is ordinary least squares on
    cluster means, and the Bell-McCaffrey df is exactly the names less two, 8. With 4 items
    crossed and rates differing, the weights differ a little and the df stays within 0.1 of
    10 (12 names), as measured for three seeds."""
    pattern = np.random.default_rng(1).random((5, 6)) < 0.4
    df = pd.DataFrame(
        {
            "group": np.repeat(["A", "B"], 30),
            "name": np.repeat(np.arange(10), 6),
            "hit": np.vstack([pattern, pattern[::-1]]).ravel(),
        }
    )
    se, dof = cr2_by_matrices(df.assign(item=0), "C(group)[T.B]")
    assert dof == pytest.approx(8.0, abs=1e-8)
    (row,) = unit_models.gee_odds_ratios(df, "group", "hit", "name").to_dict("records")
    assert row["se"] == pytest.approx(se, rel=1e-8)
    assert row["ci_high"] - row["estimate"] == pytest.approx(stats.t.ppf(0.975, 8) * se)
    for seed in range(3):
        crossed = clustered(seed=seed, names=12, items=4, reps=3)
        (row,) = unit_models.gee_odds_ratios(crossed, "group", "hit", "name", "item").to_dict(
            "records"
        )
        half = (row["ci_high"] - row["estimate"]) / row["se"]
        assert stats.t.ppf(0.975, 9.9) > half > stats.t.ppf(0.975, 10.1)


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
