"""Loopback LLM HTTP server for tests: OpenAI + Ollama protocols with scripted faults.

Pure standard library (asyncio streams speaking raw HTTP/1.1), so the test suite needs no web
framework and no network.  The server runs either

* in-process, on a background thread that owns its own event loop::

      with LoopbackLLMServer(latency_ms=0, model="loopback-model") as srv:
          client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="x")
          srv.enqueue(Fault.http_error(500), Fault.rate_limited(1))
          ...
          assert srv.count == 3

* or as a subprocess::

      python tests/loopback_llm_server.py --port 0 --latency-ms 100

  which prints exactly one line ``LISTENING <port>`` (flushed) on stdout and serves until
  SIGTERM/SIGINT.  Faults for a subprocess are set with ``--enqueue``, ``--default-fault`` and
  ``--fault-every`` (see `Fault.parse` for the spec syntax), or at run time through the control
  endpoints below.

Endpoints
---------
OpenAI
    ``POST /v1/chat/completions`` (also ``/chat/completions``): non-streaming
    ``chat.completion`` object, or SSE ``chat.completion.chunk`` events when ``"stream": true``.
    ``GET /v1/models`` (also ``/models``).
    ``POST /v1/completions`` (also ``/completions``): the legacy plain-completion endpoint base
    models are served on; a non-streaming ``text_completion`` object whose ``choices[0].text``
    is the content (recorded with protocol ``"completions"``; ``prompt`` is the text hashed).
    Content longer than ``max_tokens`` (about four characters a token) is cut there and
    reported with ``finish_reason: "length"``, as a server stops sampling at the cap.
Ollama
    ``POST /api/chat``: one JSON object when ``"stream": false``; otherwise (Ollama's default is
    streaming) NDJSON over chunked encoding: a content chunk with ``done: false`` then a final
    ``done: true`` chunk carrying the counts.  ``GET /api/tags``, ``GET /api/version``,
    ``GET /`` (``Ollama is running``).
Control (for subprocess mode; never recorded as chat requests)
    ``GET /_loopback/stats``; ``POST /_loopback/enqueue`` ``{"faults": [SPEC, ...]}``;
    ``POST /_loopback/default`` ``{"fault": SPEC | null}``;
    ``POST /_loopback/every`` ``{"n": N, "fault": SPEC | null}``; ``POST /_loopback/reset``.

Answer content
--------------
`default_responder` builds a JSON object that conforms to the requested JSON schema
(``response_format.json_schema.schema`` or Ollama's ``format`` dict): ``enum`` picks
``enum[h % len(enum)]`` with ``h = stable_hash(last user message, seed)``; strings are
``"loopback answer"`` (clipped to ``maxLength``, padded to ``minLength``); integers/numbers are
``minimum`` or 0; booleans ``true``; nested objects recurse; arrays are empty (or ``minItems``
long).  ``$ref``/``$defs``, ``anyOf``/``oneOf`` (first non-null branch), ``allOf`` and ``const``
are understood, so pydantic-generated schemas work.  JSON mode without a schema
(``{"type": "json_object"}`` / ``format: "json"``) answers ``{"answer": "loopback"}``; no format
at all answers the plain text ``loopback answer``.  Pass ``responder=`` to plug your own: it gets
a copy of the parsed request body plus a ``"protocol"`` key (``"openai"`` or ``"ollama"``) and
returns the assistant content text (a non-str return value is JSON-encoded).

Fault injection
---------------
Each chat request (the POST endpoints above) takes at most one fault, chosen in this order:

1. the head of the queue filled by `LoopbackLLMServer.enqueue` (arrival order);
2. the `LoopbackLLMServer.fault_every` fault, if this is the n-th, 2n-th, ... chat request since
   ``fault_every`` was called;
3. the `LoopbackLLMServer.set_default_fault` fault;
4. none: a normal answer.

Fault kinds (`Fault` is a frozen dataclass; build it with its constructors):

``Fault.http_error(status, body=None, headers=None)``
    That status with an error body: OpenAI style ``{"error": {"message", "type", "code"}}``, or
    Ollama style ``{"error": "..."}`` on ``/api/chat``.  ``body`` (dict/str/bytes) replaces it.
``Fault.rate_limited(retry_after_seconds)``
    429 with ``Retry-After: <seconds>`` (formatted with ``%g``, so ``0.05`` stays fractional) and
    ``retry-after-ms``, plus an error body.
``Fault.connection_reset()``
    Reads the request, then closes the socket with SO_LINGER 0 (the client sees a TCP reset)
    without writing anything.
``Fault.hang(seconds)``
    Reads the request and sleeps that long before answering normally (so a client timeout fires
    first).  Only that connection waits.
``Fault.truncated_body()``
    Sends headers whose Content-Length is the full body's, half the body, then closes.  On a
    streaming request: the first content event, then close without the terminating chunk.
``Fault.non_json_body()``
    200, ``Content-Type: application/json``, body ``<html>oops</html>``.
``Fault.bad_content(text)``
    A well-formed protocol response whose assistant content is ``text``.
``Fault.latency(ms)``
    Answers normally after ``ms`` instead of the server's ``latency_ms``.

The server's ``latency_ms`` (default 0) is slept before every chat answer, fault or not, so a
fault costs as much time as a real round trip would; ``hang`` and ``latency`` replace it.

Observability
-------------
`LoopbackLLMServer.requests` (snapshot list of `RecordedRequest`: path, protocol, parsed body,
headers, fault), `count`, `in_flight`, `max_in_flight` (peak concurrent chat requests),
`connections` (TCP connections accepted), `pending_faults`, `wait_for_count`, and `reset` (clears
the queue, default and every-n faults, the log and the counters).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import email.utils
import hashlib
import http
import json
import logging
import math
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "LOOPBACK_TEXT",
    "Fault",
    "FaultKind",
    "LoopbackLLMServer",
    "RecordedRequest",
    "Responder",
    "build_from_schema",
    "default_responder",
    "last_user_message",
    "main",
    "requested_format",
    "stable_hash",
]

_log = logging.getLogger(__name__)

#: Assistant text used for plain-text answers and for schema string fields.
LOOPBACK_TEXT = "loopback answer"

#: Receives a copy of the parsed request body plus ``"protocol"``; returns the content text.
Responder = Callable[[dict[str, Any]], Any]

_CHAT_PATHS: dict[str, str] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/completions": "completions",
    "/completions": "completions",
    "/api/chat": "ollama",
}
_CONTROL_PREFIX = "/_loopback/"
_OLLAMA_CREATED_AT = "2026-01-01T00:00:00Z"
_OLLAMA_VERSION = "0.6.0"
# The StreamReader limit caps one header block / chunk-size line; bodies are read separately.
_STREAM_LIMIT = 1024 * 1024
_MAX_BODY_BYTES = 64 * 1024 * 1024
# Soak tests open hundreds of connections at once; the default backlog (100) would make the
# kernel drop SYNs and turn a concurrency test into a retransmit-timing test.
_LISTEN_BACKLOG = 1024
_MAX_SCHEMA_DEPTH = 32
_FORMAT_SAMPLES: dict[str, str] = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "email": "loopback@example.com",
    "uri": "http://127.0.0.1/",
    "url": "http://127.0.0.1/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------


class FaultKind(StrEnum):
    """The kinds of scripted misbehaviour (values double as `Fault.parse` spec names)."""

    HTTP_ERROR = "http_error"
    RATE_LIMITED = "rate_limited"
    CONNECTION_RESET = "connection_reset"
    HANG = "hang"
    TRUNCATED_BODY = "truncated_body"
    NON_JSON_BODY = "non_json_body"
    BAD_CONTENT = "bad_content"
    LATENCY = "latency"


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour for one chat request.

    Build instances with the constructors (`http_error`, `rate_limited`, ...) rather than
    directly; only the fields relevant to ``kind`` are meaningful.

    Attributes:
        kind: What to do.
        status: HTTP status for ``http_error`` (429 for ``rate_limited``).
        body: Replacement error body for ``http_error`` (dict is JSON-encoded).
        headers: Extra response headers for ``http_error``.
        seconds: Sleep for ``hang``; Retry-After for ``rate_limited``.
        text: Assistant content for ``bad_content``.
        ms: Latency for ``latency``.
    """

    kind: FaultKind
    status: int = 0
    # Excluded from hashing: a dict body would otherwise make the frozen dataclass unhashable.
    body: dict[str, Any] | list[Any] | str | bytes | None = field(default=None, hash=False)
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    text: str = ""
    ms: float = 0.0

    @classmethod
    def http_error(
        cls,
        status: int = 500,
        body: dict[str, Any] | list[Any] | str | bytes | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    ) -> Fault:
        """Answer with ``status`` and an error body.

        Args:
            status: HTTP status code (100-599).
            body: Replacement body; None means a protocol-appropriate error object.
            headers: Extra response headers.

        Returns:
            The fault.
        """
        if not 100 <= int(status) <= 599:
            raise ValueError(f"invalid HTTP status {status!r}")
        pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
        return cls(
            FaultKind.HTTP_ERROR,
            status=int(status),
            body=body,
            headers=tuple((str(k), str(v)) for k, v in pairs),
        )

    @classmethod
    def rate_limited(cls, retry_after_seconds: float = 1.0) -> Fault:
        """Answer 429 with ``Retry-After`` / ``retry-after-ms`` headers.

        Args:
            retry_after_seconds: Value advertised to the client.

        Returns:
            The fault.
        """
        if retry_after_seconds < 0:
            raise ValueError("retry_after_seconds must be >= 0")
        return cls(FaultKind.RATE_LIMITED, status=429, seconds=float(retry_after_seconds))

    @classmethod
    def connection_reset(cls) -> Fault:
        """Read the request, then reset the connection without answering."""
        return cls(FaultKind.CONNECTION_RESET)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Read the request and sleep ``seconds`` before answering normally.

        Args:
            seconds: How long to stall (stopping the server cancels the stall).

        Returns:
            The fault.
        """
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        return cls(FaultKind.HANG, seconds=float(seconds))

    @classmethod
    def truncated_body(cls) -> Fault:
        """Promise a full Content-Length, send half the body, close."""
        return cls(FaultKind.TRUNCATED_BODY)

    @classmethod
    def non_json_body(cls) -> Fault:
        """Answer 200 ``application/json`` with ``<html>oops</html>``."""
        return cls(FaultKind.NON_JSON_BODY)

    @classmethod
    def bad_content(cls, text: str = "not json at all") -> Fault:
        """Answer a well-formed response whose assistant content is ``text``.

        Args:
            text: Content, e.g. non-JSON or JSON that violates the requested schema.

        Returns:
            The fault.
        """
        return cls(FaultKind.BAD_CONTENT, text=str(text))

    @classmethod
    def latency(cls, ms: float) -> Fault:
        """Answer normally after ``ms`` milliseconds (overrides the server's latency).

        Args:
            ms: Delay in milliseconds.

        Returns:
            The fault.
        """
        if ms < 0:
            raise ValueError("ms must be >= 0")
        return cls(FaultKind.LATENCY, ms=float(ms))

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """Build a fault from a ``kind[:arg]`` spec (CLI and control endpoints).

        ``http_error:503`` (default 500), ``rate_limited:1.5`` (seconds, default 1),
        ``hang:5`` (seconds, default 30), ``latency:300`` (ms, required),
        ``bad_content:TEXT`` (TEXT may contain colons; default ``not json at all``),
        ``connection_reset``, ``truncated_body``, ``non_json_body``.

        Args:
            spec: The spec string.

        Returns:
            The fault.

        Raises:
            ValueError: Unknown kind or bad argument.
        """
        name, sep, arg = spec.partition(":")
        try:
            kind = FaultKind(name.strip())
        except ValueError:
            raise ValueError(f"unknown fault kind in spec {spec!r}") from None
        has_arg = bool(sep) and arg != ""
        if kind is FaultKind.HTTP_ERROR:
            return cls.http_error(int(arg) if has_arg else 500)
        if kind is FaultKind.RATE_LIMITED:
            return cls.rate_limited(float(arg) if has_arg else 1.0)
        if kind is FaultKind.HANG:
            return cls.hang(float(arg) if has_arg else 30.0)
        if kind is FaultKind.LATENCY:
            if not has_arg:
                raise ValueError("latency spec needs milliseconds, e.g. latency:300")
            return cls.latency(float(arg))
        if kind is FaultKind.BAD_CONTENT:
            return cls.bad_content(arg) if sep else cls.bad_content()
        if has_arg:
            raise ValueError(f"fault {kind.value!r} takes no argument")
        return cls(kind)


@dataclass(frozen=True)
class RecordedRequest:
    """One chat request as the server saw it.

    Attributes:
        seq: 1-based arrival number among chat requests since the last reset.
        path: Request path (no query string).
        protocol: ``"openai"``, ``"completions"`` (OpenAI's plain completions) or ``"ollama"``.
        body: Parsed JSON body, or None when it was not a JSON object (answered 400).
        headers: Request headers, names lower-cased.
        fault: The fault applied, or None.
        received_at: ``time.monotonic()`` when the request had been read.
    """

    seq: int
    path: str
    protocol: str
    body: dict[str, Any] | None
    headers: dict[str, str]
    fault: Fault | None
    received_at: float


# --------------------------------------------------------------------------------------------
# Responder
# --------------------------------------------------------------------------------------------


def stable_hash(text: str, seed: Any = None) -> int:
    """Deterministic 32-bit hash of a prompt and seed (sha256, first 8 hex digits).

    Args:
        text: Usually the last user message.
        seed: The request's seed (None hashes like an empty string).

    Returns:
        An int in ``[0, 2**32)``.
    """
    key = f"{text}\x1f{'' if seed is None else seed}"
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16)


def _message_text(content: Any) -> str:
    # OpenAI allows content as a list of parts ({"type": "text", "text": ...}).
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def last_user_message(messages: Any) -> str:
    """Return the text of the last ``role == "user"`` message ("" if none).

    Args:
        messages: The request's ``messages`` list.

    Returns:
        The message text, with content-part lists joined by newlines.
    """
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _message_text(message.get("content"))
    return ""


def _prompt_text(request: Mapping[str, Any]) -> str:
    # A plain completion has one prompt string; a chat request is keyed on its last user turn.
    if request.get("protocol") == "completions":
        return str(request.get("prompt") or "")
    return last_user_message(request.get("messages"))


def _request_seed(request: Mapping[str, Any]) -> Any:
    if request.get("protocol") == "ollama":
        options = request.get("options")
        return options.get("seed") if isinstance(options, dict) else None
    return request.get("seed")


def requested_format(request: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Classify the requested output format.

    Args:
        request: Parsed body plus ``"protocol"``.

    Returns:
        ``("schema", schema)``, ``("json", None)`` or ``("text", None)``.
    """
    if request.get("protocol") == "ollama":
        fmt = request.get("format")
        if isinstance(fmt, dict):
            return "schema", fmt
        if fmt == "json":
            return "json", None
        return "text", None
    response_format = request.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
                return "schema", spec["schema"]
            return "json", None
        if kind == "json_object":
            return "json", None
    return "text", None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _resolve_ref(root: Any, ref: str) -> Any:
    # Only local JSON pointers ("#/$defs/Name") occur in LLM structured-output schemas.
    if not ref.startswith("#"):
        return {}
    node = root
    for raw in ref[1:].split("/"):
        if not raw:
            continue
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return {}
    return node


def _merge_all_of(schema: dict[str, Any], root: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for raw_part in schema["allOf"]:
        part = raw_part
        if isinstance(part, dict) and "$ref" in part:
            target = _resolve_ref(root, str(part["$ref"]))
            part = {**(target if isinstance(target, dict) else {}), **part}
            part.pop("$ref")
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged.setdefault("properties", {}).update(value)
            elif key == "required" and isinstance(value, list):
                merged.setdefault("required", []).extend(value)
            else:
                merged.setdefault(key, value)
    for key, value in schema.items():
        if key != "allOf":
            merged[key] = value
    return merged


def _number_value(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    value: float = 0
    if _is_number(schema.get("minimum")):
        value = schema["minimum"]
    elif _is_number(schema.get("exclusiveMinimum")):
        value = schema["exclusiveMinimum"] + 1
    if _is_number(schema.get("maximum")) and value > schema["maximum"]:
        value = schema["maximum"]
    if _is_number(schema.get("exclusiveMaximum")) and value >= schema["exclusiveMaximum"]:
        value = schema["exclusiveMaximum"] - 1
    if integer:
        return math.ceil(value)
    return value


def _string_value(schema: Mapping[str, Any]) -> str:
    text = _FORMAT_SAMPLES.get(str(schema.get("format")), LOOPBACK_TEXT)
    min_len, max_len = schema.get("minLength"), schema.get("maxLength")
    if isinstance(min_len, int) and len(text) < min_len:
        text += "x" * (min_len - len(text))
    if isinstance(max_len, int) and max_len >= 0:
        text = text[:max_len]
    return text


def _build(schema: Any, h: int, root: Any, depth: int) -> Any:
    if depth > _MAX_SCHEMA_DEPTH:
        return None  # recursive schema: stop rather than recurse forever
    if not isinstance(schema, dict):
        return LOOPBACK_TEXT  # `true` / missing schema: anything goes
    if "$ref" in schema:
        target = _resolve_ref(root, str(schema["$ref"]))
        merged = {**(target if isinstance(target, dict) else {}), **schema}
        merged.pop("$ref")
        return _build(merged, h, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[h % len(enum)]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            # Optional[X] arrives as anyOf [X, null]: answer with X so the field is populated.
            non_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return _build((non_null or options)[0], h, root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        return _build(_merge_all_of(schema, root), h, root, depth + 1)

    schema_type = schema.get("type")
    if isinstance(schema_type, list):
        non_null_types = [t for t in schema_type if t != "null"]
        schema_type = non_null_types[0] if non_null_types else "null"
    if schema_type is None:
        if "properties" in schema:
            schema_type = "object"
        elif "items" in schema:
            schema_type = "array"
        else:
            schema_type = "string"

    if schema_type == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {name: _build(sub, h, root, depth + 1) for name, sub in properties.items()}
    if schema_type == "array":
        min_items = schema.get("minItems")
        count = min_items if isinstance(min_items, int) and min_items > 0 else 0
        return [_build(schema.get("items", {}), h, root, depth + 1) for _ in range(count)]
    if schema_type == "string":
        return _string_value(schema)
    if schema_type == "integer":
        return _number_value(schema, integer=True)
    if schema_type == "number":
        return _number_value(schema, integer=False)
    if schema_type == "boolean":
        return True
    if schema_type == "null":
        return None
    return LOOPBACK_TEXT


def build_from_schema(schema: Mapping[str, Any], h: int) -> Any:
    """Build a value conforming to a JSON schema (see the module docstring for the rules).

    Args:
        schema: The JSON schema (its ``$defs``/``definitions`` resolve ``$ref``).
        h: Hash selecting enum members (``enum[h % len(enum)]``).

    Returns:
        A JSON-serialisable value.
    """
    return _build(dict(schema), h, schema, 0)


def default_responder(request: dict[str, Any]) -> str:
    """Deterministic answer content for a chat request.

    Args:
        request: Parsed body plus ``"protocol"``.

    Returns:
        Schema-conforming JSON text, ``{"answer": "loopback"}`` in JSON mode, or
        `LOOPBACK_TEXT`.
    """
    mode, schema = requested_format(request)
    if mode == "schema" and schema is not None:
        h = stable_hash(_prompt_text(request), _request_seed(request))
        return json.dumps(build_from_schema(schema, h), ensure_ascii=False)
    if mode == "json":
        return json.dumps({"answer": "loopback"})
    return LOOPBACK_TEXT


def _approx_tokens(text: str) -> int:
    # Roughly the usual 4 characters per token; only needs to be deterministic and plausible.
    return max(1, math.ceil(len(text) / 4))


def _prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list):
        return 1
    text = "\n".join(_message_text(m.get("content")) for m in messages if isinstance(m, dict))
    return _approx_tokens(text)


# --------------------------------------------------------------------------------------------
# HTTP/1.1 plumbing
# --------------------------------------------------------------------------------------------


class _HTTPError(Exception):
    """A malformed request: answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _HTTPError(400, "bad chunk size line") from None
        if size == 0:
            # Skip optional trailers up to the blank line that ends the message.
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return b"".join(chunks)
        total += size
        if total > _MAX_BODY_BYTES:
            raise _HTTPError(413, "request body too large")
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise _HTTPError(400, "chunk not terminated by CRLF")


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> _Request | None:
    """Read one request; None on a clean close between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise _HTTPError(400, "incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise _HTTPError(431, "request head too large") from None

    # RFC 9112 asks servers to ignore empty lines before a request line.
    lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _HTTPError(400, f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise _HTTPError(400, f"bad header line {line!r}")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value

    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise _HTTPError(400, "bad Content-Length") from None
        if length < 0:
            raise _HTTPError(400, "bad Content-Length")
        if length > _MAX_BODY_BYTES:
            raise _HTTPError(413, "request body too large")
        body = await reader.readexactly(length)
    else:
        body = b""
    return _Request(method.upper(), urlsplit(target).path or "/", version, headers, body)


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _response_head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):X}\r\n".encode("ascii") + data + b"\r\n"


def _openai_error_body(status: int, message: str) -> dict[str, Any]:
    if status == 429:
        etype, code = "requests", "rate_limit_exceeded"
    elif status == 401:
        etype, code = "invalid_request_error", "invalid_api_key"
    elif status == 404:
        etype, code = "invalid_request_error", "model_not_found"
    elif 400 <= status < 500:
        etype, code = "invalid_request_error", None
    else:
        etype, code = "server_error", None
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


def _error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    if protocol == "ollama":
        return {"error": message}
    return _openai_error_body(status, message)


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class LoopbackLLMServer:
    """OpenAI + Ollama compatible HTTP server on loopback with scripted fault injection.

    All public methods and properties are thread-safe; the server itself runs on its own event
    loop (a background thread after `start`, or the caller's loop via `serve`).

    Attributes:
        latency_ms: Delay before every chat answer; may be changed while running.
        model: Model name advertised by the listing endpoints (and used when a request omits
            ``model``).
        responder: Produces assistant content; may be replaced while running.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        latency_ms: float = 0,
        model: str = "loopback-model",
        responder: Responder | None = None,
    ) -> None:
        """Configure (but do not start) the server.

        Args:
            host: Interface to bind.
            port: Port to bind; 0 picks a free one.
            latency_ms: Delay before every chat answer.
            model: Advertised model name.
            responder: Content producer; defaults to `default_responder`.
        """
        self.latency_ms = latency_ms
        self.model = model
        self.responder: Responder = responder or default_responder
        self._host = host
        self._requested_port = port
        self._bound_port: int | None = None

        # One lock (with a condition for wait_for_count) guards all script and log state: it is
        # written on the loop thread and read/written by test threads.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Fault] = deque()
        self._default_fault: Fault | None = None
        self._every_n = 0
        self._every_fault: Fault | None = None
        self._every_counter = 0
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._connections = 0

        # Loop-thread-only state.
        self._conn_tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

        # Background-thread mode.
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._startup_error: BaseException | None = None

    # ---- addresses ----------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Bound interface."""
        return self._host

    @property
    def port(self) -> int:
        """Bound port (available once started)."""
        if self._bound_port is None:
            raise RuntimeError("server is not running")
        return self._bound_port

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``; OpenAI clients want ``f"{base_url}/v1"``."""
        return f"http://{self._host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://HOST:PORT/v1``, ready for ``openai.OpenAI(base_url=...)``."""
        return f"{self.base_url}/v1"

    # ---- fault script ---------------------------------------------------------------------

    def enqueue(self, *faults: Fault) -> None:
        """Queue faults for the next chat requests, one each, in arrival order.

        Args:
            *faults: Faults to append.
        """
        for fault in faults:
            if not isinstance(fault, Fault):
                raise TypeError(f"expected Fault, got {type(fault).__name__}")
        with self._lock:
            self._queue.extend(faults)

    def set_default_fault(self, fault: Fault | None) -> None:
        """Apply ``fault`` to every chat request that finds the queue empty (None clears).

        Args:
            fault: The fault or None.
        """
        with self._lock:
            self._default_fault = fault

    def fault_every(self, n: int, fault: Fault | None) -> None:
        """Inject ``fault`` into every ``n``-th chat request from now on (n <= 0 or None clears).

        Queued faults take precedence; requests consuming a queued fault still count.

        Args:
            n: Period in chat requests.
            fault: The fault or None.
        """
        with self._lock:
            enabled = fault is not None and n > 0
            self._every_n = n if enabled else 0
            self._every_fault = fault if enabled else None
            self._every_counter = 0

    @property
    def pending_faults(self) -> int:
        """Number of queued faults not yet consumed."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Clear the fault queue, default and every-n faults, the request log and counters."""
        with self._lock:
            self._queue.clear()
            self._default_fault = None
            self._every_n = 0
            self._every_fault = None
            self._every_counter = 0
            self._requests.clear()
            self._max_in_flight = self._in_flight
            self._connections = 0
            self._changed.notify_all()

    # ---- observability --------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of the chat requests received since the last reset, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def count(self) -> int:
        """Number of chat requests received since the last reset."""
        with self._lock:
            return len(self._requests)

    @property
    def in_flight(self) -> int:
        """Chat requests currently being handled."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """Peak number of chat requests handled concurrently since the last reset."""
        with self._lock:
            return self._max_in_flight

    @property
    def connections(self) -> int:
        """TCP connections accepted since the last reset (keep-alive reuses one)."""
        with self._lock:
            return self._connections

    def wait_for_count(self, n: int, timeout: float = 5.0) -> bool:
        """Block until at least ``n`` chat requests have been received.

        Args:
            n: Target count.
            timeout: Seconds to wait.

        Returns:
            True if reached, False on timeout.
        """
        with self._changed:
            return self._changed.wait_for(lambda: len(self._requests) >= n, timeout)

    def _record(
        self, req: _Request, protocol: str, body: dict[str, Any] | None, *, take_fault: bool
    ) -> tuple[int, Fault | None]:
        # Choosing the fault and logging happen under one lock so the log order is exactly the
        # order in which faults were handed out.
        with self._lock:
            fault: Fault | None = None
            if take_fault:
                self._every_counter += 1
                if self._queue:
                    fault = self._queue.popleft()
                elif self._every_n and self._every_counter % self._every_n == 0:
                    fault = self._every_fault
                else:
                    fault = self._default_fault
            seq = len(self._requests) + 1
            self._requests.append(
                RecordedRequest(
                    seq=seq,
                    path=req.path,
                    protocol=protocol,
                    body=body,
                    headers=dict(req.headers),
                    fault=fault,
                    received_at=time.monotonic(),
                )
            )
            self._changed.notify_all()
            return seq, fault

    @contextlib.contextmanager
    def _flight(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    # ---- lifecycle: background thread -----------------------------------------------------

    def start(self) -> LoopbackLLMServer:
        """Start serving on a background thread; returns once the port is bound.

        Returns:
            self.

        Raises:
            RuntimeError: Already started, or the server failed to bind.
        """
        if self._thread is not None:
            raise RuntimeError("server already started")
        ready = threading.Event()
        self._startup_error = None
        thread = threading.Thread(
            target=self._thread_main, args=(ready,), name="loopback-llm-server", daemon=True
        )
        self._thread = thread
        thread.start()
        if not ready.wait(10.0):
            raise RuntimeError("loopback server did not start within 10 s")
        if self._startup_error is not None:
            thread.join(5.0)
            self._thread = None
            raise RuntimeError("loopback server failed to start") from self._startup_error
        return self

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def run() -> None:
            self._stop_event = asyncio.Event()
            await self.serve(self._stop_event, on_ready=lambda _port: ready.set())

        try:
            loop.run_until_complete(run())
        except BaseException as exc:  # surfaced to start() instead of dying with the thread
            self._startup_error = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
                ready.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: cancel in-flight requests (even hanging ones) and join the thread.

        Idempotent.

        Args:
            timeout: Seconds to wait for the thread.

        Raises:
            RuntimeError: The thread did not finish in time.
        """
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("loopback server thread did not stop")
        self._thread = None
        self._loop = None
        self._stop_event = None

    def __enter__(self) -> LoopbackLLMServer:
        """Start the server (see `start`)."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stop the server (see `stop`)."""
        self.stop()

    # ---- lifecycle: any event loop ----------------------------------------------------------

    async def serve(
        self, stop_event: asyncio.Event, on_ready: Callable[[int], None] | None = None
    ) -> None:
        """Serve on the running loop until ``stop_event`` is set, then shut down cleanly.

        Used by the background thread and the CLI; async tests may call it directly.

        Args:
            stop_event: Set it to stop.
            on_ready: Called with the bound port once listening.
        """
        self._closing = False
        self._conn_tasks = set()
        server = await asyncio.start_server(
            self._on_connect,
            self._host,
            self._requested_port,
            limit=_STREAM_LIMIT,
            backlog=_LISTEN_BACKLOG,
        )
        self._bound_port = server.sockets[0].getsockname()[1]
        try:
            if on_ready is not None:
                on_ready(self._bound_port)
            await stop_event.wait()
        finally:
            self._closing = True
            server.close()
            await self._cancel_connections()
            await server.wait_closed()
            self._bound_port = None

    async def _cancel_connections(self) -> None:
        # Several rounds: a connection whose accept was already under way when close() ran gets
        # its handler task on a later loop iteration; every task must finish before the loop
        # stops or asyncio warns "Task was destroyed but it is pending".
        for _ in range(5):
            await asyncio.sleep(0)
            tasks = [t for t in self._conn_tasks if not t.done()]
            if not tasks:
                continue
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # Let aborted transports run their connection_lost callbacks (closes the sockets).
        for _ in range(3):
            await asyncio.sleep(0)

    # ---- connection handling ----------------------------------------------------------------

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback (not a coroutine) so that we own the handler task: it is tracked from
        # birth for shutdown, and asyncio 3.11's own wrapper would call task.exception() on a
        # cancelled task and log a spurious CancelledError traceback.
        if self._closing:
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._handle_connection(reader, writer))
        self._conn_tasks.add(task)
        task.add_done_callback(self._conn_tasks.discard)

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is None:  # unreachable: _on_connect always runs this as a task
            writer.transport.abort()
            return
        with self._lock:
            self._connections += 1
        try:
            while not self._closing:
                try:
                    request = await _read_request(reader, writer)
                except _HTTPError as exc:
                    body = _json_bytes(_openai_error_body(exc.status, exc.message))
                    await self._send(writer, exc.status, body, keep_alive=False)
                    break
                if request is None or not await self._dispatch(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away mid-request: nobody is left to answer
        except Exception:  # pragma: no cover - a bug here must not kill the accept loop
            _log.exception("loopback LLM server: unhandled error on a connection")
        finally:
            if task.cancelling():
                # Shutting down: drop the connection now instead of waiting for a flush.
                writer.transport.abort()
            else:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    def _common_headers(self, keep_alive: bool) -> list[tuple[str, str]]:
        return [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Server", "biasim-loopback"),
            ("Connection", "keep-alive" if keep_alive else "close"),
        ]

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        *,
        keep_alive: bool,
        content_type: str = "application/json",
        extra_headers: Iterable[tuple[str, str]] = (),
        content_length: int | None = None,
    ) -> None:
        headers = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body) if content_length is None else content_length)),
            *self._common_headers(keep_alive),
            *extra_headers,
        ]
        writer.write(_response_head(status, headers) + body)
        await writer.drain()

    async def _send_json(
        self, writer: asyncio.StreamWriter, payload: Any, *, keep_alive: bool, status: int = 200
    ) -> bool:
        await self._send(writer, status, _json_bytes(payload), keep_alive=keep_alive)
        return keep_alive

    async def _send_error(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        protocol: str,
        *,
        keep_alive: bool,
        extra_headers: Iterable[tuple[str, str]] = (),
    ) -> bool:
        body = _json_bytes(_error_body(protocol, status, message))
        await self._send(writer, status, body, keep_alive=keep_alive, extra_headers=extra_headers)
        return keep_alive

    async def _dispatch(self, req: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether to keep the connection open."""
        keep = req.keep_alive
        protocol = _CHAT_PATHS.get(req.path)
        if protocol is not None:
            if req.method != "POST":
                return await self._send_error(
                    writer, 405, "method not allowed", protocol, keep_alive=keep
                )
            return await self._handle_chat(req, writer, protocol)
        if req.path.startswith(_CONTROL_PREFIX):
            return await self._handle_control(req, writer)
        if req.method == "GET":
            if req.path in ("/v1/models", "/models"):
                listing = {
                    "object": "list",
                    "data": [
                        {"id": self.model, "object": "model", "created": 0, "owned_by": "loopback"}
                    ],
                }
                return await self._send_json(writer, listing, keep_alive=keep)
            if req.path == "/api/tags":
                tags = {"models": [{"name": self.model, "model": self.model}]}
                return await self._send_json(writer, tags, keep_alive=keep)
            if req.path == "/api/version":
                return await self._send_json(writer, {"version": _OLLAMA_VERSION}, keep_alive=keep)
            if req.path == "/":
                await self._send(
                    writer,
                    200,
                    b"Ollama is running",
                    keep_alive=keep,
                    content_type="text/plain; charset=utf-8",
                )
                return keep
        style = "ollama" if req.path.startswith("/api/") else "openai"
        return await self._send_error(
            writer, 404, f"no route for {req.method} {req.path}", style, keep_alive=keep
        )

    # ---- chat -----------------------------------------------------------------------------

    async def _handle_chat(
        self, req: _Request, writer: asyncio.StreamWriter, protocol: str
    ) -> bool:
        keep = req.keep_alive
        started = time.monotonic()
        error = "request body must be a JSON object"
        try:
            body = json.loads(req.body.decode("utf-8")) if req.body else None
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            body, error = None, f"invalid JSON body: {exc}"
        if not isinstance(body, dict):
            # Logged (so tests see the attempt) but consumes no fault: it never reached "the
            # model".
            self._record(req, protocol, None, take_fault=False)
            return await self._send_error(writer, 400, error, protocol, keep_alive=keep)

        seq, fault = self._record(req, protocol, body, take_fault=True)
        with self._flight():
            return await self._answer_chat(
                writer, protocol, body, fault, seq=seq, keep=keep, started=started
            )

    async def _answer_chat(
        self,
        writer: asyncio.StreamWriter,
        protocol: str,
        body: dict[str, Any],
        fault: Fault | None,
        *,
        seq: int,
        keep: bool,
        started: float,
    ) -> bool:
        kind = fault.kind if fault is not None else None
        delay = float(self.latency_ms) / 1000.0
        if fault is not None and kind is FaultKind.LATENCY:
            delay = fault.ms / 1000.0
        elif fault is not None and kind is FaultKind.HANG:
            delay = fault.seconds
        if delay > 0:
            # Counted from the request's arrival, so a busy server answers after the stated
            # latency rather than that plus its own queueing (only this connection waits).
            await asyncio.sleep(max(0.0, delay - (time.monotonic() - started)))
        if writer.transport.is_closing():
            return False

        if fault is not None:
            if kind is FaultKind.CONNECTION_RESET:
                self._reset_connection(writer)
                return False
            if kind is FaultKind.HTTP_ERROR:
                await self._send_http_error_fault(writer, fault, protocol, keep)
                return keep
            if kind is FaultKind.RATE_LIMITED:
                seconds = fault.seconds
                headers = [
                    ("Retry-After", f"{seconds:g}"),
                    ("retry-after-ms", str(round(seconds * 1000))),
                ]
                return await self._send_error(
                    writer,
                    429,
                    f"loopback: rate limited, retry after {seconds:g} s",
                    protocol,
                    keep_alive=keep,
                    extra_headers=headers,
                )
            if kind is FaultKind.NON_JSON_BODY:
                await self._send(writer, 200, b"<html>oops</html>", keep_alive=keep)
                return keep

        if fault is not None and kind is FaultKind.BAD_CONTENT:
            content = fault.text
        else:
            try:
                produced = self.responder({**copy.deepcopy(body), "protocol": protocol})
                content = produced if isinstance(produced, str) else json.dumps(produced)
            except Exception as exc:  # a broken test responder becomes a 500, not a hang
                return await self._send_error(
                    writer, 500, f"loopback responder failed: {exc!r}", protocol, keep_alive=keep
                )

        truncate = kind is FaultKind.TRUNCATED_BODY
        if protocol == "completions":
            payload = self._text_completion(body, content, seq)  # the engine never streams
        elif protocol == "openai":
            if body.get("stream") is True:
                return await self._stream_openai(writer, body, content, seq, keep, truncate)
            payload = self._openai_completion(body, content, seq)
        else:
            # Ollama streams unless told otherwise.
            if body.get("stream", True) is not False:
                return await self._stream_ollama(writer, body, content, keep, truncate, started)
            payload = self._ollama_message(body, content, started, done=True)

        data = _json_bytes(payload)
        if truncate:
            await self._send(
                writer, 200, data[: len(data) // 2], keep_alive=keep, content_length=len(data)
            )
            return False
        await self._send(writer, 200, data, keep_alive=keep)
        return keep

    def _reset_connection(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # Linger on with timeout 0 makes close() send RST instead of FIN.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _send_http_error_fault(
        self, writer: asyncio.StreamWriter, fault: Fault, protocol: str, keep: bool
    ) -> None:
        if fault.body is None:
            message = f"loopback: injected HTTP {fault.status}"
            data = _json_bytes(_error_body(protocol, fault.status, message))
        elif isinstance(fault.body, bytes):
            data = fault.body
        elif isinstance(fault.body, str):
            data = fault.body.encode("utf-8")
        else:
            data = _json_bytes(fault.body)
        await self._send(writer, fault.status, data, keep_alive=keep, extra_headers=fault.headers)

    def _openai_usage(self, body: Mapping[str, Any], content: str) -> dict[str, int]:
        prompt = _prompt_tokens(body.get("messages"))
        completion = _approx_tokens(content)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _openai_completion(self, body: Mapping[str, Any], content: str, seq: int) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-loopback-{seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "system_fingerprint": "fp_loopback",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": self._openai_usage(body, content),
        }

    def _text_completion(self, body: Mapping[str, Any], content: str, seq: int) -> dict[str, Any]:
        finish = "stop"
        limit = body.get("max_tokens")
        if isinstance(limit, int) and limit > 0 and _approx_tokens(content) > limit:
            # Cut where a server would stop sampling (about four characters a token).
            content, finish = content[: 4 * limit], "length"
        prompt = _approx_tokens(str(body.get("prompt") or ""))
        completion = _approx_tokens(content)
        return {
            "id": f"cmpl-loopback-{seq}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "text": content, "logprobs": None, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    def _ollama_message(
        self, body: Mapping[str, Any], content: str, started: float, *, done: bool
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "model": body.get("model") or self.model,
            "created_at": _OLLAMA_CREATED_AT,
            "message": {"role": "assistant", "content": content},
            "done": done,
        }
        if done:
            elapsed_ns = int((time.monotonic() - started) * 1e9)
            message.update(
                done_reason="stop",
                total_duration=elapsed_ns,
                load_duration=0,
                prompt_eval_count=_prompt_tokens(body.get("messages")),
                prompt_eval_duration=0,
                eval_count=_approx_tokens(content),
                eval_duration=elapsed_ns,
            )
        return message

    async def _start_chunked(
        self, writer: asyncio.StreamWriter, content_type: str, keep: bool
    ) -> None:
        headers = [
            ("Content-Type", content_type),
            ("Transfer-Encoding", "chunked"),
            ("Cache-Control", "no-cache"),
            *self._common_headers(keep),
        ]
        writer.write(_response_head(200, headers))

    async def _stream_ollama(
        self,
        writer: asyncio.StreamWriter,
        body: Mapping[str, Any],
        content: str,
        keep: bool,
        truncate: bool,
        started: float,
    ) -> bool:
        await self._start_chunked(writer, "application/x-ndjson", keep)
        first = self._ollama_message(body, content, started, done=False)
        writer.write(_chunk(_json_bytes(first) + b"\n"))
        if truncate:
            await writer.drain()
            return False
        final = self._ollama_message(body, "", started, done=True)
        # The final chunk reports the counts of the whole answer, not of its empty content.
        final["eval_count"] = _approx_tokens(content)
        writer.write(_chunk(_json_bytes(final) + b"\n") + b"0\r\n\r\n")
        await writer.drain()
        return keep

    async def _stream_openai(
        self,
        writer: asyncio.StreamWriter,
        body: Mapping[str, Any],
        content: str,
        seq: int,
        keep: bool,
        truncate: bool,
    ) -> bool:
        base = {
            "id": f"chatcmpl-loopback-{seq}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "system_fingerprint": "fp_loopback",
        }

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return _chunk(b"data: " + _json_bytes({**base, "choices": choices, **extra}) + b"\n\n")

        def choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        await self._start_chunked(writer, "text/event-stream; charset=utf-8", keep)
        writer.write(event([choice({"role": "assistant", "content": ""}, None)]))
        writer.write(event([choice({"content": content}, None)]))
        if truncate:
            await writer.drain()
            return False
        writer.write(event([choice({}, "stop")]))
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            writer.write(event([], usage=self._openai_usage(body, content)))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return keep

    # ---- control endpoints (subprocess mode) ------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters as served by ``GET /_loopback/stats``.

        Returns:
            count, in_flight, max_in_flight, connections, queued.
        """
        with self._lock:
            return {
                "count": len(self._requests),
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
                "connections": self._connections,
                "queued": len(self._queue),
            }

    async def _handle_control(self, req: _Request, writer: asyncio.StreamWriter) -> bool:
        keep = req.keep_alive
        action = req.path[len(_CONTROL_PREFIX) :]
        if action == "stats" and req.method == "GET":
            return await self._send_json(writer, self.stats(), keep_alive=keep)
        if req.method != "POST":
            return await self._send_error(writer, 405, "use POST", "openai", keep_alive=keep)
        try:
            payload = json.loads(req.body.decode("utf-8")) if req.body else {}
            if not isinstance(payload, dict):
                raise ValueError("control body must be a JSON object")
            if action == "enqueue":
                self.enqueue(*(Fault.parse(str(spec)) for spec in payload.get("faults", [])))
            elif action == "default":
                spec = payload.get("fault")
                self.set_default_fault(None if spec is None else Fault.parse(str(spec)))
            elif action == "every":
                spec = payload.get("fault")
                fault = None if spec is None else Fault.parse(str(spec))
                self.fault_every(int(payload.get("n", 0)), fault)
            elif action == "reset":
                self.reset()
            else:
                return await self._send_error(
                    writer, 404, f"unknown control action {action!r}", "openai", keep_alive=keep
                )
        except (ValueError, TypeError) as exc:
            return await self._send_error(writer, 400, str(exc), "openai", keep_alive=keep)
        return await self._send_json(writer, self.stats(), keep_alive=keep)


# --------------------------------------------------------------------------------------------
# Subprocess entry point
# --------------------------------------------------------------------------------------------


async def _serve_until_signalled(server: LoopbackLLMServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await server.serve(stop, on_ready=lambda port: print(f"LISTENING {port}", flush=True))


def main(argv: list[str] | None = None) -> int:
    """Run the server in the foreground until SIGTERM/SIGINT.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        Process exit status.
    """
    parser = argparse.ArgumentParser(
        description="Loopback OpenAI/Ollama-compatible LLM server with fault injection."
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--port", type=int, default=0, help="port (0 = pick a free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay per chat answer")
    parser.add_argument("--model", default="loopback-model", help="advertised model name")
    parser.add_argument(
        "--enqueue", action="append", default=[], metavar="SPEC", help="queue a fault (repeatable)"
    )
    parser.add_argument("--default-fault", metavar="SPEC", help="fault for every request")
    parser.add_argument(
        "--fault-every", nargs=2, metavar=("N", "SPEC"), help="fault for every N-th request"
    )
    args = parser.parse_args(argv)

    server = LoopbackLLMServer(args.host, args.port, latency_ms=args.latency_ms, model=args.model)
    try:
        server.enqueue(*(Fault.parse(spec) for spec in args.enqueue))
        if args.default_fault:
            server.set_default_fault(Fault.parse(args.default_fault))
        if args.fault_every:
            server.fault_every(int(args.fault_every[0]), Fault.parse(args.fault_every[1]))
    except ValueError as exc:
        parser.error(str(exc))
    asyncio.run(_serve_until_signalled(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
