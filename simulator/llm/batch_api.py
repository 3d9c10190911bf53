"""The providers' batch APIs: OpenAI's Batch API and Anthropic's Message Batches.

A batch is a set of requests, each named by a ``custom_id`` (here the call's cache key), sent at
once and answered within hours at about half the live price. Both protocols come down to three
steps, which :class:`BatchAPI` names: submit the requests and get the batch's id, poll the
batch until it has ended, and read its results. A request that errored or expired inside the
batch comes back as a reason, not an answer, and the engine sends it again live.

OpenAI: ``POST /files`` (a JSONL file, ``purpose=batch``), ``POST /batches`` (its
``input_file_id``, the endpoint, ``completion_window: 24h``), ``GET /batches/{id}`` until the
status is ``completed``, ``expired``, ``failed`` or ``cancelled``, then ``GET
/files/{output_file_id}/content`` and ``GET /files/{error_file_id}/content`` (JSONL lines with
``custom_id``, ``response: {status_code, body}`` and ``error``).

Anthropic: ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``), ``GET
/v1/messages/batches/{id}`` until ``processing_status`` is ``ended``, then its ``results_url``
(JSONL lines with ``custom_id`` and ``result.type`` ``succeeded`` / ``errored`` / ``expired`` /
``canceled``). The results are read only from the server the role names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import yarl

from biasim.simulator.llm.errors import BackendError, TransientError
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: Backends with a batch API (``batch: true`` is refused at validate on any other).
BATCH_BACKENDS = frozenset({"openai", "anthropic"})
#: What a batch answered for one request: the answer, or why it has none.
Outcome = LLMResponse | str

_OPENAI_ENDED = frozenset({"completed", "expired", "failed", "cancelled"})


@dataclass(slots=True)
class BatchState:
    """A batch as the provider reports it.

    Attributes:
        id: The provider's batch id.
        ended: No request of it is still being processed.
        status: The provider's own word for its state.
        results: Per ``custom_id``, once ``ended``: the answer or why there is none.
    """

    id: str
    ended: bool
    status: str
    results: dict[str, Outcome] = field(default_factory=dict)


class BatchAPI(Protocol):
    """Submits, polls and reads one provider's batches."""

    async def submit(self, items: list[tuple[str, LLMRequest]]) -> str:
        """Send ``(custom_id, request)`` pairs as one batch; its id."""
        ...

    async def poll(self, batch_id: str) -> BatchState:
        """The batch's state, with every request's outcome once it has ended."""
        ...


class Transport(Protocol):
    async def post(self, server: int, path: str, body: dict[str, Any]) -> bytes: ...

    async def get(self, server: int, path: str) -> bytes: ...

    async def post_file(
        self, server: int, path: str, fields: dict[str, str], content: bytes
    ) -> bytes: ...


class ResultsElsewhere(BackendError):
    """A batch's results are on a server other than the role's (the allow-list covers the
    role's server only, and the key would go with the request): they are not read."""


