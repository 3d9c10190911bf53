"""Grading many models: empirical-Bayes shrinkage and BH q-values against statsmodels, and
eight simulated models of which two discriminate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.meta_analysis import combine_effects
from statsmodels.stats.multitest import multipletests

from biasim.analysis.stats import grading, unit_models


def test_shrinkage_uses_the_dersimonian_laird_tau_and_mean() -> None:
    estimate = np.array([0.1, 0.5, -0.2, 0.9, 0.3, 0.0])
    se = np.array([0.2, 0.25, 0.15, 0.3, 0.2, 0.1])
    shrunk, sd, mu, tau2 = grading.shrink(estimate, se)
    oracle = combine_effects(estimate, se**2, method_re="dl")
    assert tau2 == pytest.approx(oracle.tau2)
    assert mu == pytest.approx(oracle.mean_effect_re)
    keep = tau2 / (tau2 + se**2)
    np.testing.assert_allclose(shrunk, mu + keep * (estimate - mu))
    np.testing.assert_allclose(sd, np.sqrt(keep) * se)
    assert np.all(np.abs(shrunk - mu) <= np.abs(estimate - mu) + 1e-12)


def test_q_values_are_benjamini_hochberg_over_every_row() -> None:
    table = pd.DataFrame(
        {
            "model_label": [f"m{i}" for i in range(6)],
            "group": "B",
            "reference": "A",
            "estimate": [0.05, 1.2, -0.1, 0.9, 0.2, -1.5],
            "se": [0.2, 0.3, 0.2, 0.4, 0.25, 0.35],
        }
    )
    graded = grading.grade_models(table)
    p = graded["p_value"].to_numpy()
    np.testing.assert_allclose(graded["q_value"], multipletests(p, method="fdr_bh")[1])
    assert graded.loc[graded["q_value"] < 0.05, "grade"].eq("discriminates").all()
    assert graded.set_index("model_label").loc["m5", "direction"] == "favours A"


def eight_models(rng: np.random.Generator, biased: dict[int, float], names: int = 60):
    """Per model: names nested in groups A/B (name sd 1), 4 templates x 2 answers each."""
    rows = []
    for m in range(8):
        group = np.repeat(["A", "B"], names // 2)
        u, t = np.meshgrid(np.arange(names), np.arange(8), indexing="ij")
        u, t = u.ravel(), t.ravel() % 4
        logit = rng.normal(0, 1, names)[u] + biased.get(m, 0.0) * (group[u] == "B")
        hit = rng.random(u.size) < 1 / (1 + np.exp(-logit))
        rows.append(
            pd.DataFrame(
                {"model_label": f"m{m}", "group": group[u], "name": u, "item": t, "hit": hit}
            )
        )
    return pd.concat(rows, ignore_index=True)


def grades_of(data: pd.DataFrame) -> pd.DataFrame:
    fits = [
        unit_models.gee_odds_ratios(part, "group", "hit", "name", "item").assign(model_label=m)
        for m, part in data.groupby("model_label", sort=True)
    ]
    return grading.grade_models(pd.concat(fits, ignore_index=True)).set_index("model_label")


def test_eight_models_two_of_which_discriminate_are_graded() -> None:
    graded = grades_of(eight_models(np.random.default_rng(8), {2: -1.5, 5: -1.5}))
    assert set(graded.index[graded["grade"] == "discriminates"]) == {"m2", "m5"}
    assert graded.loc["m2", "direction"] == "favours A"
    assert set(graded.nsmallest(2, "shrunk").index) == {"m2", "m5"}


def test_grades_take_the_gee_s_own_p_and_leave_out_a_contrast_it_could_not_test() -> None:
    """Few names: the GEE's p is on Student's t; the grade must not re-test its estimate on the
    normal scale. A model with one name a group has no p and is not graded."""
    rng = np.random.default_rng(4)
    data = eight_models(rng, {}, names=12)
    one = data[(data["model_label"] == "m0") & data["name"].isin([0, 11])]
    data = pd.concat([data[data["model_label"] != "m0"], one], ignore_index=True)
    fits = pd.concat(
        [
            unit_models.gee_odds_ratios(part, "group", "hit", "name", "item").assign(model_label=m)
            for m, part in data.groupby("model_label", sort=True)
        ],
        ignore_index=True,
    )
    graded = grades_of(data)
    assert "m0" not in graded.index and len(graded) == 7
    tested = fits.set_index("model_label").loc[graded.index]
    np.testing.assert_allclose(graded["p_value"], tested["p_value"])
    normal = 2 * stats.norm.sf(np.abs(graded["z"]))
    assert (graded["p_value"] >= normal).all() and (graded["p_value"] > normal)[normal < 0.5].all()
