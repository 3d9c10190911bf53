"""Signals at a random moment, then `--resume`: how many calls the model was paid for twice.

The loopback server records every request it answers; a request body seen twice is a call paid
twice. SIGINT and SIGTERM stop the run cleanly (the calls in flight finish and are stored): 0.
SIGKILL loses the calls in flight, at most ``max_concurrency`` of them. Every trial also checks
that the resumed run has each unit once. One SIGINT trial runs in the fast tier; the other
signals and random moments run under ``slow``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tests.loopback_llm_server import LoopbackLLMServer

CONCURRENCY = 4
UNITS = 60
STUDY = """\
name: signal_trial
description: signals at random moments
roles:
  decider:
    backend: openai
    model: m
    max_concurrency: {concurrency}
    options: {options}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: {agents}
"""
# No key variable set: a loopback server needs no --allow-endpoint, and no key can reach it.
ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}


def _biasim(*args: str) -> list[str]:
    return [sys.executable, "-m", "biasim", *args]


def trial(tmp_path: Path, sig: signal.Signals, after: int) -> int:
    """Run, send ``sig`` once the server has answered ``after`` calls, resume; return the
    calls paid twice."""
    with LoopbackLLMServer(latency_ms=40) as server:
        study = tmp_path / "s.yaml"
        options = json.dumps({"base_url": server.openai_base_url})
        study.write_text(STUDY.format(concurrency=CONCURRENCY, options=options, agents=UNITS // 2))
        out = tmp_path / "run"
        proc = subprocess.Popen(
            _biasim("run", str(study), "--out", str(out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=ENV,
            text=True,
        )
        if not server.wait_for_count(after, timeout=120):
            proc.kill()
            pytest.fail(f"the run never got going: {proc.communicate()[1][-2000:]}")
        proc.send_signal(sig)
        proc.wait(timeout=120)
        done = subprocess.run(
            _biasim("run", "--resume", str(out)), capture_output=True, text=True, env=ENV
        )
        assert done.returncode == 0, done.stderr
        bodies = Counter(json.dumps(r.body, sort_keys=True) for r in server.requests)
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == UNITS and results["unit_id"].is_unique
    assert (results["status"] == "answered").all()
    assert len(bodies) == UNITS  # every unit was asked, and nothing else
    return sum(n - 1 for n in bodies.values())


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
)
def test_a_clean_stop_pays_no_call_twice(tmp_path: Path, sig: signal.Signals) -> None:
    assert trial(tmp_path, sig, after=12) == 0


@pytest.mark.slow  # tests/e2e/test_kill_resume.py keeps a SIGKILL trial in the fast tier
def test_sigkill_pays_at_most_the_calls_in_flight_twice(tmp_path: Path) -> None:
    assert trial(tmp_path, signal.SIGKILL, after=12) <= CONCURRENCY


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_signals_at_random_moments(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
    twice = trial(tmp_path, sig, after=rng.randint(1, UNITS - CONCURRENCY))
    assert twice <= (CONCURRENCY if sig == signal.SIGKILL else 0), (sig, twice)
