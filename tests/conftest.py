"""Shared fixtures: small study files on the synthetic responder, and a CLI runner."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

if TYPE_CHECKING:
    from tests.builtin_runs import BuiltinRuns

SYNTHETIC_STUDY = """\
name: synthetic_flood
description: "Synthetic ground truth for tests"
seed: 7
vars:
  scenario: "A flood is coming."
roles:
  decider:
    backend: synthetic
    temperature: 0.2
    max_tokens: 64
    max_concurrency: {concurrency}
    options: {{latency_ms: {latency_ms}}}
    synthetic:
      decision:
        by: gender
        probabilities:
          male: {{Evacuate: 0.3, Stay: 0.7}}
          female: {{Evacuate: 0.8, Stay: 0.2}}
        default: {{Evacuate: 0.5, Stay: 0.5}}
personas:
  axes:
    gender: [male, female, non-binary]
  description: "a person whose gender identity is {{{{ gender }}}}"
stages:
  - name: decide
    role: decider
    prompt: |-
      You are {{{{ persona.description }}}}.
      {{{{ scenario }}}}
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
      rationale: {{type: string, max_length: 80}}
design:
  agents_per_value: {agents}
  replicates: {replicates}
analyses:
  - stage: decide
    field: decision
    target: Evacuate
    by: gender
"""


def write_study(
    path: Path,
    *,
    agents: int = 20,
    replicates: int = 1,
    latency_ms: float = 0,
    concurrency: int = 16,
) -> Path:
    """Write the synthetic study with the given design."""
    path.write_text(
        SYNTHETIC_STUDY.format(
            agents=agents, replicates=replicates, latency_ms=latency_ms, concurrency=concurrency
        )
    )
    return path


@pytest.fixture
def synthetic_study(tmp_path: Path) -> Path:
    """A small synthetic study file."""
    return write_study(tmp_path / "study.yaml")


@pytest.fixture(scope="session")
def builtin_runs(tmp_path_factory: pytest.TempPathFactory) -> BuiltinRuns:
    """Every built-in study's run folder, each study run once per test session (per xdist
    worker) on first request: the schema, golden-table and console-width tests read the same
    runs."""
    from tests.builtin_runs import BuiltinRuns

    return BuiltinRuns(tmp_path_factory.mktemp("builtin_runs"))


@pytest.fixture
def cli() -> CliRunner:
    """Typer's runner (stdout and stderr kept apart)."""
    return CliRunner()


def answered_calls(db: Path, stage: str | None = None) -> int:
    """Answered calls in a run's store while the run may still be writing it.

    Opens read-only: a plain connect would create ``calls.sqlite`` in a run directory the run
    has just made, and the run, finding it not empty, would refuse to start.
    """
    if not db.exists():
        return 0
    where, args = ("AND stage=?", (stage,)) if stage else ("", ())
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            sql = f"SELECT COUNT(*) FROM calls WHERE status='answered' {where}"
            return conn.execute(sql, args).fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def dedent(text: str) -> str:
    """Strip the common indentation of a YAML literal in a test."""
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """The developer's own ~/.config/biasim/config.toml (allowed endpoints) never leaks into a
    test, nor do tests fill the developer's cache; subprocesses inherit the variables."""
    monkeypatch.setenv("BIASIM_CONFIG", str(tmp_path_factory.mktemp("cfg") / "none.toml"))
    monkeypatch.setenv("BIASIM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


#: Test files whose checks time things, send signals or hold locks between processes, or run
#: the embedded model or a browser: `make test` runs them in a serial pass of their own, after
#: the rest has run on two workers (pytest-xdist), so a busy neighbour never decides a deadline.
SERIAL_FILES = frozenset(
    {
        "test_batch_runs.py",
        "test_browser_helper.py",
        "test_fast_failures.py",
        "test_hostile_inputs.py",
        "test_kill_resume.py",
        "test_persona_ablation.py",
        "test_pipeline_runs.py",
        "test_progress_eta.py",
        "test_resource_limits.py",
        "test_signal_trials.py",
        "test_interrupts.py",
        "test_run_lock.py",
        "test_progress.py",
        "test_backends_http.py",
        "test_loopback_llm_server.py",
        "test_retry_and_limits.py",
        "test_template_limits.py",
        "test_multi_server.py",
    }
)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the serial files' tests, the embedded-model tests and the browser tests `serial`."""
    for item in items:
        path = Path(str(item.fspath))
        if (
            path.name in SERIAL_FILES
            or path.parent.name == "model"
            or item.get_closest_marker("model")
            or item.get_closest_marker("browser")
        ):
            item.add_marker(pytest.mark.serial)
