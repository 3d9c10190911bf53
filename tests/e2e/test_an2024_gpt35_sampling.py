"""Seed 001's GPT-3.5 study sends appendix C.1's sampling settings: every request the server sees
carries frequency_penalty 0.9 and presence_penalty 1.9 (with temperature 0.6, top_p 1 and 256
tokens), not only the study file."""

from __future__ import annotations

import json
from pathlib import Path

from biasim.scenarios import builtin_path
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.loopback_llm_server import LoopbackLLMServer

# The built-in study, cut to one template, one qualification level and one name per group
# (6 names x the 7 roles = 42 emails), played by a loopback OpenAI server.
STUDY = """\
extends: {base}
name: an2024_gpt35_loopback
roles:
  hiring_manager:
    backend: openai
    model: gpt-3.5-turbo
    options: {options}
design:
  agents_per_value: 1
  factors:
    template: {{t2: null}}
    qualification: {{highly: null, somewhat: null, not_qualified: null}}
"""


def test_every_gpt35_request_carries_the_papers_penalties(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        study = tmp_path / "gpt35.yaml"
        options = json.dumps({"base_url": server.openai_base_url})
        base = builtin_path("an2024_hiring_gpt35")
        study.write_text(STUDY.format(base=base, options=options), encoding="utf-8")
        execute(prepare(RunOptions(study=str(study), out=tmp_path / "run")))
        bodies = [r.body for r in server.requests if r.protocol == "openai"]
    assert len(bodies) == 42
    sampling = {
        (b["frequency_penalty"], b["presence_penalty"], b["temperature"], b["top_p"])
        for b in bodies
    }
    assert sampling == {(0.9, 1.9, 0.6, 1.0)}
    assert {b.get("max_tokens", b.get("max_completion_tokens")) for b in bodies} == {256}
