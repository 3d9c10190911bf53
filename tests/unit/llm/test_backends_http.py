"""The HTTP backends (openai, ollama, langchain) against a real loopback server.

Real SDK code over real sockets: the loopback server speaks the OpenAI and Ollama protocols and
injects faults, so these tests pin down how every provider's failures are normalised, that SDK
retries are off (one HTTP request per attempt), and that keys never leak into identities or
error messages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from biasim.simulator.llm.errors import (
    BackendConfigError,
    BackendError,
    FatalBackendError,
    OverloadedError,
    TransientError,
)
from biasim.simulator.llm.http_common import is_local_url, public_url, retry_after_seconds
from biasim.simulator.llm.limits import AdaptiveLimiter
from biasim.simulator.llm.registry import Backend, create_backend
from biasim.simulator.llm.retry import RetryPolicy, call_with_retries
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from biasim.simulator.study.config import RoleConfig
from tests.loopback_llm_server import LOOPBACK_TEXT, Fault, LoopbackLLMServer

CHOICES = ["approve", "deny", "refer"]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": CHOICES},
        "rationale": {"type": "string", "maxLength": 40},
    },
    "required": ["decision", "rationale"],
    "additionalProperties": False,
}
# `openai` is the lean aiohttp transport, `openai-sdk` the same backend on the official SDK.
KINDS = ["openai", "openai-sdk", "ollama", "langchain-openai", "langchain-ollama"]
OPENAI_KINDS = ["openai", "openai-sdk"]
SECRET = "sk-secret-123"


def _request(schema: dict[str, Any] | None = SCHEMA) -> LLMRequest:
    return LLMRequest(
        messages=(
            {"role": "system", "content": "You decide loan applications."},
            {"role": "user", "content": "Applicant: Ana, 34. Decide."},
        ),
        temperature=0.25,
        top_p=0.9,
        max_tokens=64,
        seed=1234,
        json_schema=schema,
    )


def _role(kind: str, srv: LoopbackLLMServer, **options: Any) -> RoleConfig:
    if kind in OPENAI_KINDS:
        if kind == "openai-sdk":
            options = {"transport": "sdk", **options}
        return RoleConfig(
            backend="openai", model="m", options={"base_url": srv.openai_base_url, **options}
        )
    if kind == "ollama":
        return RoleConfig(backend="ollama", model="m", options={"host": srv.base_url, **options})
    if kind == "langchain-openai":
        return RoleConfig(
            backend="langchain",
            model="openai:m",
            options={"base_url": srv.openai_base_url, **options},
        )
    if kind == "langchain-ollama":
        return RoleConfig(
            backend="langchain", model="ollama:m", options={"base_url": srv.base_url, **options}
        )
    raise AssertionError(kind)


def _with_backend(role: RoleConfig, body: Callable[[Backend], Awaitable[Any]]) -> Any:
    """Build the backend inside the event loop, run ``body``, always close it."""

    async def main() -> Any:
        backend = create_backend(role)
        try:
            return await body(backend)
        finally:
            await backend.aclose()

    return asyncio.run(main())


def _generate(role: RoleConfig, request: LLMRequest | None = None) -> LLMResponse:
    return _with_backend(role, lambda backend: backend.generate(request or _request()))


def _generate_error(role: RoleConfig) -> BackendError:
    with pytest.raises(BackendError) as info:
        _generate(role)
    return info.value


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackLLMServer]:
    with LoopbackLLMServer() as srv:
        yield srv


@pytest.fixture
def srv(server: LoopbackLLMServer) -> Iterator[LoopbackLLMServer]:
    server.reset()
    yield server
    server.reset()


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's real settings must neither leak into nor change these tests.
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "OLLAMA_HOST",
        "OLLAMA_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------------------------
# Normal answers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_structured_answer_satisfies_schema(srv: LoopbackLLMServer, kind: str) -> None:
    response = _generate(_role(kind, srv))

    answer = json.loads(response.text)
    assert answer["decision"] in CHOICES
    assert isinstance(answer["rationale"], str)
    assert response.prompt_tokens > 0 and response.completion_tokens > 0
    assert srv.count == 1
    _assert_request_carries(kind, srv.requests[0].body or {})


def _assert_request_carries(kind: str, body: dict[str, Any]) -> None:
    """The schema and every sampling parameter reached the server in the protocol's own form."""
    assert body["model"] == "m"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    if "openai" in kind:
        assert body["temperature"] == 0.25 and body["top_p"] == 0.9 and body["seed"] == 1234
        # langchain-openai sends the newer name for the same limit.
        assert body.get("max_tokens", body.get("max_completion_tokens")) == 64
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
        }
    else:
        assert body["options"] == {
            "seed": 1234,
            "temperature": 0.25,
            "top_p": 0.9,
            "num_predict": 64,
        }
        assert body["format"] == SCHEMA


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_both_transports_send_the_same_body(srv: LoopbackLLMServer, endpoint: str) -> None:
    request = dataclasses.replace(
        _request(), endpoint=endpoint, presence_penalty=0.5, stop=("\n\n",)
    )
    for kind in OPENAI_KINDS:
        _generate(_role(kind, srv), request)
    lean, sdk = (r.body for r in srv.requests)
    assert lean == sdk
    assert srv.requests[0].path == srv.requests[1].path
    assert srv.requests[0].path.endswith("/completions")
    assert lean is not None and lean["presence_penalty"] == 0.5 and lean["stop"] == ["\n\n"]


