"""(e) A 100,000-applicant hiring pipeline on the synthetic responder: applicants write, a
screener shortlists 3 of 8, a manager picks 1 of the 3; actions per second end to end and
peak memory, measured in a fresh process so the peak is this run's alone."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

STUDY = """\
name: bench_pipeline
description: pipeline benchmark
seed: 1
roles:
  applicant: {backend: synthetic, max_concurrency: 256}
  screener:
    backend: synthetic
    max_concurrency: 256
    synthetic: {selected: {by: race, weights: {White: 1.5}}}
  manager:
    backend: synthetic
    max_concurrency: 256
    synthetic: {selected: {by: gender, weights: {male: 1.5}}}
personas:
  axes: {race: [White, Black, Hispanic], gender: [female, male]}
populations:
  applicants: {agent: applicant, personas: study}
  screeners: {agent: screener, count: 50}
  managers: {agent: hiring_manager, count: 10}
stages:
  - name: apply
    population: applicants
    role: applicant
    prompt: "Write a cover letter as a {{ race }} {{ gender }} applicant."
  - name: screen
    population: screeners
    role: screener
    reads: {stage: apply, matching: pool, size: 8, draw: stratified}
    select: 3
    prompt: "Pick {{ select }}:{% for d in documents %} {{ d.label }}: {{ d.text }}{% endfor %}"
  - name: offer
    population: managers
    role: manager
    reads: {stage: apply, after: screen, matching: pool, draw: carry}
    select: 1
    prompt: "Pick one:{% for d in documents %} {{ d.label }}: {{ d.text }}{% endfor %}"
design:
  agents_per_value: AGENTS
analyses:
  - {kind: pipeline, stages: [screen, offer], groups: [race, gender], n_permutations: 1000}
"""
TARGET_ACTIONS = 15_000.0
TARGET_PEAK_MB = 2048.0

_CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
from biasim.simulator.engine.runner import RunOptions, execute, prepare
with tempfile.TemporaryDirectory() as tmp:
    study = Path(tmp) / "study.yaml"
    study.write_text(sys.stdin.read())
    start = time.perf_counter()
    outcome = execute(prepare(RunOptions(study=str(study), out=Path(tmp) / "run")))
    total = time.perf_counter() - start
    stages = outcome.summary["timings"]["stages_s"]
    agents = outcome.summary["timings"]["waves_s"]
    counts = outcome.results["stage"].value_counts().to_dict()
print(json.dumps({
    "total_s": total, "stages_s": stages, "agents_s": agents,
    "units": {k: int(v) for k, v in counts.items()},
    "status": outcome.status,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def run(agents_per_value: int = 16_667, repeats: int = 3) -> dict[str, Any]:
    """The fastest of ``repeats`` runs of ``6 x agents_per_value`` applicants (100,002 by
    default), each in a fresh process, as the engine benchmark takes its best: on a shared
    machine one run took 8.5 to 11.7 s in the same hour. Every run's time and the largest peak
    memory are kept."""
    runs = [one_run(STUDY.replace("AGENTS", str(agents_per_value))) for _ in range(repeats)]
    measured = min(runs, key=lambda r: r["total_s"])
    units = sum(measured["units"].values())
    stage_s = sum(measured["stages_s"].values())
    peak = max(r["peak_rss_mb"] for r in runs)
    return {
        **measured,
        "runs_total_s": [r["total_s"] for r in runs],
        "peak_rss_mb": peak,
        "applicants": measured["units"].get("apply", 0),
        "actions": units,
        "stage_actions_per_s": units / stage_s,
        # Where the rest of the run goes: building the agents, then everything after the
        # stages (the store's totals, the analysis, tables, figures and the report).
        "after_stages_s": measured["total_s"] - stage_s - measured["agents_s"],
        "run_actions_per_s": units / measured["total_s"],
        "documents_read": measured["units"].get("screen", 0) * 8
        + measured["units"].get("offer", 0) * 3,
        "target_actions_per_s": TARGET_ACTIONS,
        "target_peak_mb": TARGET_PEAK_MB,
        "meets_target": units / measured["total_s"] >= TARGET_ACTIONS and peak <= TARGET_PEAK_MB,
    }


def one_run(study: str) -> dict[str, Any]:
    """Run the study text ``study`` in a fresh process (so its peak memory is its own): its
    time, per-stage times, units per stage and peak RSS."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=study,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
