"""Tests for the loopback LLM server, using only standard-library HTTP clients."""

from __future__ import annotations

import gc
import http.client
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.loopback_llm_server import (
    LOOPBACK_TEXT,
    Fault,
    FaultKind,
    LoopbackLLMServer,
    build_from_schema,
    stable_hash,
)
from tests.paths import ROOT

SERVER_SCRIPT = ROOT / "tests" / "loopback_llm_server.py"

DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["A", "B", "C"]},
        "reason": {"type": "string", "maxLength": 5},
        "score": {"type": "integer", "minimum": 1, "maximum": 10},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["decision", "reason", "score", "ok", "tags"],
    "additionalProperties": False,
}


@pytest.fixture
def server() -> Iterator[LoopbackLLMServer]:
    """A running server with default settings."""
    with LoopbackLLMServer() as srv:
        yield srv


def openai_body(user: str = "Pick one.", seed: int | None = 7, **extra: Any) -> dict[str, Any]:
    """An OpenAI chat request body."""
    body: dict[str, Any] = {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are a judge."},
            {"role": "user", "content": user},
        ],
        "temperature": 0,
        **extra,
    }
    if seed is not None:
        body["seed"] = seed
    return body


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``response_format`` asking for ``schema``."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": schema, "strict": True},
    }


def post(
    srv: LoopbackLLMServer,
    path: str,
    payload: Any,
    *,
    timeout: float = 5.0,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """POST JSON; returns (status, lower-cased headers, body)."""
    own = conn is None
    connection = conn or http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        connection.request(
            "POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, response.read()
    finally:
        if own:
            connection.close()


def get(srv: LoopbackLLMServer, path: str) -> tuple[int, Any]:
    """GET; returns (status, parsed JSON body)."""
    connection = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def content_of(raw: bytes) -> str:
    """Assistant content of a raw chat.completion body."""
    content: str = json.loads(raw)["choices"][0]["message"]["content"]
    return content


# ---- normal answers --------------------------------------------------------------------------


def test_openai_answer_conforms_to_enum_schema(server: LoopbackLLMServer) -> None:
    """A json_schema request gets a conforming object with the hashed enum pick."""
    body = openai_body(
        "Is X better than Y?", seed=7, response_format=schema_format(DECISION_SCHEMA)
    )
    status, headers, raw = post(server, "/v1/chat/completions", body)

    assert status == 200
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(raw)
    completion = json.loads(raw)
    assert completion["object"] == "chat.completion"
    assert completion["id"].startswith("chatcmpl-")
    assert completion["model"] == "gpt-test"
    assert isinstance(completion["created"], int)
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["choices"][0]["message"]["role"] == "assistant"
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0

    answer = json.loads(completion["choices"][0]["message"]["content"])
    assert list(answer) == ["decision", "reason", "score", "ok", "tags"]
    expected = ["A", "B", "C"][stable_hash("Is X better than Y?", 7) % 3]
    assert answer == {"decision": expected, "reason": "loopb", "score": 1, "ok": True, "tags": []}


def test_enum_choice_depends_on_prompt_and_seed(server: LoopbackLLMServer) -> None:
    """The enum pick varies with the seed but is stable for equal requests."""
    fmt = schema_format(DECISION_SCHEMA)
    picks = {
        json.loads(
            content_of(
                post(server, "/chat/completions", openai_body(seed=s, response_format=fmt))[2]
            )
        )["decision"]
        for s in range(12)
    }
    assert len(picks) > 1  # the seed really feeds the hash
    again = [
        content_of(
            post(server, "/v1/chat/completions", openai_body(seed=3, response_format=fmt))[2]
        )
        for _ in range(2)
    ]
    assert again[0] == again[1]  # and the answer is deterministic


def test_json_mode_and_plain_text(server: LoopbackLLMServer) -> None:
    """json_object mode and no format at all have fixed answers."""
    raw = post(
        server, "/v1/chat/completions", openai_body(response_format={"type": "json_object"})
    )[2]
    assert json.loads(content_of(raw)) == {"answer": "loopback"}
    assert content_of(post(server, "/v1/chat/completions", openai_body())[2]) == LOOPBACK_TEXT


def test_schema_builder_handles_pydantic_style_schemas() -> None:
    """$ref/$defs, anyOf-null, allOf, const, type lists and minItems."""
    schema = {
        "$defs": {
            "Decision": {"enum": ["yes", "no"], "type": "string"},
            "Inner": {
                "type": "object",
                "properties": {"when": {"type": "string", "format": "date-time"}},
            },
        },
        "type": "object",
        "properties": {
            "decision": {"$ref": "#/$defs/Decision"},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 20}]},
            "inner": {"allOf": [{"$ref": "#/$defs/Inner"}]},
            "kind": {"const": "fixed"},
            "ratio": {"type": ["number", "null"], "exclusiveMinimum": 0.5},
            "items": {"type": "array", "minItems": 2, "items": {"type": "integer"}},
        },
    }
    value = build_from_schema(schema, h=1)
    assert value == {
        "decision": "no",
        "note": LOOPBACK_TEXT + "xxxxx",
        "inner": {"when": "2026-01-01T00:00:00Z"},
        "kind": "fixed",
        "ratio": 1.5,
        "items": [0, 0],
    }


