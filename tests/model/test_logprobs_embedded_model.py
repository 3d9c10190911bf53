"""``answer: logprobs`` on the embedded model (SmolLM2 through llama.cpp in process): a
probability per call and the expected-decision tables from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.e2e.test_logprob_decisions import _write


@pytest.mark.model
@pytest.mark.slow
def test_the_embedded_model_writes_a_probability_per_call_and_the_tables(tmp_path: Path) -> None:
    path = _write(tmp_path, backend="local", model="smollm2", agents=1)
    text = (
        path.read_text()
        .replace("    model: smollm2\n", "")
        .replace("    options: {}\n", "    options: {n_ctx: 512}\n")
    )
    path.write_text(text)
    out = tmp_path / "run"
    outcome = execute(prepare(RunOptions(study=str(path), out=out)))
    answered = outcome.results[outcome.results["status"] == "answered"]
    assert len(answered) >= 2
    for raw in answered["probabilities"]:
        probs = json.loads(raw)
        assert set(probs) == {"Evacuate", "Stay"} and sum(probs.values()) == pytest.approx(1.0)
    assert (out / "tables" / "analysis1_expected.csv").is_file()
