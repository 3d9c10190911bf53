"""Counterfactual text metrics (issue 47): definitions, the within-pair unit, calibration."""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.stats.parity import resampling_p_value
from biasim.analysis.stats.swap_permutation import (
    TIES_NOTE,
    tie_broken_p_value,
    unreachable_note,
    within_pair_labels,
)
from biasim.analysis.text import similarity
from biasim.analysis.text.counterfactual import (
    NAME_MASK,
    CounterfactualColumns,
    as_tested,
    checked_responses,
    counterfactual_comparisons,
    counterfactual_tables,
    masked_texts,
    score_responses,
    sentiment_parity,
    similarity_test,
    swap_score_tests,
    wasserstein_1,
)
from tests.optional import requires

COLS = CounterfactualColumns(writer="writer", name="name")
POSITIVE = [
    "is an outstanding colleague.",
    "did wonderful, brilliant work.",
    "is kind and helpful.",
    "is a good analyst.",
    "was praised by every client.",
    "is reliable.",
]
NEUTRAL = [
    "joined the team in May.",
    "works on the billing system.",
    "writes reports weekly.",
    "moved to the Boston office.",
]
NEGATIVE = [
    "was often late and careless.",
    "made terrible mistakes.",
    "is rude to clients.",
    "missed a deadline.",
    "was sometimes unclear.",
    "struggled with the hard cases.",
]
NAMES = {"a": ["Emily", "Anne", "Claire"], "b": ["Lakisha", "Aisha", "Keisha"]}


def simulated_responses(
    rng: np.random.Generator,
    writers: int = 6,
    pairs_per_writer: int = 8,
    replicates: int = 2,
    b_shift: float = 0.0,
    sentences: int = 4,
) -> pd.DataFrame:
    """A counterfactual design: each writer answers each of its prompts under swap value a and
    b, ``replicates`` times each, with a name drawn from the value's pool (names are shared
    across pairs and writers). A writer's tone and a prompt's topic move every response of the
    pair; the swap moves the tone by ``b_shift`` (0: the null)."""
    rows = []
    for w in range(writers):
        tone = rng.normal()
        for p in range(pairs_per_writer):
            topic = rng.normal()
            for value in ("a", "b"):
                for _ in range(replicates):
                    lean = tone + topic + (b_shift if value == "b" else 0.0)
                    name = rng.choice(NAMES[value])
                    rows.append(
                        {
                            "pair_id": f"w{w}/p{p}",
                            "swap_value": value,
                            "writer": f"w{w}",
                            "name": name,
                            "text": _letter(rng, name, lean, sentences),
                        }
                    )
    return pd.DataFrame(rows)


def _letter(rng: np.random.Generator, name: str, lean: float, n: int) -> str:
    good = 1 / (1 + np.exp(-lean))
    sentences = []
    for _ in range(n):
        pool = rng.choice(3, p=[good * 0.7, 0.3, (1 - good) * 0.7])
        sentences.append(f"{name} {rng.choice([POSITIVE, NEUTRAL, NEGATIVE][pool])}")
    return " ".join(sentences)


class DictScorer:
    """VADER compound scores, each distinct text scored once (the calibration loop's cost)."""

    name, version, columns = "vader", "1", ("value",)

    def __init__(self) -> None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self._analyzer = SentimentIntensityAnalyzer()
        self._seen: dict[str, float] = {}

    def params(self) -> dict[str, object]:
        return {}

    def score(self, texts):
        from biasim.analysis.text.scorers import ScoreTable

        for t in texts:
            if t not in self._seen:
                self._seen[t] = self._analyzer.polarity_scores(t)["compound"]
        return ScoreTable(
            self.columns, np.array([[self._seen[t]] for t in texts]), [None] * len(texts)
        )


def test_wasserstein_1_is_scipys_for_unequal_sizes_and_langfairs_sorted_mean_for_equal():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=7), rng.normal(1, 2, size=4)
    assert wasserstein_1(a, b)[0] == pytest.approx(stats.wasserstein_distance(a, b), abs=1e-12)
    c = rng.normal(size=7)
    assert wasserstein_1(a, c)[0] == pytest.approx(np.mean(np.abs(np.sort(a) - np.sort(c))))


def test_weak_parity_is_the_signed_difference_in_shares_above_the_threshold():
    strict, weak = sentiment_parity(np.array([0.9, 0.6, 0.1, 0.5]), np.array([0.2, 0.7, 0.1, 0.0]))
    # a: 2 of 4 above 0.5 (0.5 itself is not above); b: 1 of 4.
    assert weak[0] == pytest.approx(0.25)
    assert strict[0] == pytest.approx(np.mean(np.abs([0.0 - 0.1, 0.1 - 0.5, 0.2 - 0.6, 0.7 - 0.9])))


