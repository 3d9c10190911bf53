"""Batch mode end to end against loopback stubs of OpenAI's Batch API and Anthropic's Message
Batches: every unit answered once at the batch price, a request the batch could not answer sent
again live, and a run stopped by a real signal while its batch is pending resumed by polling the
same batch, so the stubs bill each request once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.pricing import PRICES
from tests.batch_stubs import AnthropicBatchStub, OpenAIBatchStub

KEY = "sk-batch-test-not-a-real-key"
AGENTS = 3  # per gender: 6 units
STUDY = """\
name: batched
description: decisions sent as batches
roles:
  decider:
    backend: {backend}
    model: {model}
    max_tokens: 40
    backoff_s: 0.01
    batch_poll_s: 0.02
    {batch}
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
PROVIDERS = {
    "openai": (OpenAIBatchStub, "gpt-4o-mini", "OPENAI_API_KEY", "gpt-4o-mini"),
    "anthropic": (
        AnthropicBatchStub,
        "claude-3-5-haiku-20241022",
        "ANTHROPIC_API_KEY",
        "claude-3-5-haiku",
    ),
}


def _study(tmp_path: Path, provider: str, stub, batch: bool = True) -> Path:
    _, model, _, _ = PROVIDERS[provider]
    path = tmp_path / "s.yaml"
    text = STUDY.format(
        backend=provider,
        model=model,
        batch="batch: true" if batch else "",
        options=json.dumps({"base_url": stub.base_url}),
        agents=AGENTS,
    )
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(PROVIDERS[request.param][2], KEY)
    return request.param


def _run(study: Path, out: Path, **options) -> object:
    return execute(
        prepare(RunOptions(study=str(study), out=out, allow_endpoints=("127.0.0.1",), **options))
    )


def _paid_once(stub) -> None:
    """Every request billed once, and every batch item sent in one batch only."""
    assert sum(stub.billed.values()) == 2 * AGENTS
    assert set(stub.items.values()) <= {1}
    if isinstance(stub, OpenAIBatchStub):  # its bodies carry the seed: one per call
        assert set(stub.billed.values()) == {1}


def test_a_batch_run_answers_every_unit_once_at_the_batch_price(
    tmp_path: Path, provider: str
) -> None:
    stub_class, _, _, price_key = PROVIDERS[provider]
    out = tmp_path / "run"
    with stub_class() as stub:
        study = _study(tmp_path, provider, stub)
        outcome = _run(study, out)
        sent = len(stub.headers)
        # The answers are the cache like any other: the same study again sends nothing.
        rerun = _run(study, tmp_path / "rerun", replay=out)
        assert rerun.status == "complete" and len(stub.headers) == sent
    results = outcome.results
    assert outcome.status == "complete" and len(results) == 2 * AGENTS
    assert (results["status"] == "answered").all() and results["unit_id"].is_unique
    assert len(stub.batches) == 1 and stub.live == 0 and len(stub.items) == 2 * AGENTS
    _paid_once(stub)
    price = PRICES[price_key]
    rows = outcome.summary["accounting"]["by_role"][0]
    batch_cost = (
        rows["prompt_tokens"] * price.batch_input + rows["completion_tokens"] * price.batch_output
    ) / 1e6
    assert rows["prompt_tokens"] > 0
    assert outcome.summary["cost"]["total_usd"] == pytest.approx(batch_cost)
    ledger = [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]
    assert [e["event"] for e in ledger] == ["submitted", "collected"]
    assert ledger[0]["batch_id"] == next(iter(stub.batches))
    # The key went only in the provider's own header, never into the run directory.
    sent = stub.headers[0]
    assert (sent.get("authorization") == f"Bearer {KEY}") or (sent.get("x-api-key") == KEY)
    for path in out.iterdir():
        if path.suffix in (".json", ".jsonl", ".csv", ".html"):
            assert KEY not in path.read_text(), path.name


