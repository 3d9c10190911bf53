"""(a) Engine overhead: agent actions per second on the synthetic responder, store on.

Beside the figure the benchmark measures the machine's single-core Python speed with a fixed
reference workload, right before and after each engine run, and the share of a core the run got
(process CPU time over wall time): on a shared or different machine the actions/s figure moves
with both, and actions per million reference operations is what compares across runs.
"""

from __future__ import annotations

import hashlib
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from biasim.simulator.engine.runner import RunOptions, execute, prepare

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


#: Iterations of the reference workload (about 0.1 s on a 2020s server core).
REFERENCE_OPS = 50_000


def reference_speed() -> float:
    """Single-core Python speed: reference operations per second, best of three.

    One operation is what an engine action is made of in miniature: build a small dict,
    serialise it with orjson, hash it with SHA-256, format a string and look it up in a dict.
    """
    best = 0.0
    seen: dict[str, int] = {}
    for _ in range(3):
        start = time.perf_counter()
        for i in range(REFERENCE_OPS):
            record = {"unit": i, "stage": "decide", "seed": i * 7919}
            digest = hashlib.sha256(orjson.dumps(record, option=orjson.OPT_SORT_KEYS)).hexdigest()
            seen[f"{digest[:2]}:{i & 255}"] = i
        best = max(best, REFERENCE_OPS / (time.perf_counter() - start))
    return best


def run(agents_per_value: int = 10_000, repeats: int = 3) -> dict[str, Any]:
    """Best of ``repeats`` runs of ``3 x agents_per_value`` units, each between two reference
    measurements."""
    best: dict[str, Any] = {}
    for _ in range(repeats):
        before = reference_speed()
        with tempfile.TemporaryDirectory() as tmp:
            study = Path(tmp) / "study.yaml"
            study.write_text(STUDY.replace("AGENTS", str(agents_per_value)))
            start, cpu = time.perf_counter(), time.process_time()
            prepared = prepare(RunOptions(study=str(study), out=Path(tmp) / "run"))
            outcome = execute(prepared)
            total, cpu = time.perf_counter() - start, time.process_time() - cpu
        reference = (before + reference_speed()) / 2
        units = len(outcome.results)
        stage = outcome.summary["timings"]["stages_s"]["decide"]
        result = {
            "units": units,
            "stage_actions_per_s": units / stage,
            "run_actions_per_s": units / total,
            "stage_s": stage,
            "run_s": total,
            "reference_ops_per_s": reference,
            "stage_actions_per_million_reference_ops": units / stage / reference * 1e6,
            # Below 1 the run waited for a core other processes held.
            "core_share": min(1.0, cpu / total),
        }
        if not best or result["stage_actions_per_s"] > best["stage_actions_per_s"]:
            best = result
    best["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    best["target_actions_per_s"] = TARGET
    best["meets_target"] = best["stage_actions_per_s"] >= TARGET
    return best
