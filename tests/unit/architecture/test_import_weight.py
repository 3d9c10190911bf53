"""What a module costs to import: the engine and validation stay clear of the heavy libraries
(a run that only calls models does not pay for scikit-learn or torch, and ``biasim validate``
does not pay for scipy.stats or matplotlib just to read a study's analyses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import ROOT

HEAVY = ("sklearn", "torch", "transformers")
PLOTTING_AND_TESTS = ("matplotlib", "scipy.stats", "statsmodels", "networkx")


def _imported(code: str) -> set[str]:
    """Top modules (and ``scipy.stats``) in ``sys.modules`` after running ``code`` afresh."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_engine_imports_no_learning_library() -> None:
    modules = _imported("import biasim.simulator.engine, biasim.simulator.engine.runner")
    assert "biasim.simulator.engine.runner" in modules  # the probe saw the engine
    assert not [m for m in HEAVY if m in modules]


def test_loading_a_built_in_study_imports_no_plotting_or_test_library() -> None:
    modules = _imported(
        "from biasim.simulator.study.load import load_study\nload_study('an2024_hiring')"
    )
    assert "biasim.simulator.kinds.acceptance" in modules  # its analyses were parsed
    assert not [m for m in (*HEAVY, *PLOTTING_AND_TESTS) if m in modules]
