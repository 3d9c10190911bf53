"""Progress a user can read: the live bar in a terminal, timed lines when output goes to a file."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from biasim.simulator.engine.progress import LogProgress, TerminalProgress, _State, clock, rate_text
from tests.conftest import write_study

LINE = re.compile(
    r"^progress synthetic_flood: (\d+)/(\d+) units \(\d+%\), "
    r"(?:[\d,.]+ calls/s|[\d,.]+ s/call|- calls/s), errors (\d+), "
    r"elapsed \d+:\d\d:\d\d, ETA (?:\d+:\d\d:\d\d|-:--:--)( \(end\))?$"
)


def test_piped_run_logs_progress_lines_every_interval(tmp_path: Path) -> None:
    study = write_study(tmp_path / "study.yaml", agents=20, latency_ms=60, concurrency=2)
    # Declared failures, so the error count has something to show.
    study.write_text(study.read_text().replace("latency_ms: 60", "latency_ms: 60, fail_rate: 0.2"))
    out = tmp_path / "run"
    env = {**os.environ, "BIASIM_PROGRESS_EVERY": "0.4"}
    proc = subprocess.run(
        [sys.executable, "-m", "biasim", "run", str(study), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("progress ")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    # 60 units, two at a time, 60 ms each: about 1.8 s, so several timed lines and the last.
    assert len(lines) >= 4, proc.stderr
    done = [int(m.group(1)) for m in matches if m]
    assert done == sorted(done) and done[0] < 60
    last = matches[-1]
    assert last is not None and last.group(4) == " (end)"
    assert (last.group(1), last.group(2)) == ("60", "60")
    errors = json.loads((out / "summary.json").read_text())["status_counts"].get("error", 0)
    assert errors > 0 and int(last.group(3)) == errors
    # No live-bar drawing characters in a log file.
    assert "━" not in proc.stderr


def test_rate_reads_as_seconds_per_call_when_slow() -> None:
    assert rate_text(12.345) == "12.3 calls/s"
    assert rate_text(0.25) == "4.0 s/call"
    assert rate_text(None) == "- calls/s"
    assert clock(3725) == "1:02:05"
    assert clock(None) == "-:--:--"


def test_log_line_paces_by_the_answered_calls_not_the_interval() -> None:
    state = _State(label="s", total=100, started=0.0)
    state.done, state.errors = 50, 3
    # 50 units answered from the store: no model time, no pace yet.
    assert LogProgress.line(state, 10.0).endswith("ETA -:--:--")
    # Then one call that took 48.6 s: the pace is 48.6 s/call whatever the log interval.
    state.done = 51
    state.pace.answered(48.6, 60.0)
    assert LogProgress.line(state, 60.0) == (
        "progress s: 51/100 units (51%), 48.6 s/call, errors 3, elapsed 0:01:00, ETA 0:39:41"
    )


def test_terminal_bar_shows_done_rate_errors_and_eta() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120, color_system=None)
    display = TerminalProgress(console)
    with display as factory:
        tick = factory(10, "study")
        tick(10, 2)
    text = buffer.getvalue()
    assert "10/10" in text
    assert "errors 2" in text
    assert "ETA" in text
    assert re.search(r"calls/s|s/call", text)


def test_a_total_the_run_learns_later_replaces_the_first() -> None:
    """A market learns of letters only a policy's applicants write as it opens cycles: the
    tick's total replaces the factory's, in the log line and the live bar, so the count
    ends at 100 %, not 33/32."""
    stream = io.StringIO()
    with LogProgress(stream, every_s=3600) as factory:
        tick = factory(32, "s")
        tick(20, 0)
        tick(33, 1, None, 33)
    assert "progress s: 33/33 units (100%)" in stream.getvalue().splitlines()[-1]
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120, color_system=None)
    with TerminalProgress(console) as factory:
        tick = factory(32, "study")
        tick(33, 0, None, 33)
    assert "33/33" in buffer.getvalue() and "33/32" not in buffer.getvalue()


@pytest.mark.parametrize("batch_size", [None, 20])
def test_units_a_when_skips_count_as_done_from_the_start(tmp_path: Path, batch_size) -> None:
    """Progress counts units whose `when` is false from the start, those of waves not yet
    built too (from the design's count), so units left (and the ETA) are the calls left: here
    the second stage asks only the female third of the agents, so after the first answered
    call 40 of 120 units are already done, in one wave or three, and the count still ends at
    the total without ever going back."""
    from biasim.simulator.engine.runner import RunOptions, execute, prepare

    study = write_study(tmp_path / "study.yaml", agents=20)
    text = study.read_text()
    second = text[text.index("  - name: decide") : text.index("design:")]
    second = second.replace("name: decide", "name: again").replace(
        "    role: decider\n", "    role: decider\n    when: \"gender == 'female'\"\n"
    )
    text = text.replace("design:", second + "design:").replace("stage: decide", "stage: again")
    if batch_size:
        text = text.replace("design:\n", f"design:\n  batch_size: {batch_size}\n")
    study.write_text(text)
    seen: list[tuple[int, int]] = []

    def factory(total: int, label: str):
        return lambda done, errors, latency=None, now=total: seen.append((done, now))

    outcome = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run")), progress=factory)
    assert outcome.status == "complete"
    assert len(outcome.results) == 60 + 20
    assert seen[0] == (1 + 40, 120)
    assert seen[-1] == (120, 120)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_when_failing_in_the_run_fails_the_run_not_the_start(tmp_path: Path, monkeypatch) -> None:
    """A `when` that fails for an agent validation did not meet (past its evaluation budget)
    is recorded as the run's failure when its stage runs, with the answers before it kept,
    not raised while the agents are built."""
    from biasim.simulator.engine.runner import RunOptions, execute, prepare
    from biasim.simulator.study import design

    monkeypatch.setattr(design, "WHEN_COUNT_LIMIT", 0)
    study = write_study(tmp_path / "study.yaml", agents=5, replicates=2)
    text = study.read_text()
    second = text[text.index("  - name: decide") : text.index("design:")]
    second = second.replace("name: decide", "name: again").replace(
        "    role: decider\n",
        '    role: decider\n    when: "1 / (0 if replicate == 1 else 1) > 0"\n',
    )
    study.write_text(text.replace("design:", second + "design:"))
    outcome = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run")))
    assert outcome.status == "failed" and "ZeroDivisionError" in outcome.summary["message"]
    assert (outcome.results["stage"] == "decide").sum() == 30