def test_custom_responder_gets_body_and_protocol() -> None:
    """A plugged-in responder sees the body plus protocol and sets the content."""
    seen: list[dict[str, Any]] = []

    def responder(request: dict[str, Any]) -> str:
        seen.append(request)
        return f"custom:{request['protocol']}"

    with LoopbackLLMServer(responder=responder) as srv:
        assert content_of(post(srv, "/v1/chat/completions", openai_body())[2]) == "custom:openai"
        raw = post(srv, "/api/chat", {"model": "m", "messages": [], "stream": False})[2]
        assert json.loads(raw)["message"]["content"] == "custom:ollama"
    assert [r["protocol"] for r in seen] == ["openai", "ollama"]
    assert seen[0]["seed"] == 7


def test_listing_endpoints() -> None:
    """Model listing and version endpoints, and 404 for unknown paths."""
    with LoopbackLLMServer(model="judge-1") as srv:
        assert get(srv, "/v1/models") == (
            200,
            {
                "object": "list",
                "data": [
                    {"id": "judge-1", "object": "model", "created": 0, "owned_by": "loopback"}
                ],
            },
        )
        assert get(srv, "/api/tags") == (200, {"models": [{"name": "judge-1", "model": "judge-1"}]})
        assert get(srv, "/api/version") == (200, {"version": "0.6.0"})
        assert get(srv, "/nope")[0] == 404
        assert srv.count == 0  # listing calls are not chat requests


def test_ollama_non_stream(server: LoopbackLLMServer) -> None:
    """Ollama stream=false returns one object conforming to the format schema."""
    schema = {"type": "object", "properties": {"label": {"enum": ["left", "right"]}}}
    body = {
        "model": "llama-test",
        "messages": [{"role": "user", "content": "Which side?"}],
        "stream": False,
        "format": schema,
        "options": {"seed": 11, "temperature": 0, "top_p": 1, "num_predict": 64},
    }
    status, headers, raw = post(server, "/api/chat", body)
    assert status == 200
    assert int(headers["content-length"]) == len(raw)
    reply = json.loads(raw)
    assert reply["done"] is True
    assert reply["done_reason"] == "stop"
    assert reply["model"] == "llama-test"
    assert reply["created_at"] == "2026-01-01T00:00:00Z"
    assert reply["message"]["role"] == "assistant"
    expected = ["left", "right"][stable_hash("Which side?", 11) % 2]
    assert json.loads(reply["message"]["content"]) == {"label": expected}
    assert reply["prompt_eval_count"] > 0
    assert reply["eval_count"] > 0
    assert reply["total_duration"] >= 0
    assert "eval_duration" in reply

    json_mode = post(server, "/api/chat", {**body, "format": "json"})[2]
    assert json.loads(json.loads(json_mode)["message"]["content"]) == {"answer": "loopback"}


def test_ollama_streams_by_default(server: LoopbackLLMServer) -> None:
    """Without stream=false, Ollama answers NDJSON chunks over chunked encoding."""
    body = {"model": "llama-test", "messages": [{"role": "user", "content": "hi"}]}
    status, headers, raw = post(server, "/api/chat", body)  # no "stream" key: Ollama streams
    assert status == 200
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["transfer-encoding"] == "chunked"
    chunks = [json.loads(line) for line in raw.decode().splitlines()]
    assert len(chunks) == 2
    assert chunks[0]["done"] is False
    assert chunks[0]["message"] == {"role": "assistant", "content": LOOPBACK_TEXT}
    assert chunks[1]["done"] is True
    assert chunks[1]["eval_count"] > 0

    explicit = post(server, "/api/chat", {**body, "stream": True})[2]
    assert [json.loads(x)["done"] for x in explicit.decode().splitlines()] == [False, True]


