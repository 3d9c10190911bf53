"""(f) PRISM scoring: shared, length-sorted batches with the head at the masks, against one
forward pass per masked token (the authors' loop at batch size 1).

The model is a BERT-mini-sized network (4 layers, hidden 256) built from a config with the real
uncased vocabulary, so nothing is downloaded; its weights are random, which changes the scores
but not the work. Both paths must give the same scores. The word lists are the paper's when the
shared reference data is present, else a small stand-in.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from biasim.analysis.studies.prism.score import WordLists, split_sentences
from biasim.analysis.studies.prism.scorer import PrismScorer
from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM
from biasim.analysis.text.scorers import ScoreCache, cached_scores
from tests.tiny_models import build_tiny_bert

from .bert_mini import BERT_MINI

TARGET_SPEEDUP = 10.0
REFERENCE = (
    Path(__file__).resolve().parents[2]
    / "shared/reference/ChatGPT_bias/extracted/prism_valid_words_bert-base-uncased.json"
)
STAND_IN = {
    "psy": WordLists(("caring", "warm", "kind", "patient"), ("driven", "bold", "strong", "firm")),
    "gsc": WordLists(("she", "her", "woman"), ("he", "his", "man")),
}
SENTENCES = [
    "We are looking for a caring and driven nurse to join our growing team in the city.",
    "The successful candidate will thrive under pressure and deliver strong results every week.",
    "Our benefits include parental leave, flexible hours and a generous holiday allowance.",
    "You will negotiate contracts with suppliers and lead a team of twelve technicians.",
    "She or he must be comfortable lifting heavy boxes and working weekends when needed.",
    "We value collaboration, attention to detail and a friendly attitude toward customers.",
    "Applicants should be competitive, confident and eager to exceed ambitious sales targets.",
    "The role offers remote work, paid overtime and support for continuing education.",
]


def _one_pass_per_token(scorer: PrismScorer, lm: HuggingFaceMaskedLM, texts: list[str]) -> Any:
    """The authors' structure: every masked copy through the model alone, full logits."""
    import torch

    tok, model = lm.tokenizer, lm.model
    out = []
    for text in texts:
        copies, _ = scorer.masked_copies(split_sentences(text))
        rows = []
        for copy in copies:
            inputs = tok(copy, return_tensors="pt", truncation=True, max_length=512)
            with torch.inference_mode():
                logits = model(**inputs).logits[0]
            at = int((inputs["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
            rows.append(torch.softmax(logits[at], dim=-1)[scorer._ids].numpy())
        scores = scorer.score_probabilities(np.array(rows))
        out.append([scores[d][0].mean() for d in scorer.word_lists])
    return np.array(out)


def run(n_texts: int = 12) -> dict[str, Any]:
    """Time both paths on ``n_texts`` postings of 4 sentences; check they agree."""
    import torch

    torch.set_num_threads(1)
    lists: Any = REFERENCE if REFERENCE.exists() else STAND_IN
    texts = [
        " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(4)) + f" Ref {i}."
        for i in range(n_texts)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        lm = HuggingFaceMaskedLM(
            build_tiny_bert(Path(tmp) / "bert", mlm=True, **BERT_MINI), batch_size=64
        )
        scorer = PrismScorer(lm, lists)
        # Distinct sentences only once in the fast path: make every text's sentences distinct
        # so the comparison measures batching, not deduplication.
        texts = [t.replace(".", f" number {i}.", 1) for i, t in enumerate(texts)]
        n_copies = sum(len(scorer.masked_copies(split_sentences(t))[0]) for t in texts)
        start = time.perf_counter()
        slow = _one_pass_per_token(scorer, lm, texts)
        slow_s = time.perf_counter() - start
        cache = ScoreCache(Path(tmp) / "scores.sqlite")
        start = time.perf_counter()
        fast, _ = cached_scores(scorer, texts, cache)
        fast_s = time.perf_counter() - start
        start = time.perf_counter()
        _, rescored = cached_scores(scorer, texts, cache)
        cached_s = time.perf_counter() - start
    dims = len(scorer.word_lists)
    max_diff = float(np.nanmax(np.abs(fast.values[:, :dims] - slow)))
    return {
        "texts": n_texts,
        "masked_copies": n_copies,
        "word_lists": "paper" if lists is REFERENCE else "stand-in",
        "one_pass_per_token_s": slow_s,
        "batched_s": fast_s,
        "speedup": slow_s / fast_s,
        "target_speedup": TARGET_SPEEDUP,
        "max_score_difference": max_diff,
        "rerun_from_cache_s": cached_s,
        "rerun_rescored_texts": rescored,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