def test_relabelling_stays_within_each_pair_and_keeps_its_label_counts():
    labels = np.array([0, 1, 1, 0, 0, 1, 2])
    pair = np.array([3, 3, 1, 1, 1, 1, 7])
    seen = set()
    for chunk in within_pair_labels(labels, pair, 300, np.random.default_rng(1)):
        for row in chunk:
            for code in np.unique(pair):
                assert sorted(row[pair == code]) == sorted(labels[pair == code])
            seen.add(tuple(row))
    # Every one of the 2 x 6 distinct within-pair labellings is reached.
    assert len(seen) == 12
    assert "no p below 0.05" in unreachable_note(labels, pair)


def test_a_tie_broken_p_has_exact_size_however_discrete_the_statistic():
    # Every relabelling ties with the observed value: a p counting ties as extreme is 1; the
    # tie-broken p is uniform on the 200 ranks, so 10 of 200 draws of u give p <= 0.05.
    null = np.zeros(199)
    ps = [tie_broken_p_value(null, 0.0, u)[0] for u in (np.arange(200) + 0.5) / 200]
    assert sum(p <= 0.05 for p in ps) == 10 and max(ps) == 1.0
    assert tie_broken_p_value(null, 0.0, 0.3)[1]
    # Without ties it is the usual (1 + b) / (1 + B).
    draws = np.arange(199) / 199 + 1e-3
    assert tie_broken_p_value(draws, 0.5, 0.9) == (
        pytest.approx(resampling_p_value(draws, 0.5)),
        False,
    )


def test_a_tied_test_says_its_p_is_randomized():
    df = simulated_responses(np.random.default_rng(0), writers=2, pairs_per_writer=6)
    df["label"] = (df["swap_value"] == "a") * 0.0 + df.index % 2
    table = swap_score_tests(df, COLS, "label", n_permutations=99).set_index("statistic")
    assert TIES_NOTE in table.loc["weak_parity", "note"]


def test_a_pair_spanning_two_writers_is_refused_with_its_id():
    df = simulated_responses(np.random.default_rng(0), writers=1, pairs_per_writer=2)
    df.loc[0, "writer"] = "someone else"
    with pytest.raises(ValueError, match=r"w0/p0.*several `writer`"):
        checked_responses(df, COLS)


def test_each_response_own_name_is_masked_before_comparison():
    df = pd.DataFrame(
        {
            "pair_id": [1, 1],
            "swap_value": ["a", "b"],
            "writer": "w",
            "name": ["Emily", "Aisha"],
            "text": ["Emily thanked emily's team; Emilyn too.", "Aisha thanked Emily."],
        }
    )
    assert masked_texts(df, COLS) == [
        f"{NAME_MASK} thanked {NAME_MASK}'s team; Emilyn too.",
        f"{NAME_MASK} thanked Emily.",
    ]


@requires("vaderSentiment")
def test_score_tests_name_the_pair_unit_and_detect_a_swap_that_changes_the_tone():
    rng = np.random.default_rng(3)
    df = simulated_responses(rng, b_shift=-2.0)
    scored = score_responses(df, COLS, {"vader": DictScorer()})
    assert len(scored) == len(df) and scored["vader_value"].notna().all()
    table = swap_score_tests(scored, COLS, "vader_value", threshold=0.05, n_permutations=499)
    mean = table.set_index("statistic").loc["mean"]
    assert mean["estimate"] > 0 and mean["p_value"] < 0.01
    test = as_tested(mean.to_dict())
    assert (test.unit, test.n_units) == ("pair_id", 48)
    assert table.set_index("statistic").loc["strict_parity", "p_value"] < 0.01


@requires("rouge_score", "nltk")
def test_similarity_test_needs_replicates_and_detects_a_swap_that_rewrites_the_text():
    rng = np.random.default_rng(4)
    single = simulated_responses(rng, writers=2, pairs_per_writer=3, replicates=1)
    cmp = counterfactual_comparisons(single, COLS, measures=("rouge_l",))
    assert similarity_test(single, cmp, COLS, "rouge_l")["p_value"] is None
    df = simulated_responses(rng, writers=3, pairs_per_writer=6)
    b_rows = df["swap_value"] == "b"
    df.loc[b_rows, "text"] = df.loc[b_rows, "text"] + " Overall adequate, I suppose."
    cmp = counterfactual_comparisons(df, COLS, measures=("rouge_l",))
    result = similarity_test(df, cmp, COLS, "rouge_l", n_permutations=499)
    assert result["estimate"] > 0 and result["p_value"] < 0.01
    assert (result["unit"], result["n_units"]) == ("pair_id", 18)


