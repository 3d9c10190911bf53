"""A role served by several servers: spreading, per-server limits and health, a server dying
mid-run, and what the call store and the cache keys make of it.

The pool's logic is checked on its own with a fake clock; the whole path runs on three real
loopback servers of different speeds, over both transports.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm import endpoints
from biasim.simulator.llm.endpoints import DRAIN_AFTER, FIRST_COOLDOWN_S, ServerPool
from biasim.simulator.llm.errors import FatalBackendError, OverloadedError, TransientError
from biasim.simulator.llm.registry import create_backend
from biasim.simulator.study.config import RoleConfig
from tests.loopback_llm_server import Fault, LoopbackLLMServer
from tests.unit.llm.test_backends_http import _dead_url, _request

STUDY = """\
name: fleet_study
description: one role, several servers
seed: 5
roles:
  decider:
    backend: openai
    model: loopback-model
    temperature: 0.2
    max_tokens: 64
    max_concurrency: 12
    max_attempts: 6
    backoff_s: 0.01
    max_backoff_s: 0.05
    timeout_s: 5
    options: {options}
personas:
  axes:
    gender: [male, female, non-binary]
stages:
  - name: decide
    role: decider
    prompt: "You are {{{{ persona.description }}}}. A flood is coming. Evacuate or stay?"
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
  agents_per_value: {agents}
"""


class FakeClock:
    """Stands in for ``time`` in the pool: cool-downs pass when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(endpoints, "time", fake)
    return fake


def _pool(n: int = 3, limit: int = 4) -> ServerPool:
    return ServerPool([f"http://s{i}/v1" for i in range(n)], limit, adaptive=True)


async def _take(pool: ServerPool, n: int) -> list[int]:
    return [(await pool.acquire()).index for _ in range(n)]


def test_least_outstanding_requests_and_rotation_at_light_load(clock: FakeClock) -> None:
    async def main() -> None:
        pool = _pool()
        # Nothing released: each pick goes to the server with the fewest in flight.
        assert await _take(pool, 6) == [0, 1, 2, 0, 1, 2]
        pool.release(pool.servers[1], None)
        pool.release(pool.servers[1], None)
        assert await _take(pool, 2) == [1, 1]  # server 1 now has the fewest in flight
        # One call at a time: ties go to the least used server, so all three take turns.
        light = _pool()
        order = []
        for _ in range(6):
            server = await light.acquire()
            order.append(server.index)
            light.release(server, None)
        assert order == [0, 1, 2, 0, 1, 2]

    asyncio.run(main())


def test_overload_shrinks_only_that_servers_bound(clock: FakeClock) -> None:
    async def main() -> None:
        pool = _pool(limit=8)
        first = await pool.acquire()
        pool.release(first, OverloadedError("HTTP 429", retry_after=1.0))
        assert [s.limiter.limit for s in pool.servers] == [4.0, 8.0, 8.0]
        assert not first.down  # overloaded is not unhealthy: it still answers, more slowly

    asyncio.run(main())


def test_failing_server_is_drained_probed_and_brought_back(clock: FakeClock) -> None:
    async def main() -> None:
        pool = _pool(n=2)
        bad = pool.servers[0]
        for _ in range(DRAIN_AFTER - 1):
            pool.release(await _acquire(pool, 0), TransientError("connection refused"))
            assert not bad.down  # one stray failure does not drain a server
        pool.release(await _acquire(pool, 0), TransientError("connection refused"))
        assert bad.down and bad.drains == 1
        # Drained: every new call goes to the other server.
        assert await _take(pool, 4) == [1, 1, 1, 1]
        for server in [pool.servers[1]] * 4:
            pool.release(server, None)
        # Cool-down over: exactly one probe goes to it; a failed probe doubles the cool-down.
        clock.now += FIRST_COOLDOWN_S
        assert await _take(pool, 3) == [0, 1, 1]
        pool.release(bad, TransientError("connection refused"))
        assert bad.down and bad.cooldown_s == 2 * FIRST_COOLDOWN_S
        clock.now += FIRST_COOLDOWN_S
        assert (await pool.acquire()).index == 1  # still cooling down
        clock.now += FIRST_COOLDOWN_S
        probe = await pool.acquire()
        assert probe is bad
        pool.release(bad, None)  # the probe answered: back in rotation, counters reset
        assert not bad.down and bad.cooldown_s == FIRST_COOLDOWN_S and bad.failures_in_row == 0
        # A 400 says nothing about health.
        pool.release(await _acquire(pool, 0), FatalBackendError("HTTP 400"))
        pool.release(await _acquire(pool, 0), FatalBackendError("HTTP 400"))
        assert not bad.down

    asyncio.run(main())


