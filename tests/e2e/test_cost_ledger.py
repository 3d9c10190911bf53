"""The cost ledger and the spending cap, against a loopback server that reports token counts.

The stub bills nothing, but it reports usage as a provider does; each call's cost is that usage
times the price table's price, and a run's ledger (store, summary, manifest, report) adds them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.budget import COST_LIMIT_EXIT
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.pricing import PRICES
from tests.loopback_llm_server import (
    LoopbackLLMServer,
    _approx_tokens,
    _prompt_tokens,
    default_responder,
)

STUDY = """\
name: ledger
description: a priced model on a loopback server
roles:
  decider:
    backend: openai
    model: {model}
    max_tokens: 40
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


def _study(
    tmp_path: Path,
    server: LoopbackLLMServer,
    *,
    model: str = "gpt-4o-mini",
    agents: int = 4,
    concurrency: int = 4,
    extra: str = "",
) -> Path:
    path = tmp_path / "s.yaml"
    options = json.dumps({"base_url": server.openai_base_url})
    text = STUDY.format(model=model, options=options, agents=agents, concurrency=concurrency)
    path.write_text(text + extra, encoding="utf-8")
    return path


def _stub_usage(server: LoopbackLLMServer) -> tuple[int, int]:
    """Prompt and output tokens the stub reported, recomputed from the requests it saw."""
    prompt = output = 0
    for request in server.requests:
        body = request.body or {}
        prompt += _prompt_tokens(body.get("messages"))
        output += _approx_tokens(default_responder({**body, "protocol": "openai"}))
    return prompt, output


def test_the_ledger_is_the_stubs_token_counts_times_the_tables_prices(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        out = tmp_path / "run"
        outcome = execute(prepare(RunOptions(study=str(_study(tmp_path, server)), out=out)))
        prompt, output = _stub_usage(server)
    price = PRICES["gpt-4o-mini"]
    expected = (prompt * price.input + output * price.output) / 1e6
    assert outcome.status == "complete" and expected > 0
    assert outcome.summary["cost"]["total_usd"] == pytest.approx(expected, rel=1e-9)
    (row,) = outcome.summary["cost"]["by_role"]
    assert (row["role"], row["model"]) == ("decider", "gpt-4o-mini")
    assert row["usd"] == pytest.approx(expected, rel=1e-9)
    with sqlite3.connect(out / "calls.sqlite") as conn:
        per_call = [c for (c,) in conn.execute("SELECT cost_usd FROM calls")]
    assert len(per_call) == 8 and all(c > 0 for c in per_call)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cost"]["total_usd"] == pytest.approx(expected, rel=1e-9)
    assert manifest["roles"]["decider"]["price"]["input_per_mtok"] == price.input
    page = (out / "report.html").read_text()
    assert "Cost" in page and f"${expected:.4f}" in page


def test_a_study_price_overrides_the_table_and_an_unknown_model_costs_unknown(
    tmp_path: Path,
) -> None:
    with LoopbackLLMServer() as server:
        unknown = _study(tmp_path, server, model="house-model")
        outcome = execute(prepare(RunOptions(study=str(unknown), out=tmp_path / "a")))
        assert outcome.summary["cost"]["total_usd"] is None
        server.reset()
        priced = _study(
            tmp_path,
            server,
            model="house-model",
            extra="prices:\n  house-model: {input: 1000, output: 2000}\n",
        )
        outcome = execute(prepare(RunOptions(study=str(priced), out=tmp_path / "b")))
        prompt, output = _stub_usage(server)
    expected = (prompt * 1000 + output * 2000) / 1e6
    assert outcome.summary["cost"]["total_usd"] == pytest.approx(expected, rel=1e-9)


def test_a_cost_limit_on_a_model_without_a_price_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    with LoopbackLLMServer() as server:
        study = _study(tmp_path, server, model="house-model")
        with pytest.raises(InputError) as caught:
            prepare(RunOptions(study=str(study), out=tmp_path / "run", cost_limit=1.0))
        assert server.count == 0
    assert "roles.decider.model" in str(caught.value) and "prices:" in str(caught.value)
    assert not (tmp_path / "run").exists()


def test_the_cost_limit_stops_within_one_call_and_resume_with_a_higher_limit_finishes(
    tmp_path: Path,
) -> None:
    # Expensive enough that a few calls reach the limit: $0.1 per thousand tokens either way.
    prices = "prices:\n  house-model: {input: 100, output: 100}\n"
    limit = 0.03
    with LoopbackLLMServer() as server:
        study = _study(tmp_path, server, model="house-model", agents=10, extra=prices)
        out = tmp_path / "run"
        first = execute(prepare(RunOptions(study=str(study), out=out, cost_limit=limit)))
        spent = first.summary["cost"]["total_usd"]
        paid = server.count
        second = execute(prepare(RunOptions(resume=out, cost_limit=100.0)))
        seen = [json.dumps(r.body, sort_keys=True) for r in server.requests]
        body = max(len(json.dumps(r.body, ensure_ascii=False).encode()) for r in server.requests)
    # Each call reserves a token per byte of its messages and schema (the request body bounds
    # them), the chat template's few tokens and its 40 output tokens.
    one_call_bound = (body + 64 + 40) * 100 / 1e6
    assert first.status == "interrupted" and first.exit_code == COST_LIMIT_EXIT
    assert "cost limit" in first.message
    assert 0 < paid < 20 and spent <= limit and limit - spent < one_call_bound
    assert second.status == "complete" and len(second.results) == 20
    assert (second.results["status"] == "answered").all()
    assert len(seen) == 20 and len(set(seen)) == 20  # no request paid twice
    assert second.summary["cost"]["total_usd"] > limit
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["cost"]["limit_usd"] == 100.0


def test_a_prices_file_overrides_the_table_and_a_bad_one_is_an_input_error(
    tmp_path: Path,
) -> None:
    good = tmp_path / "prices.yaml"
    good.write_text("gpt-4o-mini: {input: 0, output: 0, batch_input: 0, batch_output: 0}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpt-4o-mini: 3\n")
    with LoopbackLLMServer() as server:
        study = str(_study(tmp_path, server))
        outcome = execute(prepare(RunOptions(study=study, out=tmp_path / "a", prices=good)))
        with pytest.raises(InputError) as caught:
            prepare(RunOptions(study=study, out=tmp_path / "b", prices=bad))
    assert outcome.summary["cost"]["total_usd"] == 0.0
    assert "--prices" in str(caught.value)


def test_the_command_line_exits_4_at_the_limit_and_says_how_to_continue(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from biasim.simulator.cli import app

    prices = "prices:\n  house-model: {input: 100, output: 100}\n"
    with LoopbackLLMServer() as server:
        study = _study(tmp_path, server, model="house-model", agents=10, extra=prices)
        out = tmp_path / "run"
        result = CliRunner().invoke(
            app, ["run", str(study), "--out", str(out), "--cost-limit", "0.03"]
        )
    assert result.exit_code == COST_LIMIT_EXIT, result.output
    text = " ".join(result.output.split())
    assert "run stopped: stopped at the cost limit" in text
    assert f"biasim run --resume {out} --cost-limit USD" in text
