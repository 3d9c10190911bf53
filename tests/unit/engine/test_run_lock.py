"""One writer per run directory, and failures never recorded as complete.

Two `biasim run --out SAME` at once, a `--resume` or an `analyze` of a live run: the second
writer exits 2 naming the process that holds the directory, and the first finishes with every
call paid once. A run that breaks after its directory exists ends `failed`, with the reason and
the resume command, never `complete`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from biasim.simulator.cli import app
from biasim.simulator.common.rundir import RunLock
from tests.conftest import write_study

BIASIM = [sys.executable, "-m", "biasim"]


def started(out: Path, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while not (out / "calls.sqlite").exists():
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)


def test_a_second_writer_of_a_live_run_exits_2_naming_the_holder(tmp_path: Path) -> None:
    # 1,200 units at 50 ms, 4 at a time: about 15 s of work, time for two more writers to try.
    study = write_study(tmp_path / "s.yaml", agents=200, replicates=2, latency_ms=50, concurrency=4)
    out = tmp_path / "run"
    first = subprocess.Popen(
        [*BIASIM, "run", str(study), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started(out)
    for args in (
        ["run", str(study), "--out", str(out)],
        ["run", "--resume", str(out)],
    ):
        second = subprocess.run([*BIASIM, *args], capture_output=True, text=True, timeout=60)
        assert first.poll() is None, "the first run ended before the second writer tried"
        assert second.returncode == 2, second.stderr
        message = " ".join(second.stderr.split())
        assert f"pid {first.pid}" in message or "not empty" in message, message
        if "--resume" in args:
            assert f"pid {first.pid}" in message, message
    assert first.wait(timeout=120) == 0, first.stderr.read() if first.stderr else ""
    results = pd.read_parquet(out / "results.parquet")  # whole, not corrupt
    assert len(results) == 1200 and results["unit_id"].is_unique
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == 1200  # every call paid once
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_two_runs_started_together_leave_one_complete_run(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=100, replicates=2, latency_ms=10, concurrency=4)
    out = tmp_path / "run"
    procs = [
        subprocess.Popen(
            [*BIASIM, "run", str(study), "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 2]
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == 600
    assert len(pd.read_parquet(out / "results.parquet")) == 600


def test_analyze_waits_for_no_one_and_a_dead_holder_never_blocks(tmp_path: Path, cli) -> None:
    out = tmp_path / "run"
    study = write_study(tmp_path / "s.yaml", agents=5)
    assert cli.invoke(app, ["run", str(study), "--out", str(out)]).exit_code == 0
    lock = RunLock(out)
    lock.acquire()  # this process writes there now
    try:
        busy = subprocess.run([*BIASIM, "analyze", str(out)], capture_output=True, text=True)
        assert busy.returncode == 2 and "is being written by pid" in busy.stderr
    finally:
        lock.release()
    # A holder killed with SIGKILL leaves its lock file; the OS lock died with it.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path;"
            "from biasim.simulator.common.rundir import RunLock;"
            f"RunLock(Path({str(out)!r})).acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    assert (out / ".lock").exists()
    again = subprocess.run([*BIASIM, "analyze", str(out)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr


def test_a_run_that_breaks_after_its_directory_exists_is_failed_not_complete(
    tmp_path: Path, cli
) -> None:
    study = write_study(tmp_path / "s.yaml", agents=20)
    text = study.read_text()
    # A second stage whose template breaks only on the model's free text: the dry render's
    # stand-in says it is written "at run time", the synthetic rationale does not, so the run
    # starts and then fails.
    text = text.replace(
        "design:",
        "  - name: explain\n"
        "    role: decider\n"
        "    prompt: \"{% if 'at run time' not in outputs.decide.rationale %}"
        '{{ undefined_name }}{% endif %}Why?"\n'
        "design:",
    )
    study.write_text(text)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 1
    err = " ".join(result.stderr.split())
    assert "run failed" in err and "undefined_name" in err
    assert f"biasim run --resume {out}" in err
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert manifest["status"] == summary["status"] == "failed"
    assert "undefined_name" in summary["message"] and "Traceback" in summary["traceback"]
    # The answers before the failure are kept: the first stage is in the store.
    with sqlite3.connect(out / "calls.sqlite") as conn:
        (answered,) = conn.execute(
            "SELECT COUNT(*) FROM calls WHERE stage='decide' AND status='answered'"
        ).fetchone()
    assert answered == 60


def test_a_template_that_breaks_after_one_choice_fails_validation(tmp_path: Path, cli) -> None:
    study = write_study(tmp_path / "s.yaml", agents=20)
    study.write_text(
        study.read_text().replace(
            "design:",
            "  - name: explain\n"
            "    role: decider\n"
            "    prompt: \"{% if outputs.decide.decision == 'Stay' %}{{ undefined_name }}"
            '{% endif %}Why?"\n'
            "design:",
        )
    )
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 2
    assert "stages[1].prompt: template variable `undefined_name` does not exist" in result.stderr
    assert not out.exists()  # found before any call
