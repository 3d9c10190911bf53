"""PRISM's no-gender-signal baseline and its validation against human ratings: the expected
score of unbalanced lists written out from the combinatorics, the label-permutation null
against it, its calibration when the model's word preferences carry no gender, and the
Spearman interval's coverage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.studies.prism.baseline import (
    WITHIN,
    dealt,
    expected_no_signal_score,
    label_permutation_null,
)
from biasim.analysis.studies.prism.score import WordLists
from biasim.analysis.studies.prism.scorer import PrismScorer
from biasim.analysis.studies.prism.validation import rating_correlations, spearman_interval
from tests.prism_stub import StubMaskedLM


def _lists(n_fem: int, n_mas: int) -> tuple[WordLists, dict[str, int]]:
    words = [f"w{i}" for i in range(n_fem + n_mas)]
    return WordLists(tuple(words[:n_fem]), tuple(words[n_fem:])), {
        w: i for i, w in enumerate(words)
    }


def test_unbalanced_role_lists_give_a_text_with_no_signal_plus_two():
    # The paper's role lists after filtering: 7 feminine, 53 masculine; alpha 23 keeps 14.
    # P(no feminine word among the 14 kept) = C(53, 14) / C(60, 14); the fallback is 2 * 7.5.
    p_no_fem = math.comb(53, 14) / math.comb(60, 14)
    assert expected_no_signal_score(7, 53, 23) == pytest.approx(15 * p_no_fem)
    assert expected_no_signal_score(7, 53, 23) == pytest.approx(2.07, abs=0.01)
    assert expected_no_signal_score(53, 7, 23) == pytest.approx(-2.07, abs=0.01)
    assert expected_no_signal_score(6, 6, 23) == 0


def test_dealing_keeps_sizes_and_the_pooled_words():
    lists = WordLists(("a", "b", "a"), ("c", "d", "e", "f"))
    new = dealt(lists, np.random.default_rng(1))
    assert (len(new.fem), len(new.mas)) == (3, 4)
    assert sorted(new.pooled) == sorted(lists.pooled)


def test_permutation_baseline_is_the_expected_score_for_unrelated_preferences():
    lists, column_of = _lists(7, 53)
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(60), size=3000)  # every token its own random ranking
    owner = np.repeat(np.arange(300), 10)
    found = label_permutation_null(probs, owner, ["text"] * 300, lists, column_of, 23, 99)
    null = found["text"]
    assert null.baseline == pytest.approx(expected_no_signal_score(7, 53, 23), abs=0.15)
    assert null.low < null.baseline < null.high
    assert null.texts == 300


def _preferences_without_gender(rng, n_words: int, tokens: int) -> np.ndarray:
    # A model's preferences shared by every context (frequent words, or an untrained model's
    # arbitrary favourites) plus per-token noise: nothing tied to which list a word is on.
    shared = rng.normal(0, 1.5, n_words)
    return np.exp(shared[None, :] + rng.normal(0, 1, (tokens, n_words)))


def test_shared_preferences_widen_the_null_as_a_random_weight_model_does():
    # A model preferring the same words everywhere (a random-weight BERT) moves every text's
    # score the same way: averaging texts does not shrink the null, so a mean far from the
    # baseline is not called unless it leaves that wide range.
    lists, column_of = _lists(4, 8)
    rng = np.random.default_rng(11)
    owner = np.repeat(np.arange(40), 10)
    shared = _preferences_without_gender(rng, 12, 400)
    independent = rng.dirichlet(np.ones(12), size=400)
    wide, narrow = (
        label_permutation_null(p, owner, ["text"] * 40, lists, column_of, 23, 199)["text"]
        for p in (shared, independent)
    )
    assert wide.high - wide.low > 3 * (narrow.high - narrow.low)
    assert wide.verdict == WITHIN


def test_a_feminine_signal_is_called_feminine():
    lists, column_of = _lists(4, 8)
    rng = np.random.default_rng(5)
    probs = _preferences_without_gender(rng, 12, 400)
    probs[:, :4] *= 50  # feminine words far more probable everywhere
    owner = np.repeat(np.arange(40), 10)
    null = label_permutation_null(probs, owner, ["text"] * 40, lists, column_of, 23, 199)["text"]
    assert null.verdict == "feminine" and null.p < 0.05


@pytest.mark.slow
def test_label_permutation_null_is_calibrated_when_preferences_carry_no_gender():
    # Under H0 the word labels are exchangeable: the design keeps tokens nested in texts and
    # one model preference shared by all of them; the observed labels are a random dealing.
    rng = np.random.default_rng(2024)
    sims, hits = 400, 0
    for _ in range(sims):
        lists, column_of = _lists(4, 8)
        probs = _preferences_without_gender(rng, 12, 120)
        owner = np.repeat(np.arange(12), 10)
        found = label_permutation_null(
            probs, owner, ["text"] * 12, lists, column_of, 23, 99, int(rng.integers(1 << 30))
        )
        hits += found["text"].verdict != WITHIN
    assert 0.03 <= hits / sims <= 0.07, hits / sims


def test_random_word_probabilities_give_a_baseline_per_side():
    vocab = ["she", "her", "he", "his", "man", "care", "the", "nurse", "ward", "site", "we"]
    scorer = PrismScorer(
        StubMaskedLM(vocab), {"gsc": WordLists(("she", "her"), ("he", "his", "man"))}
    )
    texts = {
        "posting": ["we want a nurse who will care for the ward every day."],
        "application": ["she will care for every nurse on the ward each day.", ""],
    }
    table = scorer.baseline(texts, permutations=49)
    assert table["side"].tolist() == ["posting", "application"]
    assert table["texts"].tolist() == [1, 1]  # the empty application is no text
    assert (table["low"] <= table["high"]).all() and (table["permutations"] == 49).all()


def test_spearman_interval_is_fisher_z_with_bonett_wright():
    x = np.arange(10.0)
    y = np.array([0, 2, 1, 3, 5, 4, 6, 8, 7, 9.0])
    rho, low, high = spearman_interval(x, y)
    assert rho == pytest.approx(stats.spearmanr(x, y).statistic)
    half = 1.959964 * math.sqrt((1 + rho**2 / 2) / 7)
    assert (low, high) == pytest.approx(
        (math.tanh(math.atanh(rho) - half), math.tanh(math.atanh(rho) + half)), abs=1e-6
    )
    assert all(np.isnan(spearman_interval(x[:3], y[:3])))


def test_spearman_interval_covers_zero_at_its_level_under_independence():
    # The unit is the rated text: independent texts, ratings unrelated to the scores.
    rng = np.random.default_rng(7)
    sims, misses = 2000, 0
    for _ in range(sims):
        _, low, high = spearman_interval(rng.normal(size=30), rng.integers(1, 14, 30))
        misses += not low <= 0 <= high
    assert 0.03 <= misses / sims <= 0.07, misses / sims


def test_rating_correlations_drop_unscored_texts():
    scores = pd.DataFrame({"gsc": [1.0, 2.0, np.nan, 4.0, 5.0, 3.0]})
    ratings = pd.Series([2, 4, 1, 8, 9, 7.0])
    table = rating_correlations(scores, ratings, ["gsc"])
    assert table.loc[0, "n"] == 5
    assert table.loc[0, "spearman_rho"] == pytest.approx(
        stats.spearmanr([1, 2, 4, 5, 3], [2, 4, 8, 9, 7]).statistic
    )


def test_texts_without_a_scored_token_give_an_empty_baseline_that_reads():
    from biasim.simulator.kinds.prism import baseline_summary

    scorer = PrismScorer(StubMaskedLM(["she", "he"]), {"gsc": WordLists(("she",), ("he",))})
    table = scorer.baseline({"posting": ["Too short."], "application": [""]})
    assert table.empty and "verdict" in table.columns
    lists = pd.DataFrame(columns=["dimension", "side", "words"])
    summary = baseline_summary(table.assign(model_label="m"), lists)
    assert summary == {"baseline": [], "baseline_readings": [], "baseline_warnings": []}
