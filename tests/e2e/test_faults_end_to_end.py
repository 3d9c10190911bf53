"""Whole runs through real SDKs over real loopback HTTP with injected faults.

Every test checks that each unit ends exactly once as answered, invalid (raw text kept) or error
(reason kept), and where something is left, that ``--resume`` finishes it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.loopback_llm_server import Fault, LoopbackLLMServer, default_responder, last_user_message

STUDY = """\
name: fault_study
description: fault isolation
seed: 3
roles:
  decider:
    backend: {backend}
    model: loopback-model
    temperature: 0.2
    max_tokens: 64
    max_concurrency: {concurrency}
    max_attempts: {attempts}
    backoff_s: 0.01
    max_backoff_s: 0.05
    timeout_s: {timeout}
{per_token}    options: {options}
personas:
  axes:
    gender: [male, female, non-binary]
  description: "a person whose gender identity is {{{{ gender }}}}"
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. A flood is coming. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
      rationale: {{type: string, max_length: 80}}
design:
  agents_per_value: {agents}
analyses:
  - {{stage: decide, field: decision, target: Evacuate, by: gender}}
"""


# The openai backend on its lean aiohttp transport and on the official SDK.
OPENAI = ["openai", "openai-sdk"]


@pytest.fixture
def server():
    with LoopbackLLMServer() as srv:
        yield srv


def study_file(
    tmp_path: Path,
    srv: LoopbackLLMServer,
    *,
    backend: str = "openai",
    agents: int = 10,
    attempts: int = 4,
    timeout: float = 5.0,
    concurrency: int = 8,
    per_token: float | None = 0.0,
) -> Path:
    if backend.startswith("openai"):
        options = {"base_url": srv.openai_base_url}
        if backend == "openai-sdk":  # the openai backend on the official SDK transport
            options["transport"] = "sdk"
    else:
        options = {"host": srv.base_url}
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            backend=backend.removesuffix("-sdk"),
            agents=agents,
            attempts=attempts,
            timeout=timeout,
            concurrency=concurrency,
            # 0: the timeout as written; None: the default for a server on this machine.
            per_token="" if per_token is None else f"    timeout_per_token_s: {per_token}\n",
            options=json.dumps(options),
        )
    )
    return path


def run(study: Path, out: Path, **kw):
    return execute(prepare(RunOptions(study=str(study), out=out, **kw)))


def calls_table(out: Path) -> pd.DataFrame:
    with sqlite3.connect(out / "calls.sqlite") as conn:
        return pd.read_sql_query("SELECT * FROM calls", conn)


def assert_each_unit_once(df: pd.DataFrame, units: int) -> None:
    assert len(df) == units and df["unit_id"].is_unique
    assert set(df["status"]) <= {"answered", "invalid", "error", "skipped"}
    assert df.loc[df["status"] == "invalid", "raw_text"].str.len().gt(0).all()
    assert df.loc[df["status"] == "error", "error"].str.len().gt(0).all()


@pytest.mark.parametrize("backend", [*OPENAI, "ollama"])
def test_transient_faults_are_retried_to_an_answer(tmp_path: Path, server, backend) -> None:
    faults = [
        Fault.http_error(500),
        Fault.rate_limited(0.05),
        Fault.connection_reset(),
        Fault.truncated_body(),
        Fault.non_json_body(),
        Fault.http_error(503),
    ]
    server.enqueue(*faults)
    outcome = run(study_file(tmp_path, server, backend=backend), tmp_path / "run")
    df = outcome.results
    assert_each_unit_once(df, 30)
    assert (df["status"] == "answered").all()
    assert df["attempts"].sum() == 30 + len(faults)  # each fault cost exactly one attempt
    assert server.count == 30 + len(faults)  # and the SDK did not retry behind our back
    assert outcome.summary["accounting"]["by_role"][0]["attempts"] == 30 + len(faults)


def test_invalid_output_gets_one_reask_then_is_kept_invalid(tmp_path: Path, server) -> None:
    def responder(request: dict) -> str:
        prompt = request["messages"][0]["content"]
        reasked = "did not follow the required format" in last_user_message(request["messages"])
        if "non-binary" in prompt:
            return '{"decision": "Maybe", "rationale": "unsure"}'  # never valid
        if "female" in prompt and not reasked:
            return "I would evacuate."  # invalid first, valid once re-asked
        return default_responder(request)

    server.responder = responder
    out = tmp_path / "run"
    df = run(study_file(tmp_path, server), out).results
    assert_each_unit_once(df, 30)
    by_gender = df.set_index("gender")
    assert (by_gender.loc["male", "status"] == "answered").all()
    assert (by_gender.loc["male", "reasks"] == 0).all()
    female = by_gender.loc["female"]
    assert (female["status"] == "answered").all() and (female["reasks"] == 1).all()
    nonbinary = by_gender.loc["non-binary"]
    assert (nonbinary["status"] == "invalid").all() and (nonbinary["reasks"] == 1).all()
    assert (nonbinary["raw_text"] == '{"decision": "Maybe", "rationale": "unsure"}').all()
    assert nonbinary["error"].str.contains("decision").all()
    calls = calls_table(out)
    assert len(calls) == 10 + 2 * 20  # one call per male unit, two for the others
    reasks = calls[calls["reask"] == 1]
    assert reasks["request"].str.contains("did not follow the required format").all()
    summary = json.loads((out / "summary.json").read_text())
    rates = {r["gender"]: r for r in summary["outcomes_by_group"]["gender"]}
    assert rates["non-binary"]["invalid_rate"] == 1.0 and rates["male"]["invalid_rate"] == 0.0


@pytest.mark.parametrize("backend", OPENAI)
def test_fatal_errors_mark_units_and_resume_finishes_them(tmp_path: Path, server, backend) -> None:
    server.fault_every(3, Fault.http_error(400))
    out = tmp_path / "run"
    first = run(study_file(tmp_path, server, backend=backend), out, max_error_rate=None).results
    assert_each_unit_once(first, 30)
    errors = first[first["status"] == "error"]
    assert len(errors) == 10 and errors["error"].str.contains("400").all()
    assert (errors["attempts"] == 1).all()  # a 400 is not retried
    server.reset()
    resumed = execute(prepare(RunOptions(resume=out)))
    assert_each_unit_once(resumed.results, 30)
    assert (resumed.results["status"] == "answered").all()
    assert resumed.summary["calls"]["new"] == 10  # only the failed units were asked again
    pd.testing.assert_series_equal(
        first.loc[first["status"] == "answered", "raw_text"],
        resumed.results.loc[first["status"] == "answered", "raw_text"],
    )


def test_error_rate_threshold_stops_cleanly_and_resume_completes(
    tmp_path: Path, server, cli
) -> None:
    study = study_file(tmp_path, server, attempts=2, concurrency=2)
    out = tmp_path / "run"
    server.enqueue(*[Fault.http_error(500)] * 60)
    result = cli.invoke(app, ["run", str(study), "--out", str(out), "--max-error-rate", "0.2"])
    assert result.exit_code == 3  # the calls failed (documented in `biasim run --help`)
    assert "run failed" in result.stderr and "--resume" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert (out / "results.parquet").exists() and (out / "calls.sqlite").exists()
    server.reset()
    result = cli.invoke(app, ["run", "--resume", str(out)])
    assert result.exit_code == 0, result.stderr
    df = pd.read_parquet(out / "results.parquet")
    assert_each_unit_once(df, 30)
    assert (df["status"] == "answered").all()
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_a_server_on_this_machine_gets_time_for_the_tokens_asked_for(
    tmp_path: Path, server
) -> None:
    """A loopback server slower than `timeout_s` is not cut off and asked again from scratch:
    its timeout grows by 0.5 s per requested token (64 here), so the slow call just finishes."""
    server.enqueue(Fault.hang(1.0))
    df = run(study_file(tmp_path, server, agents=2, timeout=0.3, per_token=None), tmp_path / "run")
    df = df.results
    assert_each_unit_once(df, 6)
    assert (df["status"] == "answered").all() and df["attempts"].sum() == 6
    assert df["latency_s"].max() >= 1.0


@pytest.mark.parametrize("backend", OPENAI)
def test_hang_past_the_timeout_is_retried(tmp_path: Path, server, backend) -> None:
    server.enqueue(Fault.hang(5), Fault.hang(5))
    study = study_file(tmp_path, server, backend=backend, agents=2, timeout=0.3)
    outcome = run(study, tmp_path / "run")
    df = outcome.results
    # The stage's own time: the analysis after it is slow on a loaded machine.
    assert outcome.summary["timings"]["stages_s"]["decide"] < 4  # the hangs last 5 s
    assert_each_unit_once(df, 6)
    assert (df["status"] == "answered").all() and df["attempts"].sum() == 8


@pytest.mark.parametrize("backend", OPENAI)
def test_rate_limits_shrink_concurrency_and_everything_is_answered(
    tmp_path: Path, server, backend
) -> None:
    server.enqueue(*[Fault.rate_limited(0.05)] * 16)
    prepared = prepare(
        RunOptions(
            study=str(study_file(tmp_path, server, backend=backend, concurrency=16, attempts=6)),
            out=tmp_path / "run",
        )
    )
    df = execute(prepared).results
    assert_each_unit_once(df, 30)
    assert (df["status"] == "answered").all()
    limiter = prepared.runtimes[("decider", "")].limiter
    assert limiter.shrinks >= 1 and limiter.limit < 16


def test_roles_mix_backends_and_keys_stay_out_of_every_artifact(
    tmp_path: Path, server, monkeypatch
) -> None:
    secret = "sk-biasim-test-secret-4242"
    monkeypatch.setenv("BIASIM_TEST_KEY", secret)
    study = tmp_path / "study.yaml"
    study.write_text(
        STUDY.format(
            backend="synthetic",
            agents=4,
            attempts=2,
            timeout=5,
            concurrency=4,
            per_token="",
            options="{}",
        ).replace("    model: loopback-model\n", "")
    )
    text = (
        study.read_text()
        .replace(
            "design:",
            "  - name: explain\n    role: explainer\n"
            "    prompt: 'You chose {{ outputs.decide.decision }}. Why?'\n"
            "design:",
        )
        .replace(
            "personas:",
            "  explainer:\n    backend: openai\n    model: loopback-model\n"
            f"    options: {{base_url: '{server.openai_base_url}', api_key_env: BIASIM_TEST_KEY}}\n"
            "personas:",
        )
    )
    study.write_text(text)
    out = tmp_path / "run"
    # The study names its own key variable: the user allows the host it goes to.
    df = run(study, out, allow_endpoints=("127.0.0.1",)).results
    assert_each_unit_once(df, 24)
    assert set(df.loc[df["stage"] == "decide", "backend"]) == {"synthetic"}
    assert set(df.loc[df["stage"] == "explain", "backend"]) == {"openai"}
    assert (df["status"] == "answered").all()
    # The key reached the server, as a bearer token ...
    assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in server.requests)
    # ... and nowhere else.
    for path in (p for p in out.rglob("*") if p.is_file()):
        assert secret.encode() not in path.read_bytes(), path.name


def test_a_stage_after_an_invalid_answer_is_skipped_not_called(tmp_path: Path, server) -> None:
    """An agent whose first answer is unusable has nothing for the next stage to build on: that
    unit is `skipped` (with the reason), makes no call, and is counted apart from errors."""

    def responder(request: dict) -> str:
        if "non-binary" in request["messages"][0]["content"]:
            return '{"decision": "Maybe", "rationale": "unsure"}'  # never valid
        return default_responder(request)

    server.responder = responder
    path = study_file(tmp_path, server, agents=4)
    path.write_text(
        path.read_text().replace(
            "design:",
            "  - name: explain\n"
            "    role: decider\n"
            '    prompt: "You chose {{ outputs.decide.decision }}. Evacuate or stay?"\n'
            "    output:\n"
            "      decision: {type: choice, choices: [Evacuate, Stay]}\n"
            "design:",
        )
    )
    out = tmp_path / "run"
    df = run(path, out).results
    explain = df[df["stage"] == "explain"].set_index("gender")
    assert (explain.loc["non-binary", "status"] == "skipped").all()
    assert explain.loc["non-binary", "error"].str.contains("stage `decide`").all()
    assert (explain.loc[["male", "female"], "status"] == "answered").all()
    calls = calls_table(out)
    assert (calls["stage"] == "explain").sum() == 8  # none for the skipped units
    summary = json.loads((out / "summary.json").read_text())
    rates = {r["gender"]: r for r in summary["outcomes_by_group"]["gender"]}
    assert rates["non-binary"]["skipped_rate"] == 0.5 and rates["non-binary"]["error_rate"] == 0
    assert rates["male"]["skipped_rate"] == 0
