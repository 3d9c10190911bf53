"""The transformers scorers on a GPU (`device: cuda`) against the CPU: the same scores within
float tolerance, and the speed-up, for PRISM's masked LM and a sequence classifier of BERT-mini
size built from a config (nothing downloaded). CI is CPU-only; run this where a GPU is:

    python -m benchmarks.gpu            # prints a table and writes bench-results/gpu.json

Without a CUDA GPU it says so and exits 0 having measured nothing.
"""

from __future__ import annotations

import json
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
TEXTS = [
    "We are looking for a caring and driven nurse to join our growing team in the city.",
    "The successful candidate will thrive under pressure and deliver strong results every week.",
    "Our benefits include parental leave, flexible hours and a generous holiday allowance.",
    "She is a warm, patient teacher whose pupils trust her, and he is a bold, decisive leader.",
] * 64


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


def run() -> dict[str, Any]:
    """Both scorers on both devices, or ``{"skipped": reason}`` without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA GPU visible to torch"}
    from biasim.analysis.studies.prism.score import WordLists
    from biasim.analysis.studies.prism.scorer import PrismScorer
    from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM
    from biasim.analysis.text.text_classifier import HuggingFaceClassifier

    lists = {"gsc": WordLists(("she", "her", "woman"), ("he", "his", "man"))}
    with tempfile.TemporaryDirectory() as tmp:
        mlm = build_tiny_bert(Path(tmp) / "mlm", mlm=True, **BERT_MINI)
        clf = build_tiny_bert(Path(tmp) / "clf", **BERT_MINI)
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