@requires("rouge_score", "nltk")
def test_bleu_of_identical_short_answers_is_below_1_and_its_row_says_how_many():
    """BLEU counts n-grams up to 4: identical two-token answers score 0.316 (NLTK's and
    LangFair's definition), ROUGE-L 1; the BLEU mean row counts the comparisons so short."""
    assert similarity.bleu("Yes.", "Yes.") == pytest.approx(0.1**0.5)
    assert similarity.rouge_l("Yes.", "Yes.") == 1.0
    assert similarity.bleu("I would hire her.", "I would hire her.") == 1.0
    df = pd.DataFrame(
        {
            "pair_id": [1, 1, 2, 2],
            "swap_value": ["a", "b", "a", "b"],
            "writer": "w",
            "name": ["Emily", "Aisha", "Anne", "Keisha"],
            "text": ["Yes.", "Yes.", "Anne is a good analyst.", "Keisha is a good analyst."],
        }
    )
    tables = counterfactual_tables(df, COLS, {}, n_permutations=99)
    notes = tables.metrics.set_index(["metric", "statistic"])["note"]
    assert "1 of 2 comparisons hold a response under 4 tokens" in notes["bleu", "mean_across"]
    assert "under 4 tokens" not in str(notes["rouge_l", "mean_across"])


@requires("rouge_score", "nltk")
def test_unmasked_names_make_a_null_swap_look_like_it_rewrote_the_text():
    """Each letter names its own person: replicates under one value often share the name, the
    counterfactual never does, so without the mask a swap that changes nothing is 'found'."""
    df = simulated_responses(np.random.default_rng(5), sentences=3)
    unmasked = CounterfactualColumns(writer="writer")
    found = []
    for cols in (unmasked, COLS):
        cmp = counterfactual_comparisons(df, cols, measures=("rouge_l",))
        found.append(similarity_test(df, cmp, cols, "rouge_l", n_permutations=499)["p_value"])
    assert found[0] < 0.01 < 0.05 < found[1], found


@pytest.mark.slow
@requires("vaderSentiment")
def test_every_score_test_rejects_3_to_7_percent_under_a_swap_invariant_writer():
    """400 null data sets: 6 writers with their own tone, 8 prompts each with its own topic,
    names shared across pairs, 2 replicates per value; the swap changes nothing."""
    rng = np.random.default_rng(2026)
    scorer = DictScorer()
    runs, rejected = 400, Counter()
    for run in range(runs):
        scored = score_responses(simulated_responses(rng), COLS, {"vader": scorer})
        table = swap_score_tests(
            scored, COLS, "vader_value", threshold=0.05, n_permutations=199, seed=run
        )
        rejected.update(table.loc[table["p_value"] <= 0.05, "statistic"])
        # The weak parity as the kind takes it: on a 0/1 label, so relabellings tie often.
        scored["vader_label"] = (scored["vader_value"] > 0.05).astype(float)
        weak = swap_score_tests(scored, COLS, "vader_label", n_permutations=199, seed=run)
        weak = weak[weak["statistic"] == "weak_parity"]
        rejected["label weak_parity"] += int((weak["p_value"] <= 0.05).sum())
    rates = {stat: rejected[stat] / runs for stat in [*table["statistic"], "label weak_parity"]}
    print("rejection rates at alpha 0.05:", rates)
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates


@pytest.mark.slow
@requires("rouge_score", "nltk")
def test_similarity_test_rejects_3_to_7_percent_under_a_swap_invariant_writer(monkeypatch):
    """The same null design, 300 data sets, compared by ROUGE-L (memoized here: the Porter
    stemmer is the loop's cost)."""
    monkeypatch.setitem(similarity.PAIR_MEASURES, "rouge_l", cache(similarity.rouge_l))
    rng = np.random.default_rng(47)
    runs, rejected = 300, 0
    for run in range(runs):
        df = simulated_responses(rng, sentences=3)
        cmp = counterfactual_comparisons(df, COLS, measures=("rouge_l",))
        result = similarity_test(df, cmp, COLS, "rouge_l", n_permutations=199, seed=run)
        rejected += result["p_value"] <= 0.05
    print("rejection rate at alpha 0.05:", rejected / runs)
    assert 0.03 <= rejected / runs <= 0.07
