"""The Python API under one import package: `biasim.load_study`, `run`, `load_run` (results with
the rendered prompts), `resume`, `analyze`, and no generic top-level modules installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import biasim
from biasim.simulator.common.errors import InputError
from tests.conftest import write_study


def test_run_and_load_run_give_the_results_with_what_each_unit_was_sent(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=4)
    run = biasim.run(study, out=tmp_path / "run", seed=11)
    assert run.status == "complete" and len(run.results) == 12
    loaded = biasim.load_run(tmp_path / "run")
    pd.testing.assert_frame_equal(loaded.results, run.results)
    rows = loaded.results
    # The prompt is the text rendered for that unit's persona, not the template.
    for gender, prompt in zip(rows["gender"], rows["prompt"], strict=True):
        assert prompt.startswith(f"You are a person whose gender identity is {gender}.")
        assert "A flood is coming." in prompt and "{{" not in prompt
    assert rows["messages"].str.contains('"role":"user"').all()
    assert loaded.calls["unit_id"].isin(rows["unit_id"]).all()
    assert set(loaded.tables) and all(isinstance(t, pd.DataFrame) for t in loaded.tables.values())
    assert loaded.report.is_file()
    assert loaded.summary["analyses"] and loaded.study.name == "synthetic_flood"


def test_load_study_validates_with_the_command_lines_overrides(tmp_path: Path) -> None:
    study = biasim.load_study(write_study(tmp_path / "s.yaml"), agents=3, seed=5)
    assert study.config.design.agents_per_value == 3 and study.config.seed == 5
    with pytest.raises(TypeError, match="unknown option"):
        biasim.load_study("emergency_response", agent=3)
    with pytest.raises(InputError, match="--agents"):
        biasim.load_study("emergency_response", agents=0)


def test_a_stopped_run_raises_and_resume_finishes_it(tmp_path: Path) -> None:
    study = tmp_path / "s.yaml"
    text = write_study(study, agents=10).read_text()
    study.write_text(text.replace("{latency_ms: 0}", "{latency_ms: 0, fail_rate: 1.0}"))
    with pytest.raises(RuntimeError, match=r"run failed: .*biasim.resume\("):
        biasim.run(study, out=tmp_path / "run")
    assert biasim.load_run(tmp_path / "run").status == "failed"
    fixed = tmp_path / "run" / "manifest.json"
    fixed.write_text(fixed.read_text().replace('"fail_rate": 1.0', '"fail_rate": 0.0'))
    run = biasim.resume(tmp_path / "run")
    assert run.status == "complete" and (run.results["status"] == "answered").all()
    assert biasim.analyze(tmp_path / "run").summary["analyses"] == run.summary["analyses"]


def test_only_biasim_is_importable_outside_the_checkout(tmp_path: Path) -> None:
    """Installed, the folders live under `biasim`: `import agents` would collide with the
    openai-agents SDK, `import analysis` with anything."""
    run = biasim.run(write_study(tmp_path / "s.yaml", agents=2), out=tmp_path / "run")
    code = (
        "import importlib.util, biasim; "
        "print([m for m in ('agents', 'analysis', 'simulator', 'personas', 'scenarios') "
        "if importlib.util.find_spec(m)]); "
        f"print(len(biasim.load_run({str(run.path)!r}).results))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed layout
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "6"]
