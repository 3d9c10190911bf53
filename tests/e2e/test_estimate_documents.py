"""``estimate`` counts a reading stage's prompt as the run sends it: with the documents it shows,
not validation's stand-ins for them (differential against the prompts a run recorded)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.structured import canonical_json
from biasim.simulator.llm.tokens import approximate, chat_tokens
from biasim.simulator.study.load import load_study
from biasim.simulator.tools.estimate import estimate
from tests import pipeline_studies
from tests.market_studies import market

#: Each letter is 400 characters: 100 tokens at 4 characters a token (the synthetic backend's
#: count), the writer's max_tokens, so the estimate's document is the run's.
LETTER = "x" * 400


def recorded_prompt_tokens(store: Path, stage: str) -> list[int]:
    """Each recorded call of ``stage``: its messages and answer schema, counted as estimate
    counts a prompt for the synthetic backend."""
    counter = approximate()
    tokens = []
    with sqlite3.connect(store) as conn:
        for (request,) in conn.execute("SELECT request FROM calls WHERE stage = ?", (stage,)):
            sent = json.loads(request)
            count = chat_tokens(counter, [m["content"] for m in sent["messages"]])
            if sent.get("schema"):
                count += counter.count(canonical_json(sent["schema"]))
            tokens.append(count)
    return tokens


@pytest.mark.parametrize("size", [2, 4])
def test_a_reading_stages_prompt_tokens_are_those_of_the_prompts_the_run_sent(
    tmp_path: Path, size: int
) -> None:
    data = market(cycles=1, market={"applicants": {"population": "applicants", "per_cycle": 4}})
    data["roles"]["applicant"]["max_tokens"] = 100
    data["roles"]["applicant"]["synthetic"] = {"text": {"text": LETTER}}
    data["stages"][1]["reads"]["size"] = size
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    figures = estimate(load_study(path))
    line = next(line for line in figures.lines if line.stage == "offer")
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(path), out=out)))
    sent = recorded_prompt_tokens(out / "calls.sqlite", "offer")
    assert len(sent) == 4 // size
    # One cycle's readings: the estimate within 10% of what was sent (documents are most of it).
    assert sum(sent) > size * 100
    assert line.prompt_tokens * len(sent) == pytest.approx(sum(sent), rel=0.10)
    assert any("documents a reading shows" in note for note in figures.notes)
