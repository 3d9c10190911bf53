"""Absolute evaluations (seed 000, Exp. 3-5): scores kept or excluded by reason, per-job means,
and the gender effect per trait (beta regression with job fixed effects, Gaussian mixed model on
the logit scale) recovered from simulated data with a known effect and calibrated under the null."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from statsmodels.othermod.betareg import BetaModel

from biasim.analysis.studies.bias_transmission.trait_dimensions import DIMENSIONS, TRAIT_TYPES
from biasim.analysis.studies.bias_transmission.traits import (
    MEMBER_EXCLUDED,
    MISSING,
    NOT_A_NUMBER,
    OUT_OF_RANGE,
    group_effects,
    long_scores,
    squeeze,
    trait_means,
    type_scores,
    type_table,
)


def _simulate(
    rng, beta: float, *, jobs: int = 8, per: int = 20, phi: float = 30.0, sd: float = 0.3
):
    """Scores 1-100 whose mean's logit is 1.5 + job effect + beta for men (beta-distributed)."""
    job = np.repeat(np.arange(jobs), 2 * per)
    male = np.tile(np.repeat([0.0, 1.0], per), jobs)
    mu = 1 / (1 + np.exp(-(1.5 + rng.normal(0, sd, jobs)[job] + beta * male)))
    y = rng.beta(mu * phi, (1 - mu) * phi)
    return pd.DataFrame(
        {
            "job": [f"job{j}" for j in job],
            "gender": np.where(male == 1, "male", "female"),
            "trait": "hireability",
            "score": np.clip(np.round(1 + 99 * y), 1, 100),
        }
    )


def test_the_13_dimensions_are_the_papers() -> None:
    assert len(DIMENSIONS) == 13 and len(set(DIMENSIONS)) == 13


def test_bad_scores_are_counted_by_reason_never_coerced() -> None:
    frame = pd.DataFrame(
        {
            "job": ["nurse", "nurse", "judge", "judge"],
            "gender": ["female", "male", "female", "male"],
            "hireability": [80, 101, "high", None],
            "friendliness": [70, 0, 85.5, 60],
        }
    )
    scores, excluded = long_scores(frame, ["hireability", "friendliness"], ["job", "gender"])
    assert sorted(scores["score"]) == [60.0, 70.0, 80.0]
    reasons = {(r.job, r.gender, r.trait): r.reason for r in excluded.itertuples()}
    assert reasons == {
        ("nurse", "male", "hireability"): OUT_OF_RANGE,
        ("judge", "female", "hireability"): NOT_A_NUMBER,
        ("judge", "male", "hireability"): MISSING,
        ("nurse", "male", "friendliness"): OUT_OF_RANGE,
        ("judge", "female", "friendliness"): OUT_OF_RANGE,  # 85.5 is not a whole score
    }


def test_trait_means_by_hand() -> None:
    scores = pd.DataFrame(
        {"job": ["a"] * 3, "gender": ["f"] * 3, "trait": ["t"] * 3, "score": [70.0, 80.0, 90.0]}
    )
    row = trait_means(scores, ["job", "gender"]).iloc[0]
    assert (row["n"], row["mean"], row["sd"]) == (3, 80.0, 10.0)


def test_squeeze_stays_inside_the_unit_interval() -> None:
    y = squeeze(np.array([1, 50, 100]))
    assert 0 < y.min() < 0.5 < y.max() < 1
    assert y[1] == pytest.approx((49 / 99 * 2 + 0.5) / 3)


def test_known_gender_effect_is_recovered_by_both_models() -> None:
    rng = np.random.default_rng(7)
    scores = _simulate(rng, 0.25, jobs=12, per=60)
    table = group_effects(scores, reference="female").set_index("model")
    for model in ("beta_job_random", "logit_mixed"):
        row = table.loc[model]
        assert row["term"] == "male" and row["reference"] == "female" and row["n"] == 1440
        assert abs(row["estimate"] - 0.25) < 3 * row["std_error"], (model, row["estimate"])
        assert row["significant"]  # alpha 0.001
    # The mixed model is statsmodels' own fit of the logit of the squeezed score.
    data = scores.assign(y=squeeze(scores["score"]))
    data["logit"] = np.log(data["y"] / (1 - data["y"]))
    data["male"] = (data["gender"] == "male").astype(float)
    ref = smf.mixedlm("logit ~ male", data, groups="job").fit(reml=True)
    assert table.loc["logit_mixed", "estimate"] == pytest.approx(ref.params["male"], rel=1e-6)


def test_jobs_that_do_not_differ_give_the_least_squares_fit_and_say_so() -> None:
    """A synthetic run without job effects can estimate the job variance at 0 (statsmodels'
    optimizer then failed with a singular matrix); the estimate is the least-squares one."""
    one_job = _simulate(np.random.default_rng(5), 0.2, jobs=1, per=30)
    scores = pd.concat([one_job.assign(job=f"job{j}") for j in range(4)], ignore_index=True)
    mixed = group_effects(scores, reference="female").set_index("model").loc["logit_mixed"]
    assert "job variance estimated at 0" in mixed["warning"]
    data = scores.assign(y=squeeze(scores["score"]), male=(scores["gender"] == "male") * 1.0)
    data["logit"] = np.log(data["y"] / (1 - data["y"]))
    ols = smf.ols("logit ~ male", data).fit()
    assert mixed["estimate"] == pytest.approx(ols.params["male"], rel=1e-9)
    with_effects = group_effects(_simulate(np.random.default_rng(6), 0.2), reference="female")
    assert not with_effects["warning"].str.contains("job variance").any()


