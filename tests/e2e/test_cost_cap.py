"""The spending cap is a hard bound: replayed against loopback servers that bill every request
the most it could legitimately cost, no run's bill ends above its ``--cost-limit``.

A byte-level BPE token covers at least one UTF-8 byte, so the worst a provider can bill for a
prompt is a token per byte of what the model reads (plus its chat template: OpenAI's 4 tokens a
message and 3 a call; Anthropic's tool-use system prompt, at most 530 tokens on its price list,
and the tool definition), and for the answer ``max_tokens``. The servers here report exactly
that, computed from the request bodies they received, so the bill is independent of how biasim
bounds it. Every request a server receives counts, failed attempts included (a provider may
bill a request it answered with a 500).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.budget import COST_LIMIT_EXIT
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.anthropic_backend import ANTHROPIC_KEY_ENV
from tests.anthropic_stub import AnthropicStub
from tests.loopback_llm_server import Fault, LoopbackLLMServer

#: USD per million tokens, either way: a few calls reach a limit of a dollar.
PRICE = 100.0
#: The most prompt tokens Anthropic's tool-use pricing lists for its own system prompt.
TOOL_USE_SYSTEM = 530

SCRIPTS = {
    "ascii": "The applicant has ten years of experience in logistics and supply chains. ",
    "cjk": "申请人在物流和供应链方面有十年的工作经验，并且领导过一个大型团队。",
    "emoji": "👩🏽‍💻🚀📦🧑‍🤝‍🧑🌏✅❗",
    "mixed": "Заявитель 申请人 المتقدم 👩🏽‍💻 e\u0301te\u0301 ",
}

STUDY = """\
name: cap
description: the cost cap against worst-case billing
roles:
  decider:
    backend: {backend}
    model: house-model
    max_tokens: {max_tokens}
    max_concurrency: {concurrency}
    max_attempts: {max_attempts}
    backoff_s: 0.01
    options: {options}
prices:
  house-model: {{input: {price}, output: {price}}}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    system: {system}
    prompt: {prompt}
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: {agents}
"""


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def openai_worst_prompt(body: dict[str, Any]) -> int:
    """A token per byte of every message and of the answer's schema, plus OpenAI's template."""
    tokens = sum(_bytes(m.get("content") or "") + 4 for m in body["messages"]) + 3
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    return tokens + (_bytes(_compact(schema)) if schema is not None else 0)


def anthropic_worst_prompt(body: dict[str, Any]) -> int:
    """A token per byte of the messages, the system prompt and the tool; the tool-use prompt."""
    tokens = sum(_bytes(m["content"]) + 4 for m in body["messages"])
    tokens += _bytes(body.get("system", ""))
    tools = body.get("tools")
    return tokens + (TOOL_USE_SYSTEM + _bytes(_compact(tools)) if tools else 0)


class WorstCaseOpenAI(LoopbackLLMServer):
    """Reports the most a request could be billed: its worst prompt and ``max_tokens`` of
    output (times ``over``: above 1, more than was possible)."""

    over = 1

    def _openai_usage(self, body: Any, content: str) -> dict[str, int]:
        prompt = openai_worst_prompt(body)
        completion = int(body["max_tokens"]) * self.over
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0}


class WorstCaseAnthropic(AnthropicStub):
    """The Messages API stub, billing each request its worst prompt and ``max_tokens``."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        message = super().answer(body)
        message["usage"] = {
            "input_tokens": anthropic_worst_prompt(body),
            "output_tokens": int(body["max_tokens"]),
        }
        return message


@dataclass(frozen=True)
class Scenario:
    """One replay: what is asked, of which server, how concurrently, under which limit."""

    script: str
    backend: str = "openai"
    concurrency: int = 4
    agents: int = 10
    max_tokens: int = 64
    limit: float = 0.5
    over: int = 1
    fault_every: int = 0
    latency_ms: float = 0.0
    repeat: int = 4
    max_attempts: int = 5


@dataclass(frozen=True)
class Replay:
    """What a replay left: the outcome, the worst bill of every request sent, what the server
    reported for the requests it answered, and how many it received."""

    outcome: Any
    worst: float
    reported: float
    requests: int


@contextmanager
def _server(scenario: Scenario) -> Iterator[tuple[Any, str, list[tuple[dict[str, Any], bool]]]]:
    """The scenario's server, its base URL and a view of (body, answered) per request."""
    if scenario.backend == "anthropic":
        with WorstCaseAnthropic() as stub:
            yield stub, stub.base_url, _AnthropicLog(stub)  # type: ignore[misc]
        return
    server = WorstCaseOpenAI(latency_ms=scenario.latency_ms)
    server.over = scenario.over
    if scenario.fault_every:
        server.fault_every(scenario.fault_every, Fault.http_error(500))
    with server:
        yield server, server.openai_base_url, _OpenAILog(server)  # type: ignore[misc]


