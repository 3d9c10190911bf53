"""Seed-004-style null with replicates, end to end: does the study stay at its level, and does
``biasim power`` report the false-positive rate that running the study again and again gives?

``python -m benchmarks.replicates_null [--runs 30] [--repeats 200] [--agents 10]``

The study: 3 gender groups, ``--agents`` personas each, 4 scenarios, 5 replicates per persona,
a persona propensity N(0, 1.5) on the logit and no group effect (synthetic backend). It checks

1. the per-case DPD tests of ``--runs`` runs, each with its own model id and seed, flag at most
   10 % of the cases (the unit permutation relabels whole personas);
2. ``biasim power`` (``--repeats`` simulated studies) reports a false-positive rate of the
   headline test within 3 points of the rate over ``--repeats`` independent runs of the study
   (other seeds), because each simulated study redraws the personas' propensities.

Slow (minutes): it runs the engine ~``runs + 3 * repeats`` times; it is a check, not a timing.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.tools.power import power


def study(agents: int, model: str = "synthetic-responder") -> dict[str, Any]:
    truth = {"default": {"Evacuate": 0.5, "Stay": 0.5}, "unit": "persona", "unit_sd": 1.5}
    return {
        "name": "replicates_null",
        "description": "seed-004-style null: persona propensity sd 1.5, 5 replicates",
        "seed": 2025,
        "roles": {
            "agent": {"backend": "synthetic", "model": model, "synthetic": {"decision": truth}}
        },
        "personas": {"axes": {"gender": ["Male", "Female", "Non-binary"]}, "cross": False},
        "stages": [
            {
                "name": "decide",
                "role": "agent",
                "prompt": "You are {{ persona.description }}. Scenario: {{ scenario }}. Decide.",
                "output": {"decision": {"type": "choice", "choices": ["Evacuate", "Stay"]}},
            }
        ],
        "design": {
            "agents_per_value": agents,
            "replicates": 5,
            "factors": {"scenario": {s: {} for s in ("flood", "fire", "protest", "sharing")}},
        },
        "analyses": [
            {
                "name": "decisions",
                "kind": "demographic_parity",
                "stage": "decide",
                "field": "decision",
                "target": "Evacuate",
                "by": "gender",
                "cases": ["scenario"],
                "n_simulations": 2000,
            }
        ],
    }


def run_once(path: Path, out: Path, seed: int) -> dict[str, Any]:
    outcome = execute(prepare(RunOptions(study=str(path), out=out, seed=seed)))
    return outcome.summary["analyses"][0]


def flagged_cases(folder: Path, runs: int, agents: int) -> tuple[int, int]:
    flagged = total = 0
    for j in range(runs):
        path = folder / f"model-{j}.yaml"
        path.write_text(yaml.safe_dump(study(agents, model=f"null-model-{j}")))
        analysis = run_once(path, folder / f"runs-{j}", seed=100 + j)
        flagged += sum(bool(c["significant"]) for c in analysis["cases"])
        total += len(analysis["cases"])
    return flagged, total


def repeated_rate(folder: Path, repeats: int, agents: int) -> dict[str, float]:
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study(agents)))
    hits: dict[str, list[bool]] = {}
    for i in range(repeats):
        analysis = run_once(path, folder / f"repeat-{i}", seed=50_000 + i)
        for test, tested in get_kind(analysis["kind"]).power_tests(analysis).items():
            p = tested.p
            hits.setdefault(test, []).append(p is not None and not math.isnan(p) and p < 0.05)
    return {test: sum(v) / len(v) for test, v in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--agents", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="biasim-replicates-") as tmp:
        folder = Path(tmp)
        flagged, total = flagged_cases(folder, args.runs, args.agents)
        print(f"per-case DPD tests flagged: {flagged}/{total} = {flagged / total:.1%} (<= 10 %)")
        path = folder / "power.yaml"
        path.write_text(yaml.safe_dump(study(args.agents)))
        rows = power(str(path), [args.agents], studies=args.repeats, seed=0)
        measured = repeated_rate(folder, args.repeats, args.agents)
        for row in rows:
            other = measured.get(row.test, math.nan)
            gap = abs(row.false_positive_rate - other)
            print(
                f"{row.test}: power reports false positives {row.false_positive_rate:.1%}, "
                f"{args.repeats} independent runs give {other:.1%} (gap {gap * 100:.1f} points)"
            )


if __name__ == "__main__":
    main()