def test_openai_stream_sse(server: LoopbackLLMServer) -> None:
    """OpenAI stream=true answers SSE chunks ending in [DONE]."""
    body = openai_body(stream=True, stream_options={"include_usage": True})
    status, headers, raw = post(server, "/v1/chat/completions", body)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: ") :] for line in raw.decode().splitlines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == LOOPBACK_TEXT
    assert chunks[-1]["usage"]["total_tokens"] > 0


def test_chunked_request_body(server: LoopbackLLMServer) -> None:
    """A Transfer-Encoding: chunked request body is decoded."""
    payload = json.dumps(openai_body(response_format={"type": "json_object"})).encode()
    parts = [payload[:10], payload[10:]]
    chunked = b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders(chunked)
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(content_of(response.read())) == {"answer": "loopback"}
    finally:
        conn.close()
    assert server.requests[0].body == json.loads(payload)


def test_keep_alive_two_requests_one_connection(server: LoopbackLLMServer) -> None:
    """Two requests travel over one TCP connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        first = post(server, "/v1/chat/completions", openai_body(), conn=conn)
        sock = conn.sock
        second = post(
            server, "/api/chat", {"model": "m", "messages": [], "stream": False}, conn=conn
        )
        assert sock is not None
        assert conn.sock is sock  # http.client did not reconnect
    finally:
        conn.close()
    assert first[0] == 200
    assert second[0] == 200
    assert first[1]["connection"] == "keep-alive"
    assert server.connections == 1
    assert server.count == 2


def test_invalid_json_is_400_and_logged(server: LoopbackLLMServer) -> None:
    """A non-JSON body is a 400, logged, and consumes no fault."""
    server.enqueue(Fault.http_error(503))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", "/v1/chat/completions", body=b"{not json")
        response = conn.getresponse()
        assert response.status == 400
        assert "invalid JSON" in json.loads(response.read())["error"]["message"]
    finally:
        conn.close()
    assert server.count == 1
    assert server.requests[0].body is None
    assert server.pending_faults == 1  # a rejected body consumes no fault


# ---- faults ------------------------------------------------------------------------------------


def test_http_error_openai_and_ollama_bodies(server: LoopbackLLMServer) -> None:
    """http_error uses protocol-specific error bodies and drains in order."""
    server.enqueue(Fault.http_error(500), Fault.http_error(503), Fault.http_error(400, {"x": 1}))
    status, _, raw = post(server, "/v1/chat/completions", openai_body())
    assert status == 500
    error = json.loads(raw)["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["type"] == "server_error"

    status, _, raw = post(server, "/api/chat", {"model": "m", "messages": [], "stream": False})
    assert status == 503
    assert isinstance(json.loads(raw)["error"], str)

    assert post(server, "/v1/chat/completions", openai_body())[:3:2] == (400, b'{"x": 1}')
    assert post(server, "/v1/chat/completions", openai_body())[0] == 200  # queue drained
    assert [r.fault.status if r.fault else None for r in server.requests] == [500, 503, 400, None]


def test_rate_limited_sets_retry_after(server: LoopbackLLMServer) -> None:
    """rate_limited is a 429 with Retry-After and retry-after-ms."""
    server.enqueue(Fault.rate_limited(2), Fault.rate_limited(0.25))
    status, headers, raw = post(server, "/v1/chat/completions", openai_body())
    assert status == 429
    assert headers["retry-after"] == "2"
    assert headers["retry-after-ms"] == "2000"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    status, headers, _ = post(server, "/v1/chat/completions", openai_body())
    assert (status, headers["retry-after"], headers["retry-after-ms"]) == (429, "0.25", "250")


def test_connection_reset(server: LoopbackLLMServer) -> None:
    """connection_reset leaves the client with a connection error."""
    server.enqueue(Fault.connection_reset())
    with pytest.raises(ConnectionError):  # RemoteDisconnected is a ConnectionResetError too
        post(server, "/v1/chat/completions", openai_body())
    assert post(server, "/v1/chat/completions", openai_body())[0] == 200
    assert server.requests[0].fault == Fault.connection_reset()


def test_hang_times_out_while_other_requests_proceed(server: LoopbackLLMServer) -> None:
    """A hung request times out the client but blocks nobody else."""
    server.enqueue(Fault.hang(5))
    errors: list[BaseException] = []

    def hanging_call() -> None:
        try:
            post(server, "/v1/chat/completions", openai_body(), timeout=0.2)
        except BaseException as exc:  # inspected below
            errors.append(exc)

    thread = threading.Thread(target=hanging_call)
    thread.start()
    assert server.wait_for_count(1)
    started = time.monotonic()
    status = post(server, "/v1/chat/completions", openai_body(), timeout=2)[0]
    elapsed = time.monotonic() - started
    thread.join(3)

    assert status == 200
    assert elapsed < 0.5
    assert len(errors) == 1
    assert isinstance(errors[0], TimeoutError)  # socket.timeout is an alias


def test_truncated_body(server: LoopbackLLMServer) -> None:
    """truncated_body sends less than the declared Content-Length."""
    server.enqueue(Fault.truncated_body())
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(openai_body()))
        response = conn.getresponse()
        assert response.status == 200
        declared = int(response.getheader("Content-Length") or 0)
        with pytest.raises(http.client.IncompleteRead) as info:
            response.read()
        assert 0 < len(info.value.partial) < declared
    finally:
        conn.close()


def test_truncated_ollama_stream(server: LoopbackLLMServer) -> None:
    """truncated_body on a stream omits the final chunk."""
    server.enqueue(Fault.truncated_body())
    with pytest.raises(http.client.IncompleteRead):
        post(server, "/api/chat", {"model": "m", "messages": []})


def test_non_json_body(server: LoopbackLLMServer) -> None:
    """non_json_body is HTML labelled as JSON."""
    server.enqueue(Fault.non_json_body())
    status, headers, raw = post(server, "/v1/chat/completions", openai_body())
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert raw == b"<html>oops</html>"
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)


def test_bad_content(server: LoopbackLLMServer) -> None:
    """bad_content replaces the assistant content in a valid envelope."""
    server.enqueue(Fault.bad_content("not json at all"), Fault.bad_content('{"decision":"Maybe"}'))
    fmt = schema_format(DECISION_SCHEMA)
    assert content_of(
        post(server, "/v1/chat/completions", openai_body(response_format=fmt))[2]
    ) == ("not json at all")
    raw = post(server, "/api/chat", {"model": "m", "messages": [], "stream": False})[2]
    assert json.loads(raw)["message"]["content"] == '{"decision":"Maybe"}'


def test_latency_global_and_per_request() -> None:
    """latency_ms delays answers; a latency fault overrides it."""
    with LoopbackLLMServer(latency_ms=150) as srv:
        srv.enqueue(Fault.latency(0))
        started = time.monotonic()
        post(srv, "/v1/chat/completions", openai_body())
        fast = time.monotonic() - started
        started = time.monotonic()
        post(srv, "/v1/chat/completions", openai_body())
        slow = time.monotonic() - started
    assert fast < 0.1
    assert slow >= 0.15


def test_queue_every_n_and_default_precedence(server: LoopbackLLMServer) -> None:
    """Queue beats every-n beats default; reset clears everything."""

    def statuses(n: int) -> list[int]:
        return [post(server, "/v1/chat/completions", openai_body())[0] for _ in range(n)]

    server.fault_every(3, Fault.http_error(502))
    assert statuses(6) == [200, 200, 502, 200, 200, 502]

    server.set_default_fault(Fault.http_error(503))
    server.enqueue(Fault.http_error(500))
    # Call 7 takes the queued 500, call 9 is the every-3rd 502, the rest get the default.
    assert statuses(4) == [500, 503, 502, 503]

    server.reset()
    assert server.count == 0
    assert server.pending_faults == 0
    assert statuses(3) == [200, 200, 200]
    assert [r.seq for r in server.requests] == [1, 2, 3]


# ---- concurrency & lifecycle ---------------------------------------------------------------------


def test_max_in_flight_reaches_eight() -> None:
    """Eight concurrent slow requests are all in flight at once."""
    with LoopbackLLMServer(latency_ms=200) as srv:
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            results = list(
                pool.map(lambda _: post(srv, "/v1/chat/completions", openai_body())[0], range(8))
            )
        elapsed = time.monotonic() - started
        assert results == [200] * 8
        assert srv.max_in_flight >= 8
        assert srv.in_flight == 0
    assert elapsed < 1.0  # served concurrently, not 8 x 200 ms


def test_256_concurrent_connections() -> None:
    """256 simultaneous connections are all served concurrently."""
    clients = 256
    barrier = threading.Barrier(clients)

    def call(_: int) -> int:
        barrier.wait(10)
        return post(srv, "/api/chat", {"model": "m", "messages": [], "stream": False}, timeout=20)[
            0
        ]

    with LoopbackLLMServer(latency_ms=1000) as srv, ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(call, range(clients)))
        assert results == [200] * clients
        assert srv.max_in_flight == clients
        assert srv.connections == clients


def test_stop_is_quick_and_clean_with_hanging_request(caplog: pytest.LogCaptureFixture) -> None:
    """stop() cancels a hung request fast, leaving no thread or warning."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    threads_before = set(threading.enumerate())
    srv = LoopbackLLMServer()
    srv.start()
    srv.enqueue(Fault.hang(30))
    errors: list[BaseException] = []

    def hanging_call() -> None:
        try:
            post(srv, "/v1/chat/completions", openai_body(), timeout=10)
        except BaseException as exc:  # inspected below
            errors.append(exc)

    client = threading.Thread(target=hanging_call)
    client.start()
    assert srv.wait_for_count(1)
    assert srv.in_flight == 1

    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        srv.stop()
        stop_time = time.monotonic() - started
        client.join(5)
        gc.collect()

    assert stop_time < 1.0
    assert not client.is_alive()
    assert len(errors) == 1  # the client saw the connection drop
    assert set(threading.enumerate()) <= threads_before  # no server thread left behind
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with pytest.raises(RuntimeError):
        _ = srv.port  # no longer bound
    srv.stop()  # idempotent


