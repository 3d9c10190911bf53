"""The anthropic backend against a loopback stub of the Messages API: key header, structured
answers by tool use, retries, the allow-list and the cost ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biasim.registry import BACKENDS
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.anthropic_backend import ANTHROPIC_KEY_ENV
from biasim.simulator.llm.pricing import PRICES
from tests.anthropic_stub import AnthropicStub

KEY = "sk-ant-test-not-a-real-key"
STUDY = """\
name: claude_decisions
description: decisions on a Claude model
roles:
  decider:
    backend: anthropic
    model: claude-3-5-haiku-20241022
    max_tokens: 64
    backoff_s: 0.01
    options: {options}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    system: "You decide for a person in a flood."
    prompt: "You are {{{{ persona.description }}}}. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: 2
"""


def _study(tmp_path: Path, options: dict[str, str]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.format(options=json.dumps(options)), encoding="utf-8")
    return path


def test_the_backend_is_registered() -> None:
    assert "anthropic" in BACKENDS.names()


def test_a_run_answers_by_tool_use_with_the_key_in_its_header_and_costs_the_tables_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, KEY)
    with AnthropicStub() as stub:
        study = _study(tmp_path, {"base_url": stub.base_url})
        out = tmp_path / "run"
        options = RunOptions(study=str(study), out=out, allow_endpoints=("127.0.0.1",))
        outcome = execute(prepare(options))
    assert outcome.status == "complete" and (outcome.results["status"] == "answered").all()
    assert set(outcome.results["decision"]) <= {"Evacuate", "Stay"}
    first = stub.requests[0]
    headers = {k.lower(): v for k, v in first["headers"].items()}
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    body = first["body"]
    assert body["system"] == "You decide for a person in a flood."
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["tool_choice"] == {"type": "tool", "name": "answer"}
    assert body["tools"][0]["input_schema"]["properties"]["decision"]["enum"]
    price = PRICES["claude-3-5-haiku"]
    rows = outcome.summary["accounting"]["by_role"][0]
    billed = (rows["prompt_tokens"] * price.input + rows["completion_tokens"] * price.output) / 1e6
    assert rows["prompt_tokens"] > 0 and outcome.summary["cost"]["total_usd"] == pytest.approx(
        billed
    )
    for name in ("manifest.json", "summary.json", "results.csv", "report.html"):
        assert KEY not in (out / name).read_text()


def test_overloaded_and_rate_limited_answers_are_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, KEY)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with AnthropicStub() as stub:
        stub.faults += [(529, {}, error), (429, {"retry-after": "0"}, error)]
        study = _study(tmp_path, {"base_url": stub.base_url})
        options = RunOptions(study=str(study), out=tmp_path / "run", allow_endpoints=("127.0.0.1",))
        outcome = execute(prepare(options))
        sent = len(stub.requests)
    assert (outcome.results["status"] == "answered").all()
    assert sent == 4 + 2 and int(outcome.results["attempts"].sum()) == 6


def test_without_a_key_the_hosted_api_is_an_input_error_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ANTHROPIC_KEY_ENV, raising=False)
    with pytest.raises(InputError) as caught:
        prepare(RunOptions(study=str(_study(tmp_path, {})), out=tmp_path / "run"))
    assert ANTHROPIC_KEY_ENV in str(caught.value) and "api_key_env" in str(caught.value)


def test_the_key_goes_to_another_host_only_when_the_user_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, KEY)
    study = _study(tmp_path, {"base_url": "https://proxy.example.org"})
    with pytest.raises(InputError) as caught:
        prepare(RunOptions(study=str(study), out=tmp_path / "run"))
    assert "proxy.example.org" in str(caught.value) and "--allow-endpoint" in str(caught.value)
