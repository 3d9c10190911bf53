"""(c) Orchestration throughput against a loopback OpenAI-protocol server answering after 100 ms.

The whole stack is on: render, cache lookup, rate/concurrency limits, retry layer, the openai
backend's default (aiohttp) transport over real HTTP, schema validation, the store. The ideal is
concurrency / latency. The transports themselves are compared in :mod:`benchmarks.transport`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from biasim.simulator.engine.runner import RunOptions, execute, prepare

LATENCY_S = 0.1
SERVER = Path(__file__).resolve().parent.parent / "tests" / "loopback_llm_server.py"
STUDY = """\
name: bench_orchestration
description: orchestration benchmark
roles:
  decider:
    backend: openai
    model: loopback-model
    max_concurrency: CONCURRENCY
    temperature: 0.2
    max_tokens: 64
    options: {base_url: "BASE_URL"}
personas:
  axes:
    gender: [male, female, non-binary]
stages:
  - name: decide
    role: decider
    prompt: "You are {{ persona.description }}. A flood is coming. Evacuate or stay?"
    output:
      decision: {type: choice, choices: [Evacuate, Stay]}
      rationale: {type: string, max_length: 100}
design:
  agents_per_value: AGENTS
"""
TARGET_AT_64 = 0.90
#: Calls per slot: opening the connections and the last, partly idle round are paid once per
#: stage, a cost a study of thousands of rounds does not see.
ROUNDS = 24


class LoopbackServer:
    """The loopback server in its own process, so it does not share our interpreter's core."""

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", "--latency-ms", str(LATENCY_S * 1000)],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().split() if self.proc.stdout else []
        if len(line) != 2 or line[0] != "LISTENING":
            self.proc.kill()
            raise RuntimeError(f"loopback server did not start: {line}")
        return f"http://127.0.0.1:{line[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def pinned(server_pid: int) -> Iterator[bool]:
    """Client on one core, server on another, for the duration (when there are two)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield False
        return
    os.sched_setaffinity(0, {cores[0]})
    os.sched_setaffinity(server_pid, {cores[1]})
    try:
        yield True
    finally:
        os.sched_setaffinity(0, set(cores))


def _engine(base_url: str, concurrency: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study.yaml"
        study.write_text(
            STUDY.replace("CONCURRENCY", str(concurrency))
            .replace("BASE_URL", base_url)
            .replace("AGENTS", str(calls // 3))
        )
        outcome = execute(prepare(RunOptions(study=str(study), out=Path(tmp) / "run")))
    seconds = outcome.summary["timings"]["stages_s"]["decide"]
    done = len(outcome.results)
    ideal = concurrency / LATENCY_S
    return {
        "concurrency": concurrency,
        "calls": done,
        "answered": int((outcome.results["status"] == "answered").sum()),
        "calls_per_s": done / seconds,
        "ideal_calls_per_s": ideal,
        "fraction_of_ideal": done / seconds / ideal,
    }


def _sequential(base_url: str, calls: int) -> float:
    """One agent's call after another with the plain SDK, as sequential agent stepping does."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    start = time.perf_counter()
    for i in range(calls):
        client.chat.completions.create(
            model="loopback-model",
            temperature=0.2,
            max_tokens=64,
            seed=i,
            messages=[{"role": "user", "content": f"agent {i}: evacuate or stay?"}],
        )
    client.close()
    return calls / (time.perf_counter() - start)


def _raw_sdk(base_url: str, concurrency: int, calls: int) -> float:
    """The SDK alone: ``concurrency`` tasks posting the same kind of body, no engine at all.

    This is the ceiling the engine can reach with the official client on this machine.
    """
    import asyncio

    import openai

    async def main() -> float:
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key="not-needed",
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )
        response_type = type(
            await client.post("/chat/completions", cast_to=_http_response(), body=_body(0))
        )
        todo = iter(range(calls))

        async def worker() -> None:
            for i in todo:
                await client.post("/chat/completions", body=_body(i), cast_to=response_type)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        await client.close()
        return calls / elapsed

    return asyncio.run(main())


def _http_response() -> type:
    import importlib

    sdk_http = importlib.import_module("openai._base_client")
    return (getattr(sdk_http, "httpx2", None) or sdk_http.httpx).Response


def _body(i: int) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"decision": {"type": "string", "enum": ["Evacuate", "Stay"]}},
        "required": ["decision"],
    }
    return {
        "model": "loopback-model",
        "seed": i,
        "temperature": 0.2,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": f"agent {i}: evacuate or stay?"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
    }


def run() -> dict[str, Any]:
    """Throughput at concurrency 1, 16, 64 and 256, and the sequential baseline."""
    server = LoopbackServer()
    # On two cores a client and server left to the scheduler take turns on one of them.
    with server as base_url, pinned(server.proc.pid) as on_own_cores:
        _engine(base_url, 16, 48)  # warm up imports and connections
        levels = [_engine(base_url, c, max(30, c * ROUNDS)) for c in (1, 16, 64, 256)]
        sequential = _sequential(base_url, 30)
        raw_sdk_64 = _raw_sdk(base_url, 64, 64 * ROUNDS)
    at64 = next(level for level in levels if level["concurrency"] == 64)
    return {
        "latency_s": LATENCY_S,
        "pinned": on_own_cores,
        "levels": levels,
        "sequential_calls_per_s": sequential,
        "speedup_at_64_over_sequential": at64["calls_per_s"] / sequential,
        "raw_sdk_calls_per_s_at_64": raw_sdk_64,
        "engine_vs_raw_sdk_at_64": at64["calls_per_s"] / raw_sdk_64,
        "target_fraction_at_64": TARGET_AT_64,
        "meets_target": at64["fraction_of_ideal"] >= TARGET_AT_64,
    }
