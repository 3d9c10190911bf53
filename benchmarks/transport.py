"""(f) Client throughput of the openai backend's transports against plain aiohttp.

A loopback OpenAI-protocol server answers every call after 100 ms. Three clients send the same
structured chat request from ``concurrency`` tasks, in the same run, alternating:

* ``biasim lean``: a role's :class:`BackendRuntime` on the default aiohttp transport, i.e. what
  the engine does for every call below the stage (rate and concurrency limits, the server pool,
  the retry layer, the request body, the transport, parsing the answer);
* ``biasim SDK``: the same with ``transport: sdk`` (the official ``openai`` client);
* ``plain aiohttp``: one session posting the orjson body and parsing the answer, nothing else,
  the ceiling a Python client on this interpreter can reach.

Client CPU per call is this process's CPU time (``time.process_time``) over the timed calls; the
server runs in its own process. With two or more cores, client and server are pinned to
different ones for the duration. Timings on a shared machine are noisy, so each contender is
measured ``rounds`` times (interleaved) and the best round is reported, and the targets are
ratios to plain aiohttp measured in the same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from biasim.simulator.llm.registry import create_backend
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.types import LLMRequest
from biasim.simulator.study.config import RoleConfig

from .orchestration import LATENCY_S, LoopbackServer, pinned

LEVELS = (64, 256)
#: Target throughput as a share of plain aiohttp's, per concurrency.
TARGETS = {64: 0.95, 256: 0.80}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["Evacuate", "Stay"]},
        "rationale": {"type": "string", "maxLength": 100},
    },
    "required": ["decision", "rationale"],
}


def _request(i: int) -> LLMRequest:
    return LLMRequest(
        messages=({"role": "user", "content": f"Agent {i}: a flood is coming. Evacuate or stay?"},),
        temperature=0.2,
        top_p=1.0,
        max_tokens=64,
        seed=i,
        json_schema=SCHEMA,
    )


def _body(i: int) -> dict[str, Any]:
    """What the openai backend sends for :func:`_request` (same fields, same schema)."""
    return {
        "model": "loopback-model",
        "temperature": 0.2,
        "top_p": 1.0,
        "seed": i,
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": f"Agent {i}: a flood is coming. Evacuate or stay?"}
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
        },
    }


async def _drive(call: Callable[[int], Awaitable[None]], concurrency: int, calls: int) -> dict:
    """Warm every connection, then time ``calls`` calls from ``concurrency`` tasks."""
    await asyncio.gather(*(call(i) for i in range(concurrency)))
    todo = iter(range(calls))

    async def worker() -> None:
        for i in todo:
            await call(i)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"calls_per_s": calls / wall, "cpu_ms_per_call": 1000 * cpu / calls}


async def _biasim(base_url: str, transport: str, concurrency: int, calls: int) -> dict:
    role = RoleConfig(
        backend="openai",
        model="loopback-model",
        max_concurrency=concurrency,
        options={"base_url": base_url, "transport": transport},
    )
    runtime = BackendRuntime(create_backend(role), concurrency=concurrency, policy=RetryPolicy())

    async def call(i: int) -> None:
        response = await runtime.complete(_request(i))
        if response.status == "error":
            raise RuntimeError(response.error)

    try:
        return await _drive(call, concurrency, calls)
    finally:
        await runtime.backend.aclose()


async def _plain(base_url: str, concurrency: int, calls: int) -> dict:
    import aiohttp

    url = f"{base_url}/chat/completions"
    headers = {"Authorization": "Bearer x", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), headers=headers
    ) as session:

        async def call(i: int) -> None:
            async with session.post(url, data=orjson.dumps(_body(i))) as response:
                answer = orjson.loads(await response.read())
            if response.status != 200 or not answer["choices"][0]["message"]["content"]:
                raise RuntimeError(f"HTTP {response.status}")

        return await _drive(call, concurrency, calls)


CONTENDERS: dict[str, Callable[[str, int, int], Awaitable[dict]]] = {
    "biasim lean": lambda url, c, n: _biasim(url, "aiohttp", c, n),
    "biasim SDK": lambda url, c, n: _biasim(url, "sdk", c, n),
    "plain aiohttp": _plain,
}


def run(rounds: int = 3, calls_per_task: int = 12) -> dict[str, Any]:
    """Best of ``rounds`` interleaved rounds per contender and concurrency."""
    results: dict[str, dict[int, dict]] = {name: {} for name in CONTENDERS}
    server = LoopbackServer()
    with server as base_url, pinned(server.proc.pid) as on_own_cores:
        for _ in range(rounds):
            for concurrency in LEVELS:
                for name, contender in CONTENDERS.items():
                    measured = asyncio.run(
                        contender(base_url, concurrency, concurrency * calls_per_task)
                    )
                    best = results[name].get(concurrency)
                    if best is None or measured["calls_per_s"] > best["calls_per_s"]:
                        results[name][concurrency] = measured
    plain = results["plain aiohttp"]
    levels = []
    for concurrency in LEVELS:
        row: dict[str, Any] = {
            "concurrency": concurrency,
            "ideal_calls_per_s": concurrency / LATENCY_S,
            "target_vs_plain": TARGETS[concurrency],
        }
        for name in CONTENDERS:
            measured = results[name][concurrency]
            row[name] = {
                **measured,
                "vs_plain": measured["calls_per_s"] / plain[concurrency]["calls_per_s"],
            }
        row["meets_target"] = row["biasim lean"]["vs_plain"] >= TARGETS[concurrency]
        levels.append(row)
    return {
        "latency_s": LATENCY_S,
        "rounds": rounds,
        "pinned": on_own_cores,
        "levels": levels,
        "meets_target": all(row["meets_target"] for row in levels),
    }
