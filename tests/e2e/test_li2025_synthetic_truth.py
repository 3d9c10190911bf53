"""`li2025_decisions` declares that women evacuate at 0.65 on the synthetic test double; a full
run at the study's seed (2025) gives 170/300 (0.52 / 0.56 / 0.62 across the three persona
conditions). This test pins down why: the double draws every answer from the declared table
(nothing dilutes it: no persona condition, `by` key or refusal), and 170/300 is that one seed's
draw, a low tail (P(K <= 170) = 0.002 under 0.65), not a bias of the double. Over other study
seeds the same 300 units average 0.65 with the binomial spread.

The full run takes minutes, so the 300 calls are rebuilt here exactly as the engine makes them:
the prompts from a 1-agent run (identical for every agent, the synthetic persona writer writing
the same name and persona for all), the unit ids from the 100-agent design, the seeds from
`call_seed`, and the answers from the backend itself.
"""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.api import load_study
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.llm.types import LLMRequest
from biasim.simulator.study.design import call_seed, iter_design, unit_id

LI2025 = builtin_path("li2025_decisions")
CONDITIONS = ("no_persona", "non_contextualized", "contextualized")


def _women_flood_requests(tmp_path) -> dict[str, dict]:
    """One stored `decide` request per persona condition for a woman in the flood scenario."""
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(LI2025), out=out, backend="synthetic", agents=1)))
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute("select unit_id, request from calls where stage = 'decide'").fetchall()
    found: dict[str, dict] = {}
    for unit, request in rows:
        body = json.loads(request)
        if dict(body["attributes"]) == {"gender": "Female", "scenario": "emergency_response"}:
            condition = unit.split("persona_condition=")[1].split("/")[0]
            found.setdefault(condition, {"units": [], "body": body})["units"].append(unit)
    return found


def _evacuations(backend, requests, units, base_seed: int) -> int:
    count = 0
    for condition, spec_units in units.items():
        body = requests[condition]["body"]
        for unit in spec_units:
            request = LLMRequest(
                messages=tuple(body["messages"]),
                temperature=body["temperature"],
                top_p=body["top_p"],
                max_tokens=body["max_tokens"],
                seed=call_seed(base_seed, unit),
                json_schema=body["schema"],
                attributes=tuple(tuple(a) for a in body["attributes"]),
            )
            count += json.loads(backend.answer(request).text)["decision"] == "Evacuate"
    return count


@pytest.mark.slow
def test_women_evacuate_at_the_declared_rate_over_seeds(tmp_path) -> None:
    requests = _women_flood_requests(tmp_path)
    assert set(requests) == set(CONDITIONS)
    # The prompt does not vary between agents of one condition (the synthetic persona writer
    # writes the same text for all), so one stored prompt stands for all 100.
    study = load_study(LI2025, backend="synthetic")
    config = study.config
    units = {c: [] for c in CONDITIONS}
    for spec in iter_design(config):
        levels = dict(spec.levels)
        if (
            levels.get("scenario") == "emergency_response"
            and levels.get("persona_condition") in units
            and dict(spec.persona.attributes).get("gender") == "Female"
        ):
            units[levels["persona_condition"]].append(unit_id(spec.agent_id, "decide"))
    assert [len(u) for u in units.values()] == [100, 100, 100]
    backend = SyntheticBackend(config.roles["agent"])

    # The study's own seed: the 170/300 a full run gives (the reconstruction is exact).
    assert _evacuations(backend, requests, units, config.seed) == 170
    # Other seeds: the declared 0.65, with the binomial spread (sd 8.3 of 300).
    counts = [_evacuations(backend, requests, units, seed) for seed in range(60)]
    assert abs(statistics.fmean(counts) / 300 - 0.65) < 0.01
    assert 6.0 < statistics.stdev(counts) < 11.0
