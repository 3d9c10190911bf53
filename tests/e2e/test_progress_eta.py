"""The ETA a slow model earns: paced by the calls it answered (not by units from the store or
skipped, not by the log interval), and right within 20 % on a server taking 1 s a call."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

from biasim.simulator.engine.progress import LogProgress, Pace
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.e2e.test_fast_failures import STUDY
from tests.loopback_llm_server import LoopbackLLMServer

LINE = re.compile(r"^progress \S+: (\d+)/(\d+) units .* ETA (\d+):(\d\d):(\d\d)")


def test_pace_counts_calls_in_flight_together_once() -> None:
    pace = Pace()
    assert pace.rate() is None and pace.eta(5) is None
    # Two calls of 2 s answered together, then two more: 4 calls in 4 s.
    for end in (2.0, 2.0, 4.0, 4.0):
        pace.answered(2.0, end)
    assert pace.rate() == pytest.approx(1.0)
    assert pace.eta(10) == pytest.approx(10.0)
    assert pace.eta(0) == 0.0


def test_pace_follows_the_recent_calls() -> None:
    pace = Pace(window=3)
    for end in range(1, 11):
        pace.answered(1.0, float(end))  # 1 s a call
    for end in (14.0, 18.0, 22.0):
        pace.answered(4.0, end)  # the model slows to 4 s a call
    assert pace.rate() == pytest.approx(3 / 12)


class _TimedLines:
    """A stream that remembers when each progress line was written."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self.lines += [(time.monotonic(), t) for t in text.splitlines() if t]

    def flush(self) -> None:
        pass


@pytest.mark.slow
def test_eta_after_30_calls_of_one_second_is_within_20_percent(tmp_path: Path) -> None:
    units = 40
    stream = _TimedLines()
    with LoopbackLLMServer(latency_ms=1000) as server:
        study = tmp_path / "s.yaml"
        options = json.dumps({"base_url": server.openai_base_url})
        text = STUDY.format(probe=60, options=options).replace(
            "agents_per_value: 3", f"agents_per_value: {units // 2}"
        )
        study.write_text(text)
        run = RunOptions(study=str(study), out=tmp_path / "run", max_concurrency=1)
        with LogProgress(stream, every_s=0.5) as factory:
            outcome = execute(prepare(run), factory)
        end = time.monotonic()
    assert outcome.status == "complete" and len(outcome.results) == units
    timed = [(t, LINE.match(line)) for t, line in stream.lines]
    first = next(
        (t, m) for t, m in timed if m and int(m.group(1)) >= 30 and "(end)" not in m.string
    )
    at, match = first
    eta = int(match.group(3)) * 3600 + int(match.group(4)) * 60 + int(match.group(5))
    remaining = end - at
    assert remaining > 5  # the line came while ten or so calls were left
    assert abs(eta - remaining) <= 0.2 * remaining, (eta, remaining, match.string)
