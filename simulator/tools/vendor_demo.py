"""A loopback "vendor API" with a declared bias, for the ``aedt_audit`` walk-through and tests:
``biasim vendor-demo`` serves it on 127.0.0.1 only.

``POST /v1/score`` takes ``{"candidate": {"name", "gender", "years"}}`` and answers
``{"result": {"score": S}, "items": [{"label": "advance" | "reject"}]}`` where :func:`score` is
the declared truth: experience helps, a per-name draw spreads the scores, and a candidate whose
gender is ``female`` loses ``penalty`` (0 declares no bias). Requests without the key in
``X-Api-Key`` get 401. Faults queued with :meth:`VendorDemo.enqueue` answer the next requests
instead (a status with ``Retry-After``, a body that is not JSON), to rehearse an outage.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The declared penalty against women of the demo's scores.
PENALTY = 0.2
#: The score at or above which the demo advances a candidate.
THRESHOLD = 0.6
#: Largest request body read.
MAX_BODY_BYTES = 64 * 1024


def score(candidate: dict[str, Any], penalty: float = PENALTY) -> float:
    """The declared truth: the score the tool gives ``candidate``."""
    spread = zlib.crc32(str(candidate["name"]).encode()) % 1000 / 1000
    bias = penalty if candidate["gender"] == "female" else 0.0
    return round(0.25 + 0.05 * float(candidate["years"]) + 0.3 * spread - bias, 6)


def label(value: float) -> str:
    """The tool's decision for a score."""
    return "advance" if value >= THRESHOLD else "reject"


class VendorDemo:
    """The scorer on a thread of this process (``with VendorDemo(key) as demo: demo.url``)."""

    def __init__(
        self, key: str, penalty: float = PENALTY, port: int = 0, latency_s: float = 0.0
    ) -> None:
        self.key = key
        self.penalty = penalty
        self.latency_s = latency_s
        self.faults: list[tuple[int, str, dict[str, str]]] = []
        self.bodies: Counter[str] = Counter()
        self.seen_keys: set[str | None] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/score"

    @property
    def count(self) -> int:
        return sum(self.bodies.values())

    def enqueue(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        """Answer the next request with ``status`` and ``body`` instead of a score."""
        with self._lock:
            self.faults.append((status, body, headers or {}))

    def __enter__(self) -> VendorDemo:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, raw: str) -> tuple[int, str]:
        """The status and body of the reply to the request body ``raw``."""
        try:
            candidate = json.loads(raw)["candidate"]
            value = score(candidate, self.penalty)
        except (ValueError, KeyError, TypeError) as exc:
            return 400, json.dumps({"error": f"bad candidate: {type(exc).__name__}"})
        return 200, json.dumps({"result": {"score": value}, "items": [{"label": label(value)}]})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        tool = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:  # quiet: a request line per call
                pass

            def do_POST(self) -> None:
                size = min(int(self.headers.get("Content-Length", 0)), MAX_BODY_BYTES)
                raw = self.rfile.read(size).decode(errors="replace")
                with tool._lock:
                    tool.bodies[raw] += 1
                    tool.seen_keys.add(self.headers.get("X-Api-Key"))
                    fault = tool.faults.pop(0) if tool.faults else None
                if tool.latency_s:
                    time.sleep(tool.latency_s)
                if fault is not None:
                    self._send(*fault)
                elif self.headers.get("X-Api-Key") != tool.key:
                    self._send(401, '{"error": "bad key"}', {})
                else:
                    self._send(*tool.answer(raw), {})

            def _send(self, status: int, body: str, headers: dict[str, str]) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