class _OpenAILog:
    def __init__(self, server: LoopbackLLMServer) -> None:
        self.server = server

    def __iter__(self) -> Iterator[tuple[dict[str, Any], bool]]:
        return iter([(r.body or {}, r.fault is None) for r in self.server.requests])


class _AnthropicLog:
    def __init__(self, stub: AnthropicStub) -> None:
        self.stub = stub

    def __iter__(self) -> Iterator[tuple[dict[str, Any], bool]]:
        return iter([(r["body"], True) for r in self.stub.requests])


def _write_study(tmp_path: Path, scenario: Scenario, url: str, text: str, prompt: str) -> Path:
    study = tmp_path / "s.yaml"
    study.write_text(
        STUDY.format(
            backend=scenario.backend,
            max_tokens=scenario.max_tokens,
            concurrency=scenario.concurrency,
            options=json.dumps({"base_url": url}),
            price=PRICE,
            system=json.dumps(text[:40], ensure_ascii=False),
            prompt=json.dumps(prompt, ensure_ascii=False),
            agents=scenario.agents,
            max_attempts=scenario.max_attempts,
        ),
        encoding="utf-8",
    )
    return study


def replay(tmp_path: Path, scenario: Scenario) -> Replay:
    """Run the scenario's study under its limit and tally what its server could bill."""
    text = SCRIPTS.get(scenario.script, scenario.script) * scenario.repeat
    prompt = text + " You are {{ persona.description }}. Evacuate or stay?"
    worst_prompt = anthropic_worst_prompt if scenario.backend == "anthropic" else None
    with _server(scenario) as (_, url, log):
        study = _write_study(tmp_path, scenario, url, text, prompt)
        options = RunOptions(
            study=str(study),
            out=tmp_path / "run",
            cost_limit=scenario.limit,
            allow_endpoints=("127.0.0.1",),
        )
        outcome = execute(prepare(options))
        sent = list(log)
    worst = reported = 0.0
    for body, answered in sent:
        tokens = (worst_prompt or openai_worst_prompt)(body)
        cost = (tokens + int(body["max_tokens"])) * PRICE / 1e6
        worst += cost
        if answered:
            reported += (tokens + int(body["max_tokens"]) * scenario.over) * PRICE / 1e6
    return Replay(outcome, worst, reported, len(sent))


@pytest.fixture(autouse=True)
def _anthropic_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, "sk-ant-test-not-a-real-key")


def _one_call(scenario: Scenario) -> float:
    """About the most one of the scenario's calls can cost (for 'the cap is not idle')."""
    text = SCRIPTS.get(scenario.script, scenario.script) * scenario.repeat
    tool = TOOL_USE_SYSTEM + 400 if scenario.backend == "anthropic" else 400
    return (2 * _bytes(text) + tool + scenario.max_tokens) * PRICE / 1e6


HELD = {
    "ascii": Scenario("ascii"),
    "cjk": Scenario("cjk"),
    "emoji": Scenario("emoji"),
    "mixed scripts": Scenario("mixed"),
    "anthropic tool use at concurrency 8": Scenario("mixed", "anthropic", concurrency=8),
    "concurrency 16 with latency": Scenario(
        "cjk", concurrency=16, agents=20, latency_ms=30, limit=1.0
    ),
    "retries after 500s": Scenario("emoji", fault_every=3, concurrency=6),
}


@pytest.mark.parametrize("name", list(HELD))
def test_the_bill_ends_at_or_below_the_limit_and_the_ledger_is_what_was_billed(
    tmp_path: Path, name: str
) -> None:
    scenario = HELD[name]
    run = replay(tmp_path, scenario)
    outcome = run.outcome
    ledger = outcome.summary["cost"]["total_usd"]
    assert outcome.status == "interrupted" and outcome.exit_code == COST_LIMIT_EXIT
    assert "cost limit" in outcome.message
    assert run.worst <= scenario.limit, (name, run.worst)
    assert ledger == pytest.approx(run.reported, rel=1e-9) and ledger <= scenario.limit
    # Not an idle cap: it stopped within about two calls of its limit.
    assert run.requests > 0 and ledger >= scenario.limit - 2 * _one_call(scenario)


def test_a_server_reporting_more_output_than_max_tokens_stops_the_run_as_an_anomaly(
    tmp_path: Path,
) -> None:
    scenario = Scenario("ascii", concurrency=1, over=1000, limit=0.5)
    run = replay(tmp_path, scenario)
    outcome = run.outcome
    ledger = outcome.summary["cost"]["total_usd"]
    assert run.requests == 1 and run.reported > 10 * scenario.limit  # what it claimed
    assert outcome.status == "interrupted" and outcome.exit_code == COST_LIMIT_EXIT
    assert "usage anomaly" in outcome.message and "64000 output tokens" in outcome.message
    # The answer is kept, counted at the most it could cost.
    assert len(outcome.results) == 1 and (outcome.results["status"] == "answered").all()
    assert ledger == pytest.approx(run.worst, rel=0.2) and ledger <= scenario.limit