@pytest.mark.parametrize("kind", KINDS)
def test_free_text_sends_no_format(srv: LoopbackLLMServer, kind: str) -> None:
    response = _generate(_role(kind, srv), _request(schema=None))

    assert response.text == LOOPBACK_TEXT
    body = srv.requests[0].body or {}
    assert "response_format" not in body
    assert not body.get("format")


@pytest.mark.parametrize("kind", KINDS)
def test_unparseable_answer_is_returned_not_raised(srv: LoopbackLLMServer, kind: str) -> None:
    # Validation belongs to the engine (it may re-ask); the backend hands the text back verbatim.
    srv.enqueue(Fault.bad_content("Sure! I approve."))
    assert _generate(_role(kind, srv)).text == "Sure! I approve."


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("openai", {"type": "json_object"}),
        ("openai-sdk", {"type": "json_object"}),
        ("langchain-openai", {"type": "json_object"}),
    ],
)
def test_openai_json_object_mode(srv: LoopbackLLMServer, kind: str, expected: Any) -> None:
    response = _generate(_role(kind, srv, structured="json_object"))

    assert json.loads(response.text) == {"answer": "loopback"}
    assert (srv.requests[0].body or {})["response_format"] == expected


@pytest.mark.parametrize("kind", ["ollama", "langchain-ollama"])
def test_ollama_json_object_mode(srv: LoopbackLLMServer, kind: str) -> None:
    response = _generate(_role(kind, srv, structured="json_object"))

    assert json.loads(response.text) == {"answer": "loopback"}
    assert (srv.requests[0].body or {})["format"] == "json"


@pytest.mark.parametrize("kind", KINDS)
def test_structured_none_leaves_structure_to_the_prompt(srv: LoopbackLLMServer, kind: str) -> None:
    assert _generate(_role(kind, srv, structured="none")).text == LOOPBACK_TEXT
    body = srv.requests[0].body or {}
    assert "response_format" not in body and not body.get("format")


def test_openai_answer_cut_at_max_tokens_is_returned(srv: LoopbackLLMServer) -> None:
    for kind in (*OPENAI_KINDS, "langchain-openai"):
        srv.reset()
        srv.enqueue(Fault.http_error(200, body=_completion('{"decision": "appr', "length")))
        response = _generate(_role(kind, srv))
        assert response.text == '{"decision": "appr'
        assert response.completion_tokens == 5


def _completion(content: str, finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "logprobs": None,
                "message": {"role": "assistant", "content": content, "refusal": None},
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
    }


# --------------------------------------------------------------------------------------------
# Fault mapping, calling generate directly
# --------------------------------------------------------------------------------------------