async def _acquire(pool: ServerPool, index: int) -> endpoints.Server:
    """Acquire until server ``index`` comes up, giving the others back."""
    others = []
    while True:
        server = await pool.acquire()
        if server.index == index:
            for other in others:
                pool.release(other, None)
            return server
        others.append(server)


def test_when_every_server_is_down_calls_still_go_out(clock: FakeClock) -> None:
    async def main() -> None:
        pool = _pool(n=2)
        for index in (0, 1):
            for _ in range(DRAIN_AFTER):
                pool.release(await _acquire(pool, index), TransientError("reset"))
        clock.now += 0.5
        pool.servers[1].down_until -= 0.25  # due back first
        # No healthy server: the call goes to the one due back first (the retry layer paces).
        assert [(await pool.acquire()).index for _ in range(2)] == [1, 1]

    asyncio.run(main())


def test_full_servers_make_callers_wait_for_a_slot(clock: FakeClock) -> None:
    async def main() -> None:
        pool = _pool(n=2, limit=1)
        a, b = await pool.acquire(), await pool.acquire()
        waiter = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()
        pool.release(b, None)
        assert (await asyncio.wait_for(waiter, 1.0)) is b
        pool.release(a, None)

    asyncio.run(main())


# --------------------------------------------------------------------------------------------
# Whole runs on three loopback servers
# --------------------------------------------------------------------------------------------


@pytest.fixture
def fleet():
    # Fast, medium and slow; the medium one dies mid-run in the test below.
    servers = [LoopbackLLMServer(latency_ms=ms) for ms in (10, 40, 120)]
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        server.stop()


def _study(tmp_path: Path, urls: list[str], transport: str, agents: int) -> Path:
    path = tmp_path / "study.yaml"
    options: dict[str, Any] = {"base_url": urls, "transport": transport}
    path.write_text(STUDY.format(options=json.dumps(options), agents=agents))
    return path


def _calls(out: Path) -> pd.DataFrame:
    with sqlite3.connect(out / "calls.sqlite") as conn:
        return pd.read_sql_query("SELECT * FROM calls", conn)


@pytest.mark.parametrize("transport", ["aiohttp", "sdk"])
def test_three_servers_one_dies_mid_run(tmp_path: Path, fleet, transport: str) -> None:
    fast, medium, slow = fleet
    urls = [srv.openai_base_url for srv in fleet]
    fast_url, medium_url, slow_url = urls  # a stopped server forgets its port
    study = _study(tmp_path, urls, transport, agents=60)
    died_at: list[int] = []

    def kill_medium() -> None:
        if medium.wait_for_count(8, timeout=30):
            died_at.append(sum(srv.count for srv in (fast, slow)))
            medium.stop()

    killer = threading.Thread(target=kill_medium)
    killer.start()
    out = tmp_path / "run"
    prepared = prepare(RunOptions(study=str(study), out=out))
    outcome = execute(prepared)
    killer.join()

    assert died_at, "the medium server never got its requests"
    results = outcome.results
    assert len(results) == 180 and results["unit_id"].is_unique
    assert (results["status"] == "answered").all()
    calls = _calls(out)
    # Every answer names the server that gave it, by its public URL.
    assert set(calls["server"]) <= set(urls) and calls["server"].notna().all()
    answered = calls["server"].value_counts()
    assert answered.get(medium_url, 0) <= medium.count  # none after it died
    # Least outstanding requests: the fast server carries most of the load, the slow the least.
    assert answered[fast_url] > answered[slow_url] > 0
    assert answered[fast_url] > 0.5 * len(calls)
    # The dead server was drained, not hammered: its failures are the calls in flight when it
    # died plus the few that found it out (and a probe or two), each retried elsewhere.
    pool = prepared.runtimes[("decider", "")].backend.pool
    stats = {s["url"]: s for s in pool.stats()}
    assert stats[medium_url]["drains"] >= 1
    failed_attempts = int(calls["attempts"].sum()) - len(calls)
    assert failed_attempts == stats[medium_url]["failed"]
    assert failed_attempts <= 12 + DRAIN_AFTER + 4
    # The role's bound stays fixed; each server adapts its own.
    assert prepared.runtimes[("decider", "")].limiter.adaptive is False
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["roles"]["decider"]["backend"]["base_url"] == sorted(urls)

    # The cache key does not name the server: replaying the run (two servers left) asks nothing.
    replay = execute(prepare(RunOptions(study=str(study), out=tmp_path / "again", replay=out)))
    assert replay.summary["calls"]["new"] == 0
    assert (replay.results["raw_text"] == results["raw_text"]).all()
    again = _calls(tmp_path / "again").set_index("key")["server"]
    assert again.to_dict() == calls.set_index("key")["server"].to_dict()


