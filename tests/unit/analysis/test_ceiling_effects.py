"""Seed 000 Table 8 near the score ceiling: the tested model (fractional logit, permutation of
gender across letters within job) recovers a known effect, agrees with statsmodels and a brute
force permutation, refuses a letter carrying two groups, and holds its level where the paper's
beta regression does not (scores of mean 81 clipped at 100, letters scored twice)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from biasim.analysis.studies.bias_transmission import ceiling_effects
from biasim.analysis.studies.bias_transmission.traits import group_effects


def _ceiling_scores(rng, shift: float = 0.0, *, jobs=30, per=20, reads=2, letter_sd=4.0):
    """Scores ~ N(81 + job + letter + shift for men, 6) rounded and clipped to 1-100: each of
    ``per`` letters per gender and job read ``reads`` times (the letter is the unit)."""
    letters = jobs * 2 * per
    job = np.repeat(np.arange(jobs), 2 * per)
    male = np.tile(np.repeat([0, 1], per), jobs)
    mean = 81 + rng.normal(0, 3, jobs)[job] + rng.normal(0, letter_sd, letters) + shift * male
    score = np.clip(np.round(np.repeat(mean, reads) + rng.normal(0, 6, letters * reads)), 1, 100)
    return pd.DataFrame(
        {
            "job": np.repeat(job, reads).astype(str),
            "gender": np.where(np.repeat(male, reads) == 1, "male", "female"),
            "letter": np.repeat(np.arange(letters), reads).astype(str),
            "trait": "warmth",
            "score": score,
        }
    )


def test_permutation_p_equals_brute_force_within_job_relabelling() -> None:
    rng = np.random.default_rng(3)
    data = _ceiling_scores(rng, 2.0, jobs=3, per=3, reads=2)
    male = (data["gender"] == "male").to_numpy().astype(int)
    p, statistic, units = ceiling_effects.permutation_p(
        data["score"].to_numpy(float),
        male,
        data["job"].to_numpy(),
        data["letter"].to_numpy(),
        n_permutations=4000,
        seed=1,
    )
    centred = data["score"] - data.groupby("job")["score"].transform("mean")
    assert statistic == pytest.approx(centred[male == 1].sum())
    assert units == 18
    # Brute force: relabel whole letters within each job (3 of 6 letters male per job).
    letters = data.assign(c=centred).groupby(["job", "letter"])["c"].sum()
    draws = []
    for _ in range(4000):
        total = 0.0
        for _, part in letters.groupby(level="job"):
            total += rng.permutation(part.to_numpy())[:3].sum()
        draws.append(abs(total))
    brute = (1 + np.sum(np.array(draws) >= abs(statistic) - 1e-9)) / 4001
    assert abs(p - brute) < 0.03


def test_tested_estimate_is_statsmodels_fractional_logit_clustered_by_letter() -> None:
    data = _ceiling_scores(np.random.default_rng(4), 6.0, jobs=6, per=10)
    table = group_effects(data, reference="female", unit="letter").set_index("model")
    row = table.loc[ceiling_effects.MODEL]
    frame = data.assign(f=(data["score"] - 1) / 99, male=(data["gender"] == "male") * 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.glm("f ~ male + C(job)", frame, family=sm.families.Binomial()).fit(
            cov_type="cluster", cov_kwds={"groups": pd.factorize(frame["letter"])[0]}
        )
    assert row["estimate"] == pytest.approx(ref.params["male"], rel=1e-6)
    assert row["std_error"] == pytest.approx(ref.bse["male"], rel=1e-6)
    assert row["unit"] == "letter" and row["n_units"] == 120 and row["n"] == 240
    assert row["role"].startswith("tested")
    assert table.loc["beta_job_random", "role"].startswith("the paper's model")
    assert row["significant"] and row["estimate"] > 0  # 6 points, 120 letters, alpha 0.001


def test_a_letter_with_two_groups_cannot_be_the_unit() -> None:
    data = _ceiling_scores(np.random.default_rng(5), jobs=2, per=2, reads=2)
    data.loc[0, "gender"] = "male"  # the first letter's two reads disagree on its writer
    with pytest.raises(ValueError, match="cannot be the unit"):
        group_effects(data, reference="female", unit="letter")


@pytest.mark.slow
def test_tested_model_is_calibrated_near_the_ceiling_where_the_papers_is_not() -> None:
    """400 null data sets of the pipeline's shape (30 jobs x 20 letters per gender, each read
    twice, mean 81, clipped at 100, letter effects): the permutation test rejects 3-7 % at 0.05."""
    rng = np.random.default_rng(2024)
    reps, rejected = 400, 0
    for _ in range(reps):
        data = _ceiling_scores(rng)
        p, _, _ = ceiling_effects.permutation_p(
            data["score"].to_numpy(float),
            (data["gender"] == "male").to_numpy().astype(int),
            data["job"].to_numpy(),
            data["letter"].to_numpy(),
            n_permutations=400,
            seed=int(rng.integers(1 << 31)),
        )
        rejected += p < 0.05
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps
