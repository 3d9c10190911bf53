"""A loopback stub of Anthropic's Messages API for tests (standard library only).

``POST /v1/messages`` answers a forced tool call with an input built from the tool's schema
(the loopback OpenAI server's builder), or a text block; usage counts about four characters a
token. Requests (body and headers) are recorded; ``faults`` is a queue of ``(status, headers,
body)`` answered first, in order.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback_llm_server import _approx_tokens, build_from_schema, stable_hash


class AnthropicStub:
    """Serves on 127.0.0.1 on a free port while used as a context manager."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults: list[tuple[int, dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub._lock:
                    stub.requests.append({"body": body, "headers": dict(self.headers)})
                    fault = stub.faults.pop(0) if stub.faults else None
                status, headers, payload = fault or (200, {}, stub.answer(body))
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """A message: the forced tool's input, or text."""
        prompt = json.dumps(body["messages"]) + body.get("system", "")
        tools = body.get("tools") or []
        if tools:
            made = build_from_schema(tools[0]["input_schema"], stable_hash(prompt))
            block: dict[str, Any] = {"type": "tool_use", "id": "t1", "name": "answer"}
            block["input"] = made
            out = json.dumps(made)
        else:
            out = "stub answer"
            block = {"type": "text", "text": out}
        return {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": "tool_use" if tools else "end_turn",
            "usage": {"input_tokens": _approx_tokens(prompt), "output_tokens": _approx_tokens(out)},
        }

    def __enter__(self) -> AnthropicStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
