"""Resuming a finished run asks nothing and changes nothing: ``results.csv`` keeps its bytes
(each answer keeps where it first came from), while a ``--replay`` run says its answers came
from a store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.conftest import write_study


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_resuming_a_finished_run_leaves_results_csv_byte_identical(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=3)
    out = tmp_path / "run"
    first = execute(prepare(RunOptions(study=str(study), out=out)))
    assert first.status == "complete"
    before = _sha256(out / "results.csv")
    assert not pd.read_csv(out / "results.csv")["cached"].any()

    resumed = execute(prepare(RunOptions(resume=out)))
    assert resumed.status == "complete"
    assert resumed.summary["calls"] == {"new": 0, "from_cache": len(first.results)}
    assert _sha256(out / "results.csv") == before

    replayed = tmp_path / "replayed"
    execute(prepare(RunOptions(study=str(study), out=replayed, replay=out)))
    assert pd.read_csv(replayed / "results.csv")["cached"].all()
    # Resuming the replayed run keeps its answers marked as from a store.
    again = _sha256(replayed / "results.csv")
    execute(prepare(RunOptions(resume=replayed)))
    assert _sha256(replayed / "results.csv") == again