FAULTS = [
    pytest.param(Fault.http_error(500), TransientError, id="500"),
    pytest.param(Fault.http_error(502), TransientError, id="502"),
    pytest.param(Fault.http_error(503), OverloadedError, id="503"),
    pytest.param(Fault.rate_limited(2), OverloadedError, id="429"),
    pytest.param(Fault.connection_reset(), TransientError, id="reset"),
    pytest.param(Fault.truncated_body(), TransientError, id="truncated"),
    pytest.param(Fault.non_json_body(), TransientError, id="non-json"),
    pytest.param(Fault.http_error(400), FatalBackendError, id="400"),
    pytest.param(Fault.http_error(401), FatalBackendError, id="401"),
    pytest.param(Fault.http_error(404), FatalBackendError, id="404"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("fault", "expected"), FAULTS)
def test_fault_maps_to_error_class(
    srv: LoopbackLLMServer, kind: str, fault: Fault, expected: type[BackendError]
) -> None:
    srv.enqueue(fault)
    error = _generate_error(_role(kind, srv))

    assert type(error) is expected, f"{type(error).__name__}: {error}"
    assert error.retryable == (expected is not FatalBackendError)
    assert str(error)
    assert srv.count == 1  # one HTTP request: the SDK did not retry behind our back


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_carries_retry_after(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.rate_limited(2))
    error = _generate_error(_role(kind, srv))

    assert isinstance(error, OverloadedError) and error.overloaded
    assert error.retry_after == 2


@pytest.mark.parametrize("kind", KINDS)
def test_non_json_body_reason_is_clear(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.non_json_body())
    assert "malformed response body" in str(_generate_error(_role(kind, srv)))


@pytest.mark.parametrize("kind", [*OPENAI_KINDS, "ollama"])
def test_json_body_of_the_wrong_shape_is_transient(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.http_error(200, body={"unexpected": True}))
    error = _generate_error(_role(kind, srv))
    assert type(error) is TransientError and "malformed response body" in str(error)


@pytest.mark.parametrize("kind", [*OPENAI_KINDS, "langchain-openai"])
def test_connection_failures_name_what_the_socket_said(srv: LoopbackLLMServer, kind: str) -> None:
    # The SDK's aiohttp shim calls a reset a timeout; the recorded reason must say what it was.
    srv.enqueue(Fault.connection_reset())
    reset = _generate_error(_role(kind, srv))
    assert type(reset) is TransientError and "Connection reset by peer" in str(reset)
    assert "timed out" not in str(reset)
    refused = _generate_error(_role(kind, _DeadServer()))  # type: ignore[arg-type]
    assert type(refused) is TransientError and "Connection refused" in str(refused)


def _dead_url() -> str:
    """A loopback address nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


class _DeadServer:
    """Stands in for a server in `_role`: its URLs refuse connections."""

    def __init__(self) -> None:
        self.base_url = _dead_url()
        self.openai_base_url = f"{self.base_url}/v1"


def test_unreachable_server_is_transient(srv: LoopbackLLMServer) -> None:
    # A port nobody listens on: connection refused must be retryable, not fatal.
    dead = _dead_url()
    roles = [
        RoleConfig(backend="openai", model="m", options={"base_url": f"{dead}/v1"}),
        RoleConfig(
            backend="openai", model="m", options={"base_url": f"{dead}/v1", "transport": "sdk"}
        ),
        RoleConfig(backend="ollama", model="m", options={"host": dead}),
        RoleConfig(backend="langchain", model="openai:m", options={"base_url": f"{dead}/v1"}),
        RoleConfig(backend="langchain", model="ollama:m", options={"base_url": dead}),
    ]
    for role in roles:
        assert type(_generate_error(role)) is TransientError


# --------------------------------------------------------------------------------------------
# Through the retry layer
# --------------------------------------------------------------------------------------------


def _with_retries(role: RoleConfig, policy: RetryPolicy) -> tuple[LLMResponse, float]:
    async def body(backend: Backend) -> tuple[LLMResponse, float]:
        start = time.monotonic()
        response = await call_with_retries(backend.generate, _request(), policy, AdaptiveLimiter(4))
        return response, time.monotonic() - start

    return _with_backend(role, body)


@pytest.mark.parametrize("kind", KINDS)
def test_hang_is_cut_by_retry_layer_timeout(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.hang(5), Fault.hang(5))
    policy = RetryPolicy(max_attempts=2, timeout_s=0.3, base_delay_s=0.01)
    response, elapsed = _with_retries(_role(kind, srv), policy)

    assert response.status == "error"
    assert response.attempts == 2
    assert "timed out" in (response.error or "")
    assert elapsed < 2.0
    assert srv.wait_for_count(2, timeout=1.0)
    assert srv.count == 2


@pytest.mark.parametrize("kind", KINDS)
def test_500_then_success(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.http_error(500))
    policy = RetryPolicy(max_attempts=3, timeout_s=5.0, base_delay_s=0.01)
    response, _ = _with_retries(_role(kind, srv), policy)

    assert response.status == "answered"
    assert response.attempts == 2
    assert json.loads(response.text)["decision"] in CHOICES
    assert srv.count == 2


@pytest.mark.parametrize("kind", KINDS)
def test_retry_after_is_honoured(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.rate_limited(0.3))
    # The jittered backoff alone would wait at most 10 ms; only Retry-After explains 0.3 s.
    policy = RetryPolicy(max_attempts=3, timeout_s=5.0, base_delay_s=0.01)
    response, elapsed = _with_retries(_role(kind, srv), policy)

    assert response.status == "answered" and response.attempts == 2
    assert elapsed >= 0.3
    first, second = srv.requests
    assert second.received_at - first.received_at >= 0.3


@pytest.mark.parametrize("kind", KINDS)
def test_fatal_error_is_not_retried(srv: LoopbackLLMServer, kind: str) -> None:
    srv.enqueue(Fault.http_error(400))
    policy = RetryPolicy(max_attempts=4, timeout_s=5.0, base_delay_s=0.01)
    response, _ = _with_retries(_role(kind, srv), policy)

    assert response.status == "error" and response.attempts == 1
    assert srv.count == 1


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [*OPENAI_KINDS, "langchain-openai", "langchain-ollama"])
def test_key_is_sent_but_never_shown(
    srv: LoopbackLLMServer, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIASIM_TEST_KEY", SECRET)
    role = _role(kind, srv, api_key_env="BIASIM_TEST_KEY")

    async def body(backend: Backend) -> tuple[dict[str, Any], str]:
        await backend.generate(_request())
        # A server that quotes the key back (as some do on 401) must not leak it either.
        srv.enqueue(
            Fault.http_error(
                401,
                body={
                    "error": {
                        "message": f"Incorrect API key provided: {SECRET}",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                }
                if "openai" in kind
                else {"error": f"bad key {SECRET}"},
            )
        )
        with pytest.raises(FatalBackendError) as info:
            await backend.generate(_request())
        return backend.identity(), str(info.value)

    identity, message = _with_backend(role, body)

    assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(identity)
    assert SECRET not in message and "***" in message


@pytest.mark.parametrize("kind", OPENAI_KINDS)
def test_local_server_needs_no_key(srv: LoopbackLLMServer, kind: str) -> None:
    _generate(_role(kind, srv))
    assert srv.requests[0].headers["authorization"] == "Bearer not-needed"


@pytest.mark.parametrize(
    "role",
    [
        RoleConfig(backend="openai", model="gpt-4o-mini"),
        RoleConfig(
            backend="openai",
            model="gpt-4o-mini",
            options={"base_url": "https://api.example.com/v1"},
        ),
        RoleConfig(backend="openai", model="m", options={"api_key_env": "BIASIM_UNSET_KEY"}),
        RoleConfig(
            backend="openai",
            model="m",
            options={"base_url": ["http://127.0.0.1:8000/v1", "https://api.example.com/v1"]},
        ),
        RoleConfig(backend="langchain", model="openai:gpt-4o-mini"),
    ],
)
def test_hosted_endpoint_without_key_is_a_config_error(role: RoleConfig) -> None:
    with pytest.raises(BackendConfigError) as info:
        create_backend(role)
    assert info.value.field == "options.api_key_env"
    assert "is not set" in str(info.value)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "field"),
    [
        (RoleConfig(backend="openai", options={"base_url": "http://127.0.0.1:1/v1"}), "model"),
        (RoleConfig(backend="ollama"), "model"),
        (RoleConfig(backend="langchain"), "model"),
        (RoleConfig(backend="langchain", model="gpt-4o-mini"), "model"),
        (RoleConfig(backend="openai", model="m", options={"bogus": 1}), "options"),
        (RoleConfig(backend="ollama", model="m", options={"bogus": 1}), "options"),
        (RoleConfig(backend="langchain", model="ollama:m", options={"bogus": 1}), "options"),
        (
            RoleConfig(backend="openai", model="m", options={"structured": "xml"}),
            "options.structured",
        ),
        (
            RoleConfig(backend="openai", model="m", options={"transport": "httpx"}),
            "options.transport",
        ),
        (RoleConfig(backend="openai", model="m", options={"base_url": []}), "options.base_url"),
        (
            RoleConfig(backend="openai", model="m", options={"base_url": ["http://a/v1", 3]}),
            "options.base_url",
        ),
        (
            RoleConfig(
                backend="openai", model="m", options={"base_url": ["http://a/v1", "http://a/v1"]}
            ),
            "options.base_url",
        ),
        (
            RoleConfig(backend="ollama", model="m", options={"structured": "xml"}),
            "options.structured",
        ),
        (RoleConfig(backend="ollama", model="m", options={"host": ""}), "options.host"),
        (
            RoleConfig(
                backend="langchain", model="ollama:m", options={"kwargs": {"api_key": "sk-x"}}
            ),
            "options.kwargs.api_key",
        ),
        (
            RoleConfig(
                backend="langchain",
                model="openai:m",
                options={"kwargs": {"openai_api_key": "sk-x"}},
            ),
            "options.kwargs.openai_api_key",
        ),
        (
            RoleConfig(
                backend="langchain", model="ollama:m", options={"kwargs": {"temperature": 0}}
            ),
            "options.kwargs.temperature",
        ),
        (
            RoleConfig(
                backend="langchain", model="ollama:m", options={"kwargs": {"num_predict": 9}}
            ),
            "options.kwargs.num_predict",
        ),
        (RoleConfig(backend="langchain", model="nosuchprovider:m"), "model"),
    ],
)
def test_config_errors_name_the_field(role: RoleConfig, field: str) -> None:
    with pytest.raises(BackendConfigError) as info:
        create_backend(role)
    assert info.value.field == field


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_anthropic") is not None,
    reason="langchain-anthropic is installed",
)
def test_missing_langchain_provider_names_the_package() -> None:
    with pytest.raises(BackendConfigError) as info:
        create_backend(RoleConfig(backend="langchain", model="anthropic:claude-3-5-haiku"))
    assert info.value.field == "model"
    assert "pip install langchain-anthropic" in str(info.value)


def test_identity_and_concurrency(srv: LoopbackLLMServer) -> None:
    openai = {"backend": "openai", "model": "m", "base_url": srv.openai_base_url}
    expected = {
        # The transport does not change answers, so it stays out of the identity (and keys).
        "openai": ({**openai, "structured": "auto"}, 16),
        "openai-sdk": ({**openai, "structured": "auto"}, 16),
        "ollama": (
            {"backend": "ollama", "model": "m", "host": srv.base_url, "structured": "json_schema"},
            4,
        ),
        "langchain-openai": (
            {
                "backend": "langchain",
                "model": "openai:m",
                "provider": "openai",
                "base_url": srv.openai_base_url,
                "structured": "json_schema",
                "kwargs": {},
            },
            8,
        ),
        "langchain-ollama": (
            {
                "backend": "langchain",
                "model": "ollama:m",
                "provider": "ollama",
                "base_url": srv.base_url,
                "structured": "json_schema",
                "kwargs": {},
            },
            8,
        ),
    }
    for kind, (identity, concurrency) in expected.items():

        async def body(backend: Backend) -> tuple[dict[str, Any], int]:
            return backend.identity(), backend.default_concurrency

        assert _with_backend(_role(kind, srv), body) == (identity, concurrency)


def test_langchain_kwargs_reach_the_chat_model(srv: LoopbackLLMServer) -> None:
    role = _role("langchain-ollama", srv, kwargs={"keep_alive": "7m"})
    _generate(role)
    assert (srv.requests[0].body or {})["keep_alive"] == "7m"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"Retry-After": "2"}) == 2.0
    assert retry_after_seconds({"Retry-After": "0.25"}) == 0.25
    assert retry_after_seconds({"Retry-After": "-3"}) == 0.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_seconds({"Retry-After": future}) or 0) <= 31
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after_seconds({"Retry-After": past}) == 0.0


def test_local_url_and_public_url() -> None:
    for url in (
        "http://127.0.0.1:8000/v1",
        "http://localhost:11434",
        "http://[::1]:80",
        "http://10.1.2.3/v1",
        "http://vllm:8000/v1",
        "http://box.local",
    ):
        assert is_local_url(url), url
    for url in (
        None,
        "https://api.openai.com/v1",
        "https://api.example.com",
        "http://8.8.8.8/v1",
        "http://[2001:4860::1]/v1",
    ):
        assert not is_local_url(url), url
    assert public_url("http://user:pw@host:8080/v1/?token=x#f") == "http://host:8080/v1"


@pytest.mark.parametrize("kind", OPENAI_KINDS)
def test_openai_auto_mode_falls_back_to_json_mode_once_refused(
    srv: LoopbackLLMServer, kind: str
) -> None:
    refusal = {
        "error": {
            "message": "response_format type json_schema is not supported",
            "type": "invalid_request_error",
            "code": None,
        }
    }
    srv.enqueue(Fault.http_error(400, body=refusal))

    async def two_calls(backend: Backend) -> list[LLMResponse]:
        return [await backend.generate(_request(SCHEMA)) for _ in range(2)]

    first, second = _with_backend(_role(kind, srv), two_calls)
    formats = [r.body["response_format"] for r in srv.requests]
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert isinstance(json.loads(first.text), dict) and isinstance(json.loads(second.text), dict)