def test_restart_after_stop() -> None:
    """A stopped server can be started again."""
    srv = LoopbackLLMServer()
    with srv:
        first_port = srv.port
    with srv:
        assert post(srv, "/v1/chat/completions", openai_body())[0] == 200
    assert isinstance(first_port, int)


def test_subprocess_mode() -> None:
    """CLI mode prints LISTENING, serves, obeys control calls, exits 0 on SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--port", "0", "--latency-ms", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"LISTENING (\d+)\n", line)
        assert match, line
        port = int(match.group(1))

        def call(path: str, payload: Any) -> tuple[int, bytes]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("POST", path, body=json.dumps(payload))
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()

        started = time.monotonic()
        status, raw = call("/v1/chat/completions", openai_body())
        assert status == 200
        assert content_of(raw) == LOOPBACK_TEXT
        assert time.monotonic() - started >= 0.1  # --latency-ms took effect

        assert call("/_loopback/enqueue", {"faults": ["http_error:503"]})[0] == 200
        assert call("/v1/chat/completions", openai_body())[0] == 503
        stats = json.loads(call("/_loopback/reset", {})[1])
        assert stats["count"] == 0

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_fault_spec_parsing() -> None:
    """Fault.parse understands the CLI spec syntax and rejects bad specs."""
    assert Fault.parse("http_error:503") == Fault.http_error(503)
    assert Fault.parse("http_error") == Fault.http_error(500)
    assert Fault.parse("rate_limited:1.5") == Fault.rate_limited(1.5)
    assert Fault.parse("hang:2") == Fault.hang(2)
    assert Fault.parse("latency:300") == Fault.latency(300)
    assert Fault.parse("bad_content:a:b") == Fault.bad_content("a:b")
    assert Fault.parse("connection_reset").kind is FaultKind.CONNECTION_RESET
    bad_specs = {
        "nope": "unknown fault kind",
        "latency": "needs milliseconds",
        "truncated_body:1": "takes no argument",
        "http_error:999": "invalid HTTP status",
    }
    for spec, message in bad_specs.items():
        with pytest.raises(ValueError, match=message):
            Fault.parse(spec)


def test_raw_socket_reset_is_seen_as_connection_error(server: LoopbackLLMServer) -> None:
    """connection_reset sends a TCP RST, not an orderly close."""
    server.enqueue(Fault.connection_reset())
    payload = json.dumps(openai_body()).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        # SO_LINGER 0 turns the close into a TCP RST: recv fails instead of returning b"".
        with pytest.raises(ConnectionResetError):
            sock.recv(65536)


def test_start_fails_loudly_when_port_is_taken() -> None:
    """A bind failure surfaces from start() instead of leaving a dead thread."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = LoopbackLLMServer(port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match="failed to start") as info:
            srv.start()
        assert isinstance(info.value.__cause__, OSError)
        assert not [t for t in threading.enumerate() if t.name == "loopback-llm-server"]