def _random_text(rng: random.Random) -> str:
    pools = [
        (0x20, 0x7E),  # ASCII
        (0x4E00, 0x9FFF),  # CJK
        (0x1F300, 0x1F64F),  # emoji
        (0x0400, 0x04FF),  # Cyrillic
        (0x0600, 0x06FF),  # Arabic
        (0x0300, 0x036F),  # combining marks
    ]
    chosen = rng.sample(pools, rng.randint(1, 3))
    chars = []
    for _ in range(rng.randint(10, 300)):
        low, high = rng.choice(chosen)
        chars.append(chr(rng.randint(low, high)))
    # Braces, quotes and backslashes are template or YAML syntax, not script.
    return "".join(c for c in chars if c not in '{}"\\%#')


@pytest.mark.parametrize("seed", range(8))
def test_random_prompts_scripts_and_concurrency_never_pass_the_limit(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    scenario = Scenario(
        _random_text(rng),
        backend=rng.choice(["openai", "anthropic"]),
        concurrency=rng.randint(1, 16),
        agents=rng.randint(3, 12),
        max_tokens=rng.randint(16, 200),
        limit=round(rng.uniform(0.1, 1.5), 3),
        fault_every=rng.choice([0, 0, 2, 3]),  # the OpenAI server's 500s (Anthropic's: none)
        repeat=1,
    )
    run = replay(tmp_path, scenario)
    ledger = run.outcome.summary["cost"]["total_usd"]
    assert run.worst <= scenario.limit, (seed, scenario, run.worst)
    assert ledger <= scenario.limit
    assert run.outcome.status == "complete" or run.outcome.exit_code == COST_LIMIT_EXIT


def test_a_last_attempt_that_may_have_been_billed_counts_against_the_limit(
    tmp_path: Path,
) -> None:
    """With one attempt a call, every other request answered with a 500 (billed by the
    server): no retry follows, and the failed attempt still counts at its bound."""
    scenario = Scenario("ascii", fault_every=2, concurrency=4, max_attempts=1, agents=20)
    run = replay(tmp_path, scenario)
    assert run.outcome.exit_code == COST_LIMIT_EXIT, run.outcome.message
    assert run.worst <= scenario.limit, run.worst
    assert run.outcome.summary["cost"]["unconfirmed_usd"] > 0


def test_attempts_that_may_have_been_billed_still_count_after_a_resume(tmp_path: Path) -> None:
    scenario = Scenario("cjk", fault_every=2, concurrency=2)
    text = SCRIPTS["cjk"] * scenario.repeat
    server = WorstCaseOpenAI()
    server.fault_every(2, Fault.http_error(500))
    with server:
        study = _write_study(tmp_path, scenario, server.openai_base_url, text, text)
        out = tmp_path / "run"
        run = RunOptions(study=str(study), out=out, cost_limit=scenario.limit)
        first = execute(prepare(run))
        before = server.count
        one = max(
            (openai_worst_prompt(r.body or {}) + scenario.max_tokens) * PRICE / 1e6
            for r in server.requests
        )
        cost = json.loads((out / "manifest.json").read_text())["cost"]
        limit = cost["total_usd"] + cost["unconfirmed_usd"] + one / 2
        second = execute(prepare(RunOptions(resume=out, cost_limit=limit)))
        after = server.count
    assert first.exit_code == COST_LIMIT_EXIT and cost["unconfirmed_usd"] >= one
    assert first.summary["cost"]["unconfirmed_usd"] == cost["unconfirmed_usd"]
    assert "may have been billed" in first.message
    # Room for half a call beside what was counted: nothing more is sent.
    assert second.exit_code == COST_LIMIT_EXIT and after == before


def test_a_cost_limit_on_a_priced_role_without_max_tokens_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    study = tmp_path / "s.yaml"
    with WorstCaseOpenAI() as server:
        study.write_text(
            STUDY.format(
                backend="openai",
                max_tokens="null",
                concurrency=1,
                options=json.dumps({"base_url": server.openai_base_url}),
                price=PRICE,
                system='"decide"',
                prompt='"Evacuate or stay?"',
                agents=1,
                max_attempts=1,
            ),
            encoding="utf-8",
        )
        options = RunOptions(study=str(study), out=tmp_path / "run", cost_limit=1.0)
        with pytest.raises(InputError) as caught:
            prepare(options)
        assert server.count == 0
    assert "roles.decider.max_tokens" in str(caught.value) and "cost_limit" in str(caught.value)
    assert not (tmp_path / "run").exists()
    # Without a limit the same study is fine: no output bound is needed.
    prepare(RunOptions(study=str(study), out=tmp_path / "free"))
