"""(g) Letter-style scorers: sentences per second of each shipped scorer, and of a transformers
classifier batched against one sentence at a time (same outputs); a rerun served by the score
cache scores nothing.

The classifier is BERT-mini sized (4 layers, hidden 256) with the real uncased vocabulary, built
from a config (random weights: the work is the same, nothing is downloaded). Sentences are the
released CLG letters' when the shared reference data is present, else stand-ins.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.text.letter_text import style_sentences
from biasim.analysis.text.scorers import ScoreCache, cached_scores, create_scorer
from biasim.analysis.text.style_scorers import ClassifierScorer
from tests.tiny_models import build_tiny_bert

from .bert_mini import BERT_MINI

TARGET_SPEEDUP = 2.0
CLG = (
    Path(__file__).resolve().parents[2]
    / "shared/reference/biases-llm-reference-letters/generated_letters/chatgpt/clg/clg_letters.csv"
)
STAND_IN = [
    "Joseph is a confident leader who consistently exceeds expectations.",
    "Kelly is a warm and caring colleague who supports everyone around her.",
    "I recommend this candidate without reservation for any position in the field.",
    "Her work on the project showed remarkable skill, patience and creativity.",
]


def _sentences(n: int) -> list[str]:
    if CLG.exists():
        letters = pd.read_csv(CLG)["chatgpt_gen"].tolist()
        found = list(dict.fromkeys(s for t in letters for s in style_sentences(t)))
    else:
        found = [f"{s[:-1]} number {i}." for i in range(n) for s in STAND_IN]
    return found[:n]


def _rate(scorer: Any, sentences: list[str]) -> tuple[float, Any]:
    start = time.perf_counter()
    table = scorer.score(sentences)
    return len(sentences) / (time.perf_counter() - start), table


def run(n_sentences: int = 400) -> dict[str, Any]:
    """Throughput of every scorer on ``n_sentences`` distinct sentences."""
    import torch

    torch.set_num_threads(1)
    sentences = _sentences(n_sentences)
    out: dict[str, Any] = {"sentences": len(sentences), "per_second": {}}
    for name in ("vader", "hd_formality", "agency_lexicon"):
        out["per_second"][name], _ = _rate(create_scorer(name), sentences)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_bert(Path(tmp) / "clf", ["NEGATIVE", "POSITIVE"], **BERT_MINI)
        batched_rate, batched = _rate(ClassifierScorer(model, "POSITIVE", batch_size=32), sentences)
        single_rate, single = _rate(ClassifierScorer(model, "POSITIVE", batch_size=1), sentences)
        cache = ScoreCache(Path(tmp) / "scores.sqlite")
        scorer = ClassifierScorer(model, "POSITIVE", batch_size=32)
        cached_scores(scorer, sentences, cache)
        start = time.perf_counter()
        _, rescored = cached_scores(scorer, sentences, cache)
        cached_s = time.perf_counter() - start
    out["per_second"]["classifier_batched"] = batched_rate
    out["per_second"]["classifier_one_at_a_time"] = single_rate
    out.update(
        speedup=batched_rate / single_rate,
        target_speedup=TARGET_SPEEDUP,
        max_difference=float(np.max(np.abs(batched.values - single.values))),
        rerun_from_cache_s=cached_s,
        rerun_rescored=rescored,
    )
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
