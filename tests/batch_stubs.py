"""Loopback stubs of the two batch protocols for tests (standard library only).

:class:`OpenAIBatchStub` speaks OpenAI's Batch API under ``/v1`` (``POST /files`` multipart
upload, ``POST /batches``, ``GET /batches/{id}``, ``GET /files/{id}/content``) beside live
``POST /chat/completions``; :class:`AnthropicBatchStub` speaks Message Batches (``POST
/v1/messages/batches``, ``GET /v1/messages/batches/{id}``, its ``results_url``) beside live
``POST /v1/messages``.

Both count what they would bill: ``billed`` counts answers given per request fingerprint (the
request body as sent, which holds the call's seed on OpenAI) and ``items`` every batch item per
``custom_id``, so a test sees a request paid twice. Knobs a test sets: ``hold`` (batches stay
pending until cleared), ``errored`` (how many items of each batch error), ``expire`` (batches
end ``expired`` with only their first half answered), ``forget`` (a batch is looked up as
unknown: 404).
"""

from __future__ import annotations

import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.anthropic_stub import AnthropicStub
from tests.loopback_llm_server import _approx_tokens, build_from_schema, stable_hash

Reply = tuple[int, bytes]


def fingerprint(body: dict[str, Any]) -> str:
    """One request's identity: its body as sent (a batch item's ``body``/``params``)."""
    return json.dumps(body, sort_keys=True)