def test_an_overloaded_server_shrinks_alone(tmp_path: Path, fleet) -> None:
    fast, medium, _slow = fleet
    medium.enqueue(*[Fault.rate_limited(0.02)] * 6)
    urls = [srv.openai_base_url for srv in fleet]
    prepared = prepare(
        RunOptions(study=str(_study(tmp_path, urls, "aiohttp", agents=20)), out=tmp_path / "r")
    )
    results = execute(prepared).results
    assert (results["status"] == "answered").all()
    servers = prepared.runtimes[("decider", "")].backend.pool.servers
    shrinks = {s.url: s.limiter.shrinks for s in servers}
    assert shrinks[medium.openai_base_url] >= 1
    assert shrinks[fast.openai_base_url] == 0
    assert prepared.runtimes[("decider", "")].limiter.shrinks == 0
    assert not any(s.down for s in servers)  # overloaded, not unhealthy


def test_a_fleets_failure_names_the_server(fleet) -> None:
    dead = f"{_dead_url()}/v1"
    role = RoleConfig(
        backend="openai", model="m", options={"base_url": [dead, fleet[0].openai_base_url]}
    )

    async def main() -> tuple[str, str]:
        backend = create_backend(role)
        try:
            with pytest.raises(TransientError) as info:
                await backend.generate(_request())  # the first call goes to the first server
            return str(info.value), (await backend.generate(_request())).server or ""
        finally:
            await backend.aclose()

    reason, answered_by = asyncio.run(main())
    assert reason.startswith(f"{dead}: connection error: Connection refused")
    assert answered_by == fleet[0].openai_base_url


def test_a_hung_server_is_drained_by_the_attempt_timeout(tmp_path: Path, fleet) -> None:
    _fast, _medium, slow = fleet
    slow.set_default_fault(Fault.hang(30))  # accepts calls, never answers
    urls = [srv.openai_base_url for srv in fleet]
    study = _study(tmp_path, urls, "aiohttp", agents=40)
    # Loopback servers get 0.5 s per requested token by default; this one must time out.
    study.write_text(
        study.read_text().replace("timeout_s: 5", "timeout_s: 0.3\n    timeout_per_token_s: 0")
    )
    prepared = prepare(RunOptions(study=str(study), out=tmp_path / "run"))
    results = execute(prepared).results
    assert (results["status"] == "answered").all()
    stats = {s["url"]: s for s in prepared.runtimes[("decider", "")].backend.pool.stats()}
    hung = stats[slow.openai_base_url]
    assert hung["answered"] == 0 and hung["drains"] >= 1
    # Timed-out attempts count against the hung server alone, and draining caps them: the
    # calls it held when it was drained, and a probe now and then.
    failed = int(results["attempts"].sum()) - len(results)
    assert failed == hung["failed"] <= 12