def test_too_few_scores_give_no_estimate_and_say_why() -> None:
    scores = _simulate(np.random.default_rng(2), 0.0, jobs=1, per=1)
    table = group_effects(scores, reference="female")
    assert table["estimate"].isna().all() and not table["significant"].any()
    assert set(table["warning"]) == {"too few scores to fit (2 per group and 2 jobs at least)"}


@pytest.mark.slow
def test_gender_tests_are_calibrated_under_the_null_with_job_effects() -> None:
    """No gender effect, jobs with their own intercepts (sd 0.3 on the logit), 8 jobs x 20
    letters per gender, 500 data sets: each model's test at 0.05 rejects 3-7 % of the time."""
    rng = np.random.default_rng(11)
    rejected = {"fractional_logit_perm": 0, "beta_job_random": 0, "logit_mixed": 0}
    reps = 500
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few mixed fits report a boundary variance
        for _ in range(reps):
            table = group_effects(_simulate(rng, 0.0), reference="female")
            for model, p in zip(table["model"], table["p_value"], strict=True):
                rejected[model] += p < 0.05
    for model, count in rejected.items():
        assert 0.03 <= count / reps <= 0.07, (model, count / reps)


def test_the_default_trait_types_split_the_13_dimensions() -> None:
    members = [d for dims in TRAIT_TYPES.values() for d in dims]
    assert sorted(members) == sorted(DIMENSIONS)  # each dimension in exactly one type
    assert set(TRAIT_TYPES) == {"hireability", "competency", "warmth"}


def test_trait_type_scores_are_member_means_and_incomplete_letters_are_counted() -> None:
    frame = pd.DataFrame(
        {
            "job": ["nurse", "nurse", "nurse", "judge"],
            "gender": ["female", "male", "male", "female"],
            "friendliness": [70, 80, 90, 60],
            "teamwork": [80, 90, 101, 70],  # 101: the third letter gets no warmth score
            "hireability": [50, 60, 70, 80],
        }
    )
    types = {"warmth": ["friendliness", "teamwork"], "hireability": ["hireability"]}
    scores, excluded = type_scores(frame, types, ["job", "gender"])
    warmth = scores[scores["trait"] == "warmth"]
    assert list(warmth["score"]) == [75.0, 85.0, 65.0]
    assert list(scores[scores["trait"] == "hireability"]["score"]) == [50.0, 60.0, 70.0, 80.0]
    assert excluded.to_dict("records") == [
        {
            "job": "nurse",
            "gender": "male",
            "trait": "warmth",
            "reason": MEMBER_EXCLUDED,
            "excluded": 1,
        }
    ]
    table = type_table(scores, ["job"], "gender", "female", "male").set_index(["job", "trait_type"])
    nurse = table.loc[("nurse", "hireability")]
    assert (nurse["n_female"], nurse["mean_female"], nurse["n_male"]) == (1, 50.0, 2)
    assert nurse["mean_male"] == 65.0 and nurse["sd_male"] == pytest.approx(
        np.std([60, 70], ddof=1)
    )
    assert nurse["difference"] == -15.0  # female minus male, as the paper's Table 9
    judge = table.loc[("judge", "warmth")]
    assert judge["n_male"] == 0 and np.isnan(judge["mean_male"]) and np.isnan(judge["difference"])


def test_a_known_effect_on_one_trait_type_is_recovered_and_matches_statsmodels() -> None:
    rng = np.random.default_rng(5)
    base = _simulate(rng, 0.0, jobs=10, per=40)
    frame = base[["job", "gender"]].copy()
    for dim in TRAIT_TYPES["warmth"]:  # warmth dimensions 0.3 higher (logit) for men
        frame[dim] = _simulate(
            np.random.default_rng(100 + DIMENSIONS.index(dim)), 0.3, jobs=10, per=40
        )["score"].to_numpy()
    for dim in TRAIT_TYPES["competency"]:
        frame[dim] = _simulate(
            np.random.default_rng(100 + DIMENSIONS.index(dim)), 0.0, jobs=10, per=40
        )["score"].to_numpy()
    types = {k: list(TRAIT_TYPES[k]) for k in ("warmth", "competency")}
    scores, excluded = type_scores(frame, types, ["job", "gender"])
    assert excluded.empty
    table = group_effects(scores, reference="female", cluster="job")
    beta = table[table["model"] == "beta_job_random"].set_index("trait")
    assert beta.loc["warmth", "significant"] and beta.loc["warmth", "estimate"] > 0.1
    assert not beta.loc["competency", "significant"]
    # Oracle: statsmodels' beta regression of the squeezed member mean with job fixed effects;
    # with 80 letters a job, a random job intercept is all but fixed, so the two agree closely.
    warmth = scores[scores["trait"] == "warmth"]
    data = warmth.assign(
        y=squeeze(warmth["score"]), male=(warmth["gender"] == "male").astype(float)
    )
    ref = BetaModel.from_formula("y ~ male + C(job)", data).fit(disp=0)
    assert beta.loc["warmth", "estimate"] == pytest.approx(ref.params["male"], rel=0.02)
    assert beta.loc["warmth", "std_error"] == pytest.approx(ref.bse["male"], rel=0.05)
