"""A run killed with SIGKILL mid-stage loses no answered call; --resume finishes it exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from tests.conftest import answered_calls, write_study

BIASIM = [sys.executable, "-m", "biasim"]


def test_sigkill_mid_stage_then_resume_finishes_every_unit_once(tmp_path: Path) -> None:
    # 900 units at 20 ms each, 8 at a time: about 2.3 s of work, killed after 150 answers.
    study = write_study(tmp_path / "s.yaml", agents=150, replicates=2, latency_ms=20, concurrency=8)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*BIASIM, "run", str(study), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while answered_calls(out / "calls.sqlite") < 150:
        assert proc.poll() is None, "run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = answered_calls(out / "calls.sqlite")
    assert 150 <= before < 900
    assert not (out / "results.parquet").exists()  # killed before the end: nothing half-written

    done = subprocess.run(
        [*BIASIM, "run", "--resume", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 900 and results["unit_id"].is_unique
    assert (results["status"] == "answered").all()
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == 900  # no call was asked twice
    # Rich wraps long lines at the terminal width; compare with whitespace collapsed.
    assert f"new calls: {900 - before}" in " ".join(done.stdout.split())
    # Rows answered before the kill kept their answers (replayed from the store, so only the
    # rest were new calls); `cached` keeps where each answer first came from: the model.
    assert not results["cached"].any()
