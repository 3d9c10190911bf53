"""PRISM's arithmetic on a masked LM with hand-set probabilities, against the plain equations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import ranksums

from biasim.analysis.studies.prism.score import (
    WordLists,
    is_scored,
    load_word_lists,
    rank_plan,
    rank_sum_z,
    split_sentences,
    token_scores,
)
from biasim.analysis.studies.prism.scorer import NO_SENTENCE, NO_TOKEN, PrismScorer
from biasim.analysis.text.scorers import (
    ScoreCache,
    cached_scores,
    create_scorer,
    scorer_key,
    scorer_names,
)
from tests.paths import SHARED
from tests.prism_stub import StubMaskedLM, plain_rank_sum_z, plain_token_score

REFERENCE = (
    SHARED / "reference" / "ChatGPT_bias" / "extracted" / "prism_valid_words_bert-base-uncased.json"
)

LISTS = {
    # A duplicate on one list and a word on both, as the authors' psy and wfc lists have.
    "psy": WordLists(("caring", "warm", "caring", "kind"), ("driven", "bold", "firm")),
    "wfc": WordLists(("parental", "time"), ("overtime", "time", "travel")),
}
VOCAB = sorted(
    {w for wl in LISTS.values() for w in wl.pooled}
    | {"she", "he", "leads", "team", "with", "care", "and", "skill", "every", "day", "."}
)


def _score(plan_lists: WordLists, probs: dict[str, float], alpha: float) -> float:
    words = list(dict.fromkeys(plan_lists.pooled))
    plan = rank_plan(plan_lists, {w: j for j, w in enumerate(words)}, alpha)
    row = np.array([[probs[w] for w in words]])
    return float(token_scores(row, plan)[0])


def test_sentence_rules():
    text = (
        "We are hiring a Senior Engineer at Acme Inc. today! "
        "Dr. Smith leads the team in the U.S. office every day. "
        "Too short here. "
        "Visit acme.com for more about the **benefits** we offer you.\n"
        '"Our people come first," said the chief executive of the company. '
        "This last sentence has no closing mark at all"
    )
    assert split_sentences(text) == [
        "we are hiring a senior engineer at acme inc. today",
        "dr. smith leads the team in the u.s. office every day",
        "visit acme.com for more about the benefits we offer you",
        'our people come first," said the chief executive of the company',
    ]


def test_sentences_need_more_than_five_words():
    assert split_sentences("One two three four five.") == []
    assert split_sentences("One two three four five six.") == ["one two three four five six"]


def test_scored_tokens_skip_punctuation_stop_words_and_numbers():
    assert [
        t for t in ["the", ",", "of", "2024", "3.5", "nan", "team", "##ing"] if is_scored(t)
    ] == [
        "team",
        "##ing",
    ]


@pytest.mark.parametrize("alpha", [10.0, 23.0, 50.0, 100.0])
def test_token_scores_match_the_plain_equations(alpha):
    rng = np.random.default_rng(3)
    for lists in LISTS.values():
        words = list(dict.fromkeys(lists.pooled))
        plan = rank_plan(lists, {w: j for j, w in enumerate(words)}, alpha)
        probs = rng.dirichlet(np.ones(len(words)), size=300).astype(np.float32)
        ours = token_scores(probs, plan)
        plain = [
            plain_token_score(lists.fem, lists.mas, dict(zip(words, p, strict=True)), alpha)
            for p in probs
        ]
        np.testing.assert_allclose(ours, plain, rtol=0, atol=1e-12)


def test_hand_set_ranks_and_both_fallbacks():
    lists = WordLists(("a", "b"), ("c", "d", "e"))
    low = 1e-6
    # Only masculine words survive the filter (keep = ceil(5 * 0.4) = 2): 2 x mean rank(M).
    assert _score(lists, {"a": low, "b": low, "c": 0.5, "d": 0.4, "e": low}, 40) == 2 * 1.5
    # Only feminine words survive: -2 x mean rank(F).
    assert _score(lists, {"a": 0.5, "b": 0.4, "c": low, "d": low, "e": low}, 40) == -2 * 1.5
    # Both: keep = ceil(5 * 0.6) = 3 -> a:1, c:2, d:3 -> 1 - 2.5.
    assert _score(lists, {"a": 0.5, "b": low, "c": 0.4, "d": 0.3, "e": low}, 60) == -1.5


def test_duplicates_and_shared_words_follow_the_authors_rank_dict():
    # "x" listed twice: both entries take the larger rank (2); y ranks 3.
    assert _score(WordLists(("x", "x"), ("y",)), {"x": 0.5, "y": 0.4}, 100) == 2 - 3
    # "t" on both lists: kept entries t, t, a, b -> t:2, a:3, b:4; F = (2+2+3)/3, M = (2+2+4)/3.
    got = _score(WordLists(("t", "a"), ("t", "b")), {"t": 0.5, "a": 0.4, "b": 0.3}, 100)
    assert got == pytest.approx(7 / 3 - 8 / 3, abs=1e-12)


def test_rank_sum_z_matches_scipy_and_the_plain_statistic():
    lists = WordLists(tuple(f"f{i}" for i in range(12)), tuple(f"m{i}" for i in range(9)))
    words = list(lists.pooled)
    plan = rank_plan(lists, {w: j for j, w in enumerate(words)}, 100)
    probs = np.random.default_rng(5).dirichlet(np.ones(len(words)), size=50)
    z = rank_sum_z(probs, plan)
    for row, value in zip(probs, z, strict=True):
        fem, mas = row[:12], row[12:]
        assert value == pytest.approx(plain_rank_sum_z(fem, mas), abs=1e-12)
        # scipy ranks ascending (1 = least probable): the same statistic with its sign flipped.
        assert value == pytest.approx(-ranksums(mas, fem).statistic, abs=1e-12)


def test_theorem_1_null_variance_of_token_scores():
    # |F| = |M| = K, alpha = 100, exchangeable probabilities: S ~ (0, (2K + 1) / 3).
    k = 10
    lists = WordLists(tuple(f"f{i}" for i in range(k)), tuple(f"m{i}" for i in range(k)))
    plan = rank_plan(lists, {w: j for j, w in enumerate(lists.pooled)}, 100)
    scores = token_scores(np.random.default_rng(11).random((40_000, 2 * k)), plan)
    assert abs(scores.mean()) < 0.03
    assert scores.var() == pytest.approx((2 * k + 1) / 3, rel=0.03)


def _plain_document(lm: StubMaskedLM, text: str, alpha: float) -> dict[str, float]:
    scores: dict[str, list[float]] = {d: [] for d in LISTS}
    for sentence in split_sentences(text):
        tokens = lm.tokenize(sentence)
        for i, token in enumerate(tokens):
            if not is_scored(token):
                continue
            row = lm.row(lm.masked_text(tokens, i))
            prob = {w: float(np.float32(row[lm.vocab.index(w)])) for w in lm.vocab}
            for d, wl in LISTS.items():
                scores[d].append(plain_token_score(wl.fem, wl.mas, prob, alpha))
    return {d: float(np.mean(v)) for d, v in scores.items()}


def test_documents_match_the_plain_pipeline_and_exclusions_are_named():
    lm = StubMaskedLM(VOCAB)
    texts = [
        "She leads the team with care and skill every day. He leads the team every day.",
        "He leads the team with skill and care every day!",
        "Short one.",
        "",
        "the of the in the on the.",
        "She leads the team with care and skill every day. He leads the team every day.",
    ]
    table = PrismScorer(lm, LISTS, alpha=23).score(texts)
    assert table.columns == ("psy", "wfc", "psy_z", "wfc_z", "tokens")
    assert table.excluded == [None, None, NO_SENTENCE, NO_SENTENCE, NO_TOKEN, None]
    for t in (0, 1):
        plain = _plain_document(lm, texts[t], 23)
        assert table.values[t, 0] == pytest.approx(plain["psy"], abs=1e-9)
        assert table.values[t, 1] == pytest.approx(plain["wfc"], abs=1e-9)
    assert table.values[0, -1] == 8 + 5  # scored tokens of both sentences
    assert np.isnan(table.values[2:5]).all()
    np.testing.assert_array_equal(table.values[0], table.values[5])
    # One pass over the distinct sentences: the repeated text adds no masked copy.
    assert lm.calls == [8 + 5 + 8]


def test_cache_never_rescores_and_keys_on_alpha(tmp_path):
    lm = StubMaskedLM(VOCAB)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    texts = ["She leads the team with care and skill every day.", "Short."]
    first, fresh = cached_scores(PrismScorer(lm, LISTS), texts, cache)
    assert fresh == 2
    again, fresh = cached_scores(PrismScorer(lm, LISTS), [*texts, texts[0]], cache)
    assert fresh == 0
    assert len(lm.calls) == 1
    np.testing.assert_array_equal(again.values[:2], first.values)
    assert again.excluded == [None, NO_SENTENCE, None]
    other = PrismScorer(lm, LISTS, alpha=50)
    assert scorer_key(other) != scorer_key(PrismScorer(lm, LISTS))
    _, fresh = cached_scores(other, texts, cache)
    assert fresh == 2


def test_registry_builds_prism_by_name():
    assert "prism" in scorer_names()
    scorer = create_scorer("prism", lm=StubMaskedLM(VOCAB), word_lists=LISTS)
    assert scorer.name == "prism"
    with pytest.raises(KeyError, match="unknown text scorer"):
        create_scorer("nope")


def test_reference_word_lists_have_the_papers_sizes():
    if not REFERENCE.exists():
        pytest.skip("shared reference data absent")
    lists = load_word_lists(json.loads(REFERENCE.read_text()))
    sizes = {d: (len(wl.fem), len(wl.mas)) for d, wl in lists.items()}
    # Table 6 of the paper.
    assert sizes == {"psy": (73, 120), "role": (7, 53), "wfc": (28, 25), "gsc": (6, 6)}
    assert math.ceil(sum(sizes["psy"]) * 0.23) == 45
