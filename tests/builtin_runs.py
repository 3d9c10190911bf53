"""Every built-in study run once per test session on the synthetic responder, at the smallest
size its design allows: the summary-schema and golden-table tests read the same run folders
instead of each running all studies again."""

from __future__ import annotations

from pathlib import Path

from biasim.scenarios import builtin_studies
from biasim.simulator.engine.runner import RunOptions, execute, prepare

#: The smallest size each built-in study's design allows, where it is not 1: the pools of the
#: pipeline studies need two applicants per persona value; a market draws its workforce and,
#: from the people not employed, each cycle's applicants: market_small a workforce of 8 and 4
#: applicants (12 people at least), labor_market 10 and 8 (18 at least). Both run with more
#: people out of work than apply: where the applicants are nearly all of them, the pool
#: mirrors the workforce and pushes back on any drift. labor_market runs at its declared size
#: (100 per gender; its cost is in the cycles, not the population), where the drift its truth
#: declares shows (tests/e2e/test_market_analysis.py).
#: Every test that runs all built-in studies reads it here.
AGENTS = {
    "hiring_pipeline": 2,
    "hiring_policies": 2,
    "hiring_committees": 2,
    "market_small": 8,
    "labor_market": 100,
}
#: Needs a masked LM the user supplies: refused at validate (tests/e2e/test_prism_study.py
#: runs it with a tiny BERT).
NEEDS_INPUT = {"ding2024_prism"}
#: The built-in studies these runs cover.
STUDIES = sorted(set(builtin_studies()) - NEEDS_INPUT)


def run_builtin(name: str, out: Path) -> Path:
    """Run the built-in study ``name`` into ``out`` (its seed fixed by the study file)."""
    options = RunOptions(study=name, out=out, backend="synthetic", agents=AGENTS.get(name, 1))
    outcome = execute(prepare(options))
    assert outcome.status == "complete", (name, outcome.message)
    return out


class BuiltinRuns:
    """Run folders by study name, each run on first request."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[str, Path] = {}

    def __call__(self, name: str) -> Path:
        if name not in self.done:
            self.done[name] = run_builtin(name, self.root / name)
        return self.done[name]
