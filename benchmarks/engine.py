"""(a) Engine overhead: agent actions per second on the synthetic responder, store on."""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from biasim.simulator.runner import RunOptions, execute, prepare

STUDY = """\
name: bench_engine
description: engine overhead benchmark
seed: 1
vars:
  scenario: "A flood is coming. Evacuate or stay?"
roles:
  decider:
    backend: synthetic
    max_concurrency: 64
    synthetic:
      decision:
        by: gender
        probabilities:
          male: {Evacuate: 0.4, Stay: 0.6}
          female: {Evacuate: 0.7, Stay: 0.3}
personas:
  axes:
    gender: [male, female, non-binary]
  description: "a person whose gender identity is {{ gender }}"
stages:
  - name: decide
    role: decider
    prompt: |-
      You are {{ persona.description }}.
      {{ scenario }}
    output:
      decision: {type: choice, choices: [Evacuate, Stay]}
      rationale: {type: string, max_length: 200}
design:
  agents_per_value: AGENTS
analyses:
  - {stage: decide, field: decision, target: Evacuate, by: gender}
"""
TARGET = 20_000.0


def run(agents_per_value: int = 10_000, repeats: int = 3) -> dict[str, Any]:
    """Best of ``repeats`` runs of ``3 x agents_per_value`` units."""
    best: dict[str, Any] = {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            study = Path(tmp) / "study.yaml"
            study.write_text(STUDY.replace("AGENTS", str(agents_per_value)))
            start = time.perf_counter()
            prepared = prepare(RunOptions(study=str(study), out=Path(tmp) / "run"))
            outcome = execute(prepared)
            total = time.perf_counter() - start
        units = len(outcome.results)
        stage = outcome.summary["timings"]["stages_s"]["decide"]
        result = {
            "units": units,
            "stage_actions_per_s": units / stage,
            "run_actions_per_s": units / total,
            "stage_s": stage,
            "run_s": total,
        }
        if not best or result["stage_actions_per_s"] > best["stage_actions_per_s"]:
            best = result
    best["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    best["target_actions_per_s"] = TARGET
    best["meets_target"] = best["stage_actions_per_s"] >= TARGET
    return best