@pytest.mark.parametrize("failure", ["errored", "expired"])
def test_requests_a_batch_did_not_answer_are_sent_live_once(
    tmp_path: Path, provider: str, failure: str
) -> None:
    stub_class = PROVIDERS[provider][0]
    with stub_class() as stub:
        if failure == "errored":
            stub.errored = 2
        else:
            stub.expire = True
        outcome = _run(_study(tmp_path, provider, stub), tmp_path / "run")
    results = outcome.results
    assert outcome.status == "complete" and (results["status"] == "answered").all()
    not_answered = 2 if failure == "errored" else AGENTS  # expiry: the second half
    assert len(stub.batches) == 1 and stub.live == not_answered
    _paid_once(stub)


def test_a_batch_the_provider_no_longer_shows_is_sent_live(tmp_path: Path, provider: str) -> None:
    with PROVIDERS[provider][0]() as stub:
        stub.forget = True
        outcome = _run(_study(tmp_path, provider, stub), tmp_path / "run")
    assert outcome.status == "complete" and (outcome.results["status"] == "answered").all()
    assert len(stub.batches) == 1 and stub.live == 2 * AGENTS and not stub.items


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_run_stopped_while_its_batch_is_pending_resumes_the_same_batch(
    tmp_path: Path, provider: str, signum: int
) -> None:
    stub_class = PROVIDERS[provider][0]
    out = tmp_path / "run"
    cli = [sys.executable, "-m", "biasim", "run"]
    with stub_class() as stub:
        stub.hold = True
        study = _study(tmp_path, provider, stub)
        proc = subprocess.Popen(
            [*cli, str(study), "--out", str(out), "--allow-endpoint", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=os.environ.copy(),
        )
        deadline = time.monotonic() + 60
        while stub.polls < 2:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "interrupted" and not stub.billed
        stub.hold = False
        done = subprocess.run(
            [*cli, "--resume", str(out), "--allow-endpoint", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 2 * AGENTS and (results["status"] == "answered").all()
    assert len(stub.batches) == 1 and stub.live == 0
    _paid_once(stub)


def test_batch_on_a_backend_without_a_batch_api_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    study = tmp_path / "s.yaml"
    with OpenAIBatchStub() as stub:
        study = _study(tmp_path, "openai", stub, batch=False)
    with pytest.raises(InputError) as caught:
        prepare(RunOptions(study=str(study), out=tmp_path / "run", backend="synthetic", batch=True))
    assert "batch" in str(caught.value) and "no batch API" in str(caught.value)
    assert "--batch" in str(caught.value)  # the option that set it is named


def test_validate_refuses_batch_where_it_cannot_work_naming_the_line(tmp_path: Path) -> None:
    from biasim.simulator.study.load import load_study

    with OpenAIBatchStub() as stub:
        study = _study(tmp_path, "openai", stub)
    study.write_text(
        study.read_text().replace("options: {", "endpoint: completions\n    options: {"),
        encoding="utf-8",
    )
    with pytest.raises(InputError) as caught:
        load_study(str(study))
    message = str(caught.value)
    assert "s.yaml:" in message and "roles.decider.batch" in message
    assert "endpoint: completions" in message


def test_the_batch_option_sends_a_study_without_batch_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIBatchStub() as stub:
        outcome = _run(_study(tmp_path, "openai", stub, batch=False), tmp_path / "run", batch=True)
    assert outcome.status == "complete" and len(stub.batches) == 1 and stub.live == 0


class _ElsewhereResults(AnthropicBatchStub):
    """Points each ended batch's ``results_url`` at another host (where the key would go)."""

    def _public(self, batch_id: str) -> dict:
        public = super()._public(batch_id)
        if public["results_url"]:
            public["results_url"] = f"http://elsewhere.invalid:9/v1/messages/batches/{batch_id}"
        return public


def test_a_results_url_on_another_host_stops_the_run_with_a_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    from biasim.simulator.cli import app

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    out = tmp_path / "run"
    with _ElsewhereResults() as stub:
        study = _study(tmp_path, "anthropic", stub)
        result = cli.invoke(
            app, ["run", str(study), "--out", str(out), "--allow-endpoint", "127.0.0.1"]
        )
    assert result.exit_code == 3, (result.output, result.exception)
    message = " ".join(result.output.split())
    assert "results_url points to another server (elsewhere.invalid)" in message, message
    assert "stays recorded in batches.jsonl" in message and "Traceback" not in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "traceback" not in summary
    assert stub.live == 0  # the batch is billed: its calls were not sent again live
