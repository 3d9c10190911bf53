"""Seed 000's text-only results: overall scores by gender, jobs weaker than the association bias
(section 4.1's "11/30") by hand, and the named-vs-redacted change in women's hires with the
letter as the unit, calibrated under a null with letter quality and a position effect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.studies.bias_transmission.hiring_summaries import (
    overall_scores,
    redaction_change,
    weaker_than_association,
)


def test_overall_scores_pool_every_trait_and_job() -> None:
    scores = pd.DataFrame(
        {
            "gender": ["female", "female", "male", "male", "male"],
            "letter": ["a", "a", "b", "c", "c"],
            "score": [80.0, 90.0, 70.0, 75.0, 95.0],
        }
    )
    table = overall_scores(scores, "gender").set_index("gender")
    assert table.loc["female", "mean"] == 85.0 and table.loc["female", "letters"] == 1
    assert table.loc["male", "n_scores"] == 3
    assert table.loc["male", "sd"] == pytest.approx(np.std([70, 75, 95], ddof=1))


def test_a_job_is_weaker_only_when_biased_and_its_interval_stays_inside_the_association() -> None:
    by_job = pd.DataFrame(
        {
            "stage": "relative",
            "item": ["Nurse", "Surgeon", "Judge", "Clerk"],
            "share": [0.62, 0.30, 0.52, 0.97],
            "boot_low": [0.58, 0.22, 0.45, 0.95],
            "boot_high": [0.66, 0.38, 0.59, 0.99],
            "sign_p": [1e-5, 1e-6, 0.4, 1e-9],
        }
    )
    association = pd.DataFrame(
        {
            "item": ["Nurse", "Surgeon", "Judge", "Clerk"],
            "association_share": [0.96, 0.25, 0.07, 0.9],
        }
    )
    table = weaker_than_association(by_job, association, alpha=0.001).set_index("item")
    # Nurse: biased (p < alpha) and its farthest bound 0.66 is 0.16 from 0.5 < 0.46: weaker.
    assert table.loc["Nurse", "weaker"] and table.loc["Nurse", "association_bias"] == pytest.approx(
        0.46
    )
    # Surgeon: biased, but its bound 0.22 is 0.28 from 0.5, beyond the association's 0.25.
    assert table.loc["Surgeon", "observed"] and not table.loc["Surgeon", "weaker"]
    assert not table.loc["Judge", "observed"] and not table.loc["Judge", "weaker"]
    assert not table.loc["Clerk", "weaker"]  # hiring bias stronger than the association's


def test_redaction_change_pairs_each_letter_with_itself_and_tests_over_jobs() -> None:
    shares = pd.DataFrame(
        {
            "stage": ["named"] * 3 + ["redacted"] * 3 + ["named"],
            "job": ["x", "x", "y", "x", "x", "y", "y"],
            "letter": ["a", "b", "c", "a", "b", "c", "d"],  # d: read in one stage only
            "share": [1.0, 0.5, 1.0, 0.5, 0.5, 0.0, 1.0],
        }
    )
    change = redaction_change(shares, "named", "redacted")
    assert change["letters"] == 3 and change["unit"] == "job" and change["n_units"] == 2
    d = np.array([0.25, 1.0])  # job x: mean of 0.5 and 0; job y: 1
    assert change["difference"] == pytest.approx(d.mean())
    half = 12.706204736174698 * d.std(ddof=1) / np.sqrt(2)  # t(0.975, 1)
    assert change["ci_low"] == pytest.approx(d.mean() - half)
    assert np.isnan(redaction_change(shares[shares["job"] == "y"], "named", "redacted")["p_value"])


def _null_letter_shares(rng, jobs=30, per=10, position=0.6):
    """Each stage pairs every woman's letter of a job with a random man's letter of that job,
    shows the pair in both orders and hires by quality (Bradley-Terry, sd 1) and position;
    withholding names changes nothing. Returns each woman's letter's share of hires per stage."""
    rows = []
    for job in range(jobs):
        women, men = rng.normal(0, 1, per), rng.normal(0, 1, per)
        for stage in ("named", "redacted"):
            opponents = rng.permutation(per)
            for i in range(per):
                diff = women[i] - men[opponents[i]]
                logit_first = np.log(position / (1 - position))
                won = [
                    rng.random() < 1 / (1 + np.exp(-(diff + logit_first))),  # she is first
                    rng.random() < 1 / (1 + np.exp(-(diff - logit_first))),  # she is second
                ]
                rows.append(
                    {"stage": stage, "job": job, "letter": f"{job}/{i}", "share": np.mean(won)}
                )
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_redaction_change_is_calibrated_with_letter_quality_and_position() -> None:
    """500 null studies (30 jobs x 10 pairs, letter quality sd 1 on the logit, Applicant 1
    preferred 60:40): the test with the job as the unit rejects 3-7 % at 0.05 (with the letter
    as the unit it rejected 1.6 %: women's letters of a job meet the same men's letters)."""
    rng = np.random.default_rng(31)
    reps = 500
    rejected = sum(
        redaction_change(_null_letter_shares(rng), "named", "redacted")["p_value"] < 0.05
        for _ in range(reps)
    )
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps
