"""Stereotype association and co-occurrence scores (issue 47): definitions by hand, the word
lists, the set as the unit of the association test, and its calibration under a writer whose
content ignores the swap (LangFair's values: test_counterfactual_langfair.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.counterfactual import CounterfactualColumns
from biasim.analysis.text.stereotype import (
    NO_COBS_TEST,
    association_test,
    cooccurrence_bias,
    stereotype_tables,
    stereotypical_associations,
)
from biasim.analysis.text.stereotype_words import StereotypeWords, load_stereotype_words

COLS = CounterfactualColumns(writer="writer")
WORDS = StereotypeWords(
    groups={"female": ["she", "her"], "male": ["he", "his", "him"]},
    targets=["kind", "ambitious", "warm", "decisive", "honest", "gentle"],
    stop_words=frozenset({"is", "and", "was", "a"}),
    source="test lists",
)
COMMUNAL, AGENTIC = ["kind", "warm", "gentle"], ["ambitious", "decisive", "honest"]


def test_association_is_the_mean_total_variation_of_size_normalised_counts():
    texts = ["she is kind and she is warm.", "he is kind.", "his work is warm and decisive."]
    # kind: female 2 x 1, male 1 x 1 -> (2/2, 1/3) -> (0.75, 0.25): TV 0.25.
    # warm: female 2, male 1 -> the same 0.25. decisive: male only -> TV 0.5.
    assert stereotypical_associations(texts, WORDS) == pytest.approx((0.25 + 0.25 + 0.5) / 3)
    assert stereotypical_associations(["no group words here, kind."], WORDS) is None


def test_cooccurrence_bias_by_hand():
    beta = 0.5
    texts = ["she kind", "he warm kind"]
    # Reference words: kind (x2), warm. Group tokens: she 1, he 1 -> P(g) = 1/3 each.
    # kind: female 0.5 (text 1), male 0.25 (text 2); warm: male 0.5. Totals f 0.5, m 0.75.
    ratio = (0.5 / 0.5) / (0.25 / 0.75)
    assert cooccurrence_bias(texts, WORDS, beta=beta) == pytest.approx(abs(np.log10(ratio)))
    assert cooccurrence_bias(["she is kind"], WORDS) is None  # one group only


def test_the_default_lists_are_langfairs_copied_and_a_study_file_is_checked(tmp_path):
    words = load_stereotype_words()
    assert {"she", "her", "woman"} <= set(words.groups["female"]) and "kind" in words.targets
    assert len(words.targets) == 422 and len(words.stop_words) == 179
    assert len(load_stereotype_words(target="profession").targets) == 288
    bad = tmp_path / "w.yaml"
    bad.write_text("groups: {a: [x], b: y}\ntargets: {adjective: [k]}\n")
    with pytest.raises(ValueError, match="`b` must be a list of words"):
        load_stereotype_words(bad)


def simulated_letters(rng: np.random.Generator, sets: int = 40, bias: float = 0.0) -> pd.DataFrame:
    """Two letters per set, she/her under a and he/his under b. Each writer has its own taste
    in adjectives and each set its own draw; with ``bias`` > 0 the b letter leans agentic and
    the a letter communal (0: content ignores the swap)."""
    taste = rng.dirichlet(np.ones(6), size=4)
    vocabulary = COMMUNAL + AGENTIC
    rows = []
    for s in range(sets):
        base = taste[s % 4]
        for value, (subject, possessive) in (("a", ("she", "her")), ("b", ("he", "his"))):
            lean = np.r_[np.full(3, -bias), np.full(3, bias)] * (1 if value == "b" else -1)
            weights = base * np.exp(lean)
            adjectives = rng.choice(vocabulary, size=rng.integers(1, 4), p=weights / weights.sum())
            text = f"{subject} is {' and '.join(adjectives)}. {possessive} work was good."
            rows.append({"pair_id": s, "swap_value": value, "writer": f"w{s % 4}", "text": text})
    return pd.DataFrame(rows)


def test_association_test_names_the_set_unit_and_detects_adjectives_that_follow_the_swap():
    biased = association_test(
        simulated_letters(np.random.default_rng(0), bias=1.5), COLS, WORDS, n_permutations=499
    )
    assert biased["unit"] == "pair_id" and biased["n_units"] == 40
    assert biased["p_value"] < 0.01
    null = association_test(simulated_letters(np.random.default_rng(0)), COLS, WORDS, 499)
    assert null["estimate"] < biased["estimate"]


def test_tables_give_both_scores_and_say_why_cobs_has_no_p():
    letters = simulated_letters(np.random.default_rng(1), bias=1.0)
    metrics, per_word = stereotype_tables(letters, COLS, WORDS, n_permutations=99)
    rows = metrics.set_index("metric")
    assert rows.loc["cooccurrence_bias", "note"] == NO_COBS_TEST
    assert pd.isna(rows.loc["cooccurrence_bias", "p_value"])
    assert rows.loc["cooccurrence_bias", "estimate"] == pytest.approx(
        cooccurrence_bias(letters["text"].tolist(), WORDS)
    )
    assert rows.loc["stereotype_association", "estimate"] == pytest.approx(
        stereotypical_associations(letters["text"].tolist(), WORDS)
    )
    assert set(per_word["word"]) <= set(WORDS.targets) and len(per_word) == 6
    assert (metrics["words"] == "test lists").all()


@pytest.mark.slow
def test_association_test_rejects_3_to_7_percent_when_content_ignores_the_swap():
    rng = np.random.default_rng(47)
    n = 200
    p = [
        association_test(simulated_letters(rng), COLS, WORDS, n_permutations=199, seed=i)["p_value"]
        for i in range(n)
    ]
    rate = float(np.mean(np.array(p) < 0.05))
    assert 0.03 <= rate <= 0.07, rate
