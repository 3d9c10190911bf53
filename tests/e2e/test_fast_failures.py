"""Fast, honest failures, through a whole run (whichever HTTP transport the backend uses): a
refused connection is named and not retried before the server ever answered, a reset keeps its
reason, and a server that accepts connections but never answers is found within the probe
timeout, not after every attempt's full timeout."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.loopback_llm_server import Fault, LoopbackLLMServer

STUDY = """\
name: fast_failures
description: failures reported fast
roles:
  decider:
    backend: openai
    model: m
    max_attempts: 4
    backoff_s: 0.5
    timeout_s: 120
    probe_timeout_s: {probe}
    max_concurrency: 2
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
  agents_per_value: 3
"""


def _run(
    tmp_path: Path,
    base_url: str,
    probe: float = 60.0,
    concurrency: int | None = None,
    progress: Any = None,
) -> tuple[pd.DataFrame, float]:
    study = tmp_path / "s.yaml"
    study.write_text(STUDY.format(probe=probe, options=json.dumps({"base_url": base_url})))
    start = time.monotonic()
    options = RunOptions(study=str(study), out=tmp_path / "run", max_concurrency=concurrency)
    outcome = execute(prepare(options), progress)
    return outcome.results, time.monotonic() - start


def test_connection_refused_is_named_and_not_retried_on_first_contact(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results, elapsed = _run(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert (results["status"] == "error").all()
    assert results["error"].str.contains("connection refused").all(), results["error"].iloc[0]
    assert results["error"].str.contains("is the server running").all()
    assert (results["attempts"] == 1).all()  # not four attempts with backoff in between
    assert elapsed < 15


def test_a_reset_keeps_its_reason(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        server.set_default_fault(Fault.connection_reset())
        results, _ = _run(tmp_path, server.openai_base_url)
    assert (results["status"] == "error").all()
    errors = results["error"].str.lower()
    assert errors.str.contains("reset|disconnected|closed").all(), results["error"].iloc[0]
    assert not errors.str.contains("timed out").any()


def test_a_silent_server_is_found_within_the_probe_timeout(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        server.set_default_fault(Fault.hang(120))
        results, elapsed = _run(tmp_path, server.openai_base_url, probe=2.0)
    assert (results["status"] == "error").all()
    assert results["error"].str.contains("has not answered any call yet").all()
    # Two calls in flight wait 2 s each; the rest fail at once (not 4 attempts x 120 s each).
    assert elapsed < 20


def test_after_the_first_answer_a_slow_call_gets_the_full_timeout(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        # The first call answers at once; the second takes longer than the probe timeout.
        server.enqueue(Fault.latency(0), Fault.latency(2500))
        results, _ = _run(tmp_path, server.openai_base_url, probe=1.0, concurrency=1)
    assert (results["status"] == "answered").all(), results["error"].dropna().tolist()


@pytest.mark.parametrize("probe", [0, -1])
def test_probe_timeout_must_be_positive(tmp_path: Path, probe: float) -> None:
    from biasim.simulator.common.errors import InputError

    with pytest.raises(InputError, match="probe_timeout_s"):
        _run(tmp_path, "http://127.0.0.1:9/v1", probe=probe)


def test_the_progress_display_hears_of_each_failure_as_it_happens(tmp_path: Path) -> None:
    ticks: list[tuple[int, int]] = []

    def factory(total: int, label: str):
        return lambda done, errors, latency=None, total=None: ticks.append((done, errors))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _run(tmp_path, f"http://127.0.0.1:{port}/v1", concurrency=1, progress=factory)
    # With one call in flight, the k-th unit finished is the k-th failure, reported then.
    during = [errors for done, errors in ticks if 0 < done < 6]
    assert during and all(errors == done for done, errors in ticks if 0 < done < 6)


def test_the_command_line_names_the_commonest_failure(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from biasim.simulator.cli import app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    study = tmp_path / "s.yaml"
    options = json.dumps({"base_url": f"http://127.0.0.1:{port}/v1"})
    study.write_text(STUDY.format(probe=60, options=options))
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(tmp_path / "run")])
    assert "failed units: 6; commonest reason (6): connection refused" in result.stderr