def _multipart_file(content_type: str, raw: bytes) -> bytes:
    """The ``file`` part of a multipart form."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    for part in raw.split(b"--" + boundary):
        head, _, data = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return data.removesuffix(b"\r\n")
    raise ValueError("no file part")


class _BatchStub:
    """The HTTP plumbing and the counters both stubs share."""

    def __init__(self) -> None:
        self.billed: collections.Counter[str] = collections.Counter()
        self.items: collections.Counter[str] = collections.Counter()
        self.batches: dict[str, dict[str, Any]] = {}
        self.live = 0
        self.polls = 0
        self.headers: list[dict[str, str]] = []
        self.hold = False
        self.errored = 0
        self.expire = False
        #: Answer 404 to every look at a batch, as for one the provider no longer keeps.
        self.forget = False
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with stub._lock:
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    status, data = stub.route(method, self.path, dict(self.headers), raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                self._serve("POST")

            def do_GET(self) -> None:
                self._serve("GET")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        raise NotImplementedError

    def _bill(self, body: dict[str, Any]) -> None:
        self.billed[fingerprint(body)] += 1

    def _split(self, items: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
        """Which items a batch answers and which it fails (errored, then expired)."""
        for custom_id, _ in items:
            self.items[custom_id] += 1
        failing = items[: self.errored]
        rest = items[self.errored :]
        if self.expire:
            half = len(rest) // 2
            return rest[:half], failing + rest[half:]
        return rest, failing

    def __enter__(self) -> _BatchStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


class OpenAIBatchStub(_BatchStub):
    """OpenAI's Batch API and chat completions; ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, bytes] = {}

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """A chat completion: an object built from the schema asked for, else text."""
        prompt = json.dumps(body["messages"])
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        made = build_from_schema(schema, stable_hash(prompt, body.get("seed"))) if schema else None
        content = json.dumps(made) if schema else "loopback answer"
        usage = {"prompt_tokens": _approx_tokens(prompt), "completion_tokens": 5}
        message = {"role": "assistant", "content": content}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "choices": [choice],
            "usage": usage,
        }

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method == "POST" and path == "/v1/chat/completions":
            body = json.loads(raw)
            self.live += 1
            self._bill(body)
            return 200, _json(self.completion(body))
        if method == "POST" and path == "/v1/files":
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = _multipart_file(headers["Content-Type"], raw)
            return 200, _json({"id": file_id, "object": "file", "purpose": "batch"})
        if method == "POST" and path == "/v1/batches":
            return self._create(json.loads(raw))
        if method == "GET" and path.startswith("/v1/batches/"):
            return self._retrieve(path.rsplit("/", 1)[1])
        if method == "GET" and path.startswith("/v1/files/") and path.endswith("/content"):
            file_id = path.split("/")[3]
            return (200, self.files[file_id]) if file_id in self.files else (404, b"{}")
        return 404, _json({"error": {"message": f"no route {method} {path}"}})

    def _create(self, request: dict[str, Any]) -> Reply:
        content = self.files.get(request.get("input_file_id", ""))
        if content is None or request.get("completion_window") != "24h":
            return 400, _json({"error": {"message": "bad batch request", "code": "invalid"}})
        lines = [json.loads(line) for line in content.splitlines() if line.strip()]
        assert all(line["url"] == request["endpoint"] == "/v1/chat/completions" for line in lines)
        batch_id = f"batch_{len(self.batches) + 1}"
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": request["endpoint"],
            "input_file_id": request["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "_items": [(line["custom_id"], line["body"]) for line in lines],
        }
        return 200, _json(self._public(batch_id))

    def _public(self, batch_id: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[batch_id].items() if not k.startswith("_")}

    def _retrieve(self, batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or self.forget:
            return 404, _json({"error": {"message": "no such batch"}})
        self.polls += 1
        if self.hold:
            batch["status"] = "in_progress"
        elif batch["status"] in ("validating", "in_progress"):
            self._finish(batch)
        return 200, _json(self._public(batch_id))

    def _finish(self, batch: dict[str, Any]) -> None:
        answered, failed = self._split(batch["_items"])
        out, err = [], []
        for custom_id, body in answered:
            self._bill(body)
            response = {"status_code": 200, "request_id": "req", "body": self.completion(body)}
            out.append(
                {"id": "batch_req", "custom_id": custom_id, "response": response, "error": None}
            )
        for custom_id, _ in failed:
            code = "batch_expired" if self.expire else "server_error"
            error = {"code": code, "message": "not processed" if self.expire else "boom"}
            err.append(
                {"id": "batch_req", "custom_id": custom_id, "response": None, "error": error}
            )
        for key, lines in (("output_file_id", out), ("error_file_id", err)):
            if lines:
                file_id = f"file-{len(self.files) + 1}"
                self.files[file_id] = b"\n".join(_json(line) for line in lines)
                batch[key] = file_id
        batch["status"] = "expired" if self.expire else "completed"


class AnthropicBatchStub(_BatchStub):
    """Anthropic's Message Batches and Messages API; ``base_url`` is the server."""

    base_url = _BatchStub.root

    def route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method == "POST" and path == "/v1/messages":
            body = json.loads(raw)
            self.live += 1
            self._bill(body)
            return 200, _json(AnthropicStub.answer(self, body))  # type: ignore[arg-type]
        if method == "POST" and path == "/v1/messages/batches":
            requests = json.loads(raw)["requests"]
            batch_id = f"msgbatch_{len(self.batches) + 1:04d}"
            items = [(r["custom_id"], r["params"]) for r in requests]
            self.batches[batch_id] = {"status": "in_progress", "_items": items, "_results": None}
            return 200, _json(self._public(batch_id))
        if method == "GET" and path.endswith("/results"):
            batch = self.batches[path.split("/")[4]]
            return 200, b"\n".join(_json(line) for line in batch["_results"])
        if method == "GET" and path.startswith("/v1/messages/batches/") and self.forget:
            return 404, _json({"type": "error", "error": {"type": "not_found_error"}})
        if method == "GET" and path.startswith("/v1/messages/batches/"):
            batch_id = path.rsplit("/", 1)[1]
            self.polls += 1
            if not self.hold and self.batches[batch_id]["status"] == "in_progress":
                self._finish(self.batches[batch_id])
            return 200, _json(self._public(batch_id))
        return 404, _json({"type": "error", "error": {"type": "not_found_error", "message": path}})

    def _public(self, batch_id: str) -> dict[str, Any]:
        batch = self.batches[batch_id]
        ended = batch["status"] == "ended"
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": batch["status"],
            "request_counts": {"processing": 0 if ended else len(batch["_items"])},
            "results_url": f"{self.root}/v1/messages/batches/{batch_id}/results" if ended else None,
        }

    def _finish(self, batch: dict[str, Any]) -> None:
        answered, failed = self._split(batch["_items"])
        results = []
        for custom_id, params in answered:
            self._bill(params)
            message = AnthropicStub.answer(self, params)  # type: ignore[arg-type]
            results.append(
                {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
            )
        for custom_id, _ in failed:
            if self.expire:
                result: dict[str, Any] = {"type": "expired"}
            else:
                error = {"type": "api_error", "message": "boom"}
                result = {"type": "errored", "error": {"type": "error", "error": error}}
            results.append({"custom_id": custom_id, "result": result})
        batch["_results"] = results
        batch["status"] = "ended"