def _json(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TransientError(f"malformed {what}: not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise TransientError(f"malformed {what}: not an object")
    return value


def _lines(raw: bytes) -> list[dict[str, Any]]:
    return [_json(line, "batch results line") for line in raw.splitlines() if line.strip()]


class OpenAIBatches:
    """The Batch API of an OpenAI server (``base`` ends in ``/v1``).

    Args:
        transport: The backend's lean transport (its first server).
        body: The chat-completions body of a request, as the live path sends it.
        answer: Reads a chat completion body into a response.
    """

    def __init__(
        self,
        transport: Transport,
        body: Callable[[LLMRequest], dict[str, Any]],
        answer: Callable[[bytes], LLMResponse],
    ) -> None:
        self._transport = transport
        self._body = body
        self._answer = answer

    async def submit(self, items: list[tuple[str, LLMRequest]]) -> str:
        lines = [
            orjson.dumps(
                {
                    "custom_id": custom_id,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": self._body(request),
                }
            )
            for custom_id, request in items
        ]
        uploaded = _json(
            await self._transport.post_file(0, "/files", {"purpose": "batch"}, b"\n".join(lines)),
            "file upload answer",
        )
        created = await self._transport.post(
            0,
            "/batches",
            {
                "input_file_id": uploaded.get("id"),
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
        )
        return str(_json(created, "batch").get("id"))

    async def poll(self, batch_id: str) -> BatchState:
        batch = _json(await self._transport.get(0, f"/batches/{batch_id}"), "batch")
        status = str(batch.get("status"))
        state = BatchState(batch_id, status in _OPENAI_ENDED, status)
        if not state.ended:
            return state
        for key in ("output_file_id", "error_file_id"):
            if batch.get(key):
                raw = await self._transport.get(0, f"/files/{batch[key]}/content")
                for line in _lines(raw):
                    state.results[str(line.get("custom_id"))] = self._outcome(line)
        return state

    def _outcome(self, line: dict[str, Any]) -> Outcome:
        response = line.get("response") or {}
        if line.get("error") or response.get("status_code") != 200:
            error = line.get("error") or (response.get("body") or {}).get("error") or {}
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else error
            return f"batch request failed: {message or response.get('status_code')} ({code})"
        try:
            return self._answer(orjson.dumps(response.get("body")))
        except BackendError as exc:
            return f"batch answer unreadable: {exc}"


class AnthropicBatches:
    """Anthropic's Message Batches (``base`` is the server, without ``/v1``).

    Args:
        transport: The backend's transport.
        base_url: The server the role names; results are read only from it.
        body: The Messages API body of a request, as the live path sends it.
        answer: Reads a message body into a response.
    """

    def __init__(
        self,
        transport: Transport,
        base_url: str,
        body: Callable[[LLMRequest], dict[str, Any]],
        answer: Callable[[bytes], LLMResponse],
    ) -> None:
        self._transport = transport
        self._base = yarl.URL(base_url)
        self._body = body
        self._answer = answer

    async def submit(self, items: list[tuple[str, LLMRequest]]) -> str:
        requests = [{"custom_id": cid, "params": self._body(r)} for cid, r in items]
        created = await self._transport.post(0, "/v1/messages/batches", {"requests": requests})
        return str(_json(created, "message batch").get("id"))

    async def poll(self, batch_id: str) -> BatchState:
        path = f"/v1/messages/batches/{batch_id}"
        batch = _json(await self._transport.get(0, path), "message batch")
        status = str(batch.get("processing_status"))
        state = BatchState(batch_id, status == "ended", status)
        if state.ended:
            raw = await self._transport.get(0, self._results_path(batch, path))
            for line in _lines(raw):
                state.results[str(line.get("custom_id"))] = self._outcome(line)
        return state

    def _results_path(self, batch: dict[str, Any], path: str) -> str:
        """The path of ``results_url`` on the role's server; a URL elsewhere is refused (the
        allow-list covers the role's server only, and the key goes with the request)."""
        url = yarl.URL(str(batch.get("results_url") or f"{path}/results"))
        if url.is_absolute() and url.origin() != self._base.origin():
            raise ResultsElsewhere(
                f"the batch's results_url points to another server ({url.host}) than the "
                f"role's ({self._base.host}); its results were not read"
            )
        prefix = self._base.path.rstrip("/")
        return url.path[len(prefix) :] if prefix and url.path.startswith(prefix) else url.path

    def _outcome(self, line: dict[str, Any]) -> Outcome:
        result = line.get("result") or {}
        kind = result.get("type")
        if kind != "succeeded":
            error = (result.get("error") or {}).get("error") or {}
            return f"batch request {kind}: {error.get('message', '')}".rstrip(": ")
        try:
            return self._answer(orjson.dumps(result.get("message")))
        except BackendError as exc:
            return f"batch answer unreadable: {exc}"
