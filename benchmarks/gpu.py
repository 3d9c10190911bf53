"""The transformers scorers on a GPU (`device: cuda`) against the CPU: the same scores within
float tolerance, and the speed-up, for PRISM's masked LM, a sequence classifier, sentence-pair
NLI and sentence embeddings, all of BERT-mini size built from a config (nothing downloaded), and
`biasim analyze prism --masked-lm` run as a user runs it, once with the GPU hidden and once
with it visible (`device: auto`). CI is CPU-only; run this where a GPU is:

    python -m benchmarks.gpu            # prints a table and writes bench-results/gpu.json

Without a CUDA GPU it says so and exits 0 having measured nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.tiny_models import build_tiny_bert

from .bert_mini import BERT_MINI

#: Largest absolute difference allowed between CPU and GPU scores (float32 kernels differ).
TOLERANCE = 1e-4
_OPENERS = ("We are looking for a", "Our clinic needs a", "The team wants a", "Join us as a")
_ROLES = ("caring nurse", "driven engineer", "patient teacher", "bold sales lead")
_TRAITS = ("who thrives under pressure", "with a warm manner", "who leads decisively")
_PLACES = ("in the city", "at our growing firm", "on the night shift", "near the coast")
#: 192 distinct one-sentence texts: the scorers score each distinct sentence once, so repeats
#: would time nothing.
TEXTS = [f"{o} {r} {t} {p}." for o in _OPENERS for r in _ROLES for t in _TRAITS for p in _PLACES]


def _timed(build: Any, score: Any) -> tuple[np.ndarray, float]:
    model = build()
    score(model, TEXTS[:4])  # warm-up: kernels and memory are set up once
    start = time.perf_counter()
    values = score(model, TEXTS)
    return values, time.perf_counter() - start


def _compare(name: str, build: Any, score: Any) -> dict[str, Any]:
    cpu, cpu_s = _timed(lambda: build("cpu"), score)
    gpu, gpu_s = _timed(lambda: build("cuda"), score)
    diff = float(np.nanmax(np.abs(cpu - gpu)))
    return {
        "scorer": name,
        "texts": len(TEXTS),
        "cpu_s": cpu_s,
        "gpu_s": gpu_s,
        "speedup": cpu_s / gpu_s,
        "max_abs_diff": diff,
        "same_scores": diff <= TOLERANCE,
    }


def _cli_scores(folder: Path, model: str, env: dict[str, str]) -> tuple[np.ndarray, float, str]:
    """``analyze prism`` on the shipped PRISM postings in a fresh process: scores, seconds and
    the device it says it scored on."""
    import pandas as pd

    postings = Path(__file__).parents[1] / "scenarios/ding2024_prism/data/ding2024_postings.csv"
    command = [sys.executable, "-m", "biasim.simulator", "analyze", "prism", str(postings)]
    command += ["--text-col", "posting_text", "--masked-lm", model, "--out", str(folder)]
    start = time.perf_counter()
    done = subprocess.run(
        command, check=True, env={**os.environ, **env}, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    device = re.search(r"scored now\s+on\s+(\w+)", done.stdout)
    scores = pd.read_csv(folder / "prism_scores.csv")
    numbers = scores.select_dtypes("number").drop(columns="row").to_numpy()
    return numbers, seconds, device.group(1) if device else "not printed"


def _cli_row(tmp: Path, model: str) -> dict[str, Any]:
    """The user's path: the same CLI command with the GPU hidden, then visible (``auto``)."""
    cpu, cpu_s, cpu_on = _cli_scores(tmp / "cli_cpu", model, {"CUDA_VISIBLE_DEVICES": ""})
    gpu, gpu_s, gpu_on = _cli_scores(tmp / "cli_gpu", model, {})
    diff = float(np.nanmax(np.abs(cpu - gpu)))
    return {
        "scorer": f"analyze prism (CLI, {cpu_on} vs {gpu_on})",
        "texts": len(cpu),
        "cpu_s": cpu_s,
        "gpu_s": gpu_s,
        "speedup": cpu_s / gpu_s,
        "max_abs_diff": diff,
        "same_scores": diff <= TOLERANCE,
    }


def run() -> dict[str, Any]:
    """Both scorers on both devices, or ``{"skipped": reason}`` without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU visible to torch"}
    from biasim.analysis.studies.prism.score import WordLists
    from biasim.analysis.studies.prism.scorer import PrismScorer
    from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM
    from biasim.analysis.text.nli_scorer import NliScorer, pair_text
    from biasim.analysis.text.text_classifier import HuggingFaceClassifier
    from biasim.analysis.text.weat import SentenceEmbedder

    pairs = [pair_text(a, b) for a, b in zip(TEXTS, TEXTS[1:] + TEXTS[:1], strict=True)]
    lists = {"gsc": WordLists(("she", "her", "woman"), ("he", "his", "man"))}
    with tempfile.TemporaryDirectory() as tmp:
        mlm = build_tiny_bert(Path(tmp) / "mlm", mlm=True, **BERT_MINI)
        clf = build_tiny_bert(Path(tmp) / "clf", **BERT_MINI)
        nli = build_tiny_bert(
            Path(tmp) / "nli", ("entailment", "neutral", "contradiction"), **BERT_MINI
        )
        rows = [
            _compare(
                "prism (masked LM)",
                lambda d: PrismScorer(HuggingFaceMaskedLM(mlm, device=d), lists),
                lambda s, texts: s.score(texts).values,
            ),
            _compare(
                "classifier",
                lambda d: HuggingFaceClassifier(clf, device=d),
                lambda c, texts: c.probabilities(texts),
            ),
            _compare(
                "NLI (pairs)",
                lambda d: NliScorer(nli, device=d),
                lambda n, texts: n.score(pairs[: len(texts)]).values,
            ),
            _compare(
                "embeddings",
                lambda d: SentenceEmbedder(clf, device=d),
                lambda e, texts: e.embed(texts),
            ),
            _cli_row(Path(tmp), mlm),
        ]
    return {"device": torch.cuda.get_device_name(0), "tolerance": TOLERANCE, "rows": rows}


def main() -> int:
    result = run()
    out = Path("bench-results/gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if "skipped" in result:
        print(f"GPU benchmark skipped: {result['skipped']}")
        return 0
    print(f"{result['device']}; tolerance {TOLERANCE:g}")
    for r in result["rows"]:
        print(
            f"{r['scorer']:<20} {r['texts']} texts: CPU {r['cpu_s']:.2f} s, GPU {r['gpu_s']:.2f} s "
            f"({r['speedup']:.1f}x); largest difference {r['max_abs_diff']:.2g} "
            f"({'same' if r['same_scores'] else 'DIFFERENT'})"
        )
    return 0 if all(r["same_scores"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
