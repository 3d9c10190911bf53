"""Cache keys cover everything that changes an answer; the store replays answers, never errors."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from biasim.simulator.engine.store import CallRecord, CallStore
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.llm.types import LLMRequest, LLMResponse


class FakeBackend:
    name = "fake"
    synthetic = False
    default_concurrency = 4

    def __init__(self, model: str = "m1") -> None:
        self.model = model

    def identity(self) -> dict:
        return {"backend": self.name, "model": self.model}

    async def generate(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(text="{}")

    async def aclose(self) -> None:
        return None


def runtime(backend=None) -> BackendRuntime:
    return BackendRuntime(backend or FakeBackend(), concurrency=2, policy=RetryPolicy())


BASE = LLMRequest(
    messages=({"role": "user", "content": "hi"},),
    temperature=0.2,
    top_p=1.0,
    max_tokens=10,
    seed=1,
    json_schema={"type": "object"},
    replicate=0,
    attributes=(("gender", "female"),),
)


@pytest.mark.parametrize(
    "change",
    [
        {"messages": ({"role": "user", "content": "hi!"},)},
        {"messages": ({"role": "system", "content": "hi"},)},
        {"temperature": 0.3},
        {"top_p": 0.9},
        {"max_tokens": 11},
        {"seed": 2},
        {"replicate": 1},
        {"json_schema": {"type": "object", "required": ["a"]}},
    ],
)
def test_every_answer_changing_field_changes_the_key(change: dict) -> None:
    rt = runtime()
    assert rt.cache_key(BASE)[0] != rt.cache_key(dataclasses.replace(BASE, **change))[0]


def test_backend_identity_is_in_the_key_and_attributes_only_for_synthetic() -> None:
    assert (
        runtime(FakeBackend("m1")).cache_key(BASE)[0]
        != runtime(FakeBackend("m2")).cache_key(BASE)[0]
    )
    rt = runtime()
    other = dataclasses.replace(BASE, attributes=(("gender", "male"),))
    assert rt.cache_key(BASE)[0] == rt.cache_key(other)[0]  # a real model never sees attributes
    role = SimpleNamespace(options={}, model=None, synthetic={})
    srt = runtime(SyntheticBackend(role))
    assert srt.cache_key(BASE)[0] != srt.cache_key(other)[0]
    assert rt.cache_key(BASE) == runtime().cache_key(BASE)  # deterministic across instances


def _record(key: str, status: str = "answered", text: str = "{}") -> tuple[CallRecord, LLMResponse]:
    call = CallRecord(
        key=key, unit_id="u", stage="s", role="r", backend="b", model="m", request="{}"
    )
    return call, LLMResponse(
        text=text,
        parsed={"a": 1} if status == "answered" else None,
        status=status,
        error=None if status == "answered" else "bad",
    )


def test_store_replays_answers_and_invalids_but_not_errors(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    store.record(*_record("k-ok"))
    store.record(*_record("k-invalid", "invalid", "nope"))
    store.record(*_record("k-error", "error", ""))
    store.close()
    store = CallStore(tmp_path / "calls.sqlite")
    ok = store.lookup("k-ok")
    assert ok is not None and ok.cached and ok.parsed == {"a": 1}
    invalid = store.lookup("k-invalid")
    assert invalid is not None and invalid.status == "invalid" and invalid.text == "nope"
    assert store.lookup("k-error") is None
    store.close()


def test_group_commit_is_durable_at_the_next_loop_turn(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "calls.sqlite")

    async def scenario() -> int:
        store.record(*_record("k1"))
        store.record(*_record("k2"))
        await asyncio.sleep(0)  # one event-loop turn
        # Another connection (as after a crash) sees both committed rows.
        other = sqlite3.connect(tmp_path / "calls.sqlite")
        try:
            return other.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        finally:
            other.close()

    assert asyncio.run(scenario()) == 2
    store.close()


def test_replay_source_hits_are_copied_into_the_new_store(tmp_path: Path) -> None:
    first = CallStore(tmp_path / "a.sqlite")
    first.record(*_record("k1"))
    first.close()
    second = CallStore(tmp_path / "b.sqlite", replay_from=tmp_path / "a.sqlite")
    hit = second.lookup("k1")
    assert hit is not None and hit.cached
    second.record(CallRecord("k1", "u", "s", "r", "b", "m", "{}"), hit)
    assert second.new_calls == 0
    second.close()
    third = CallStore(tmp_path / "b.sqlite")
    assert third.lookup("k1") is not None
    third.close()


def _plan(conn: sqlite3.Connection, sql: str) -> str:
    return " ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("k", 1)))


def test_keys_are_read_by_row_id_in_new_and_older_stores(tmp_path: Path) -> None:
    """A key's rows are read from its first row's id (kept in memory), in a new store and in one
    written with an older key index, as a read-only replay source or resumed (its index is
    dropped then: it only slowed writes); an edited first answer gives way to a later one, and
    the older store's unsigned answers are never replayed (the runner refuses such a store)."""
    from biasim.simulator.engine.store import _lookup_sql

    key = "0123456789abcdef" + "9" * 48
    twin = "0123456789abcdef" + "8" * 48
    store = CallStore(tmp_path / "new.sqlite")
    store.record(*_record(key))
    store.record(*_record(twin, "invalid", "nope"))
    store.close()
    store = CallStore(tmp_path / "new.sqlite")
    assert "SEARCH calls USING INTEGER PRIMARY KEY (rowid>?)" in _plan(
        store._conn, _lookup_sql(store._conn)
    )
    assert store.lookup(key).status == "answered" and store.lookup(twin).status == "invalid"
    assert store._conn.execute("PRAGMA index_list(calls)").fetchall() == []
    assert store._conn.execute("PRAGMA page_size").fetchone() == (16_384,)
    store.close()

    old = sqlite3.connect(tmp_path / "old.sqlite")
    old.executescript(
        "CREATE TABLE calls (id INTEGER PRIMARY KEY, key TEXT, unit_id TEXT, stage TEXT,"
        " role TEXT, backend TEXT, model TEXT, reask INTEGER, status TEXT, text TEXT,"
        " parsed TEXT, error TEXT, request TEXT, prompt_tokens INTEGER,"
        " completion_tokens INTEGER, latency_s REAL, attempts INTEGER, created REAL);"
        "CREATE INDEX calls_key_prefix ON calls(substr(key, 1, 16));"
    )
    for text in ('{"a": 1}', '{"a": 2}'):
        old.execute(
            "INSERT INTO calls (key, unit_id, stage, role, status, text, parsed, request)"
            " VALUES (?, 'u', 's', 'r', 'answered', ?, ?, '{}')",
            (key, text, text),
        )
    old.commit()
    old.close()
    replaying = CallStore(tmp_path / "b.sqlite", replay_from=tmp_path / "old.sqlite")
    assert replaying.has(key) and not replaying.has(twin)
    assert replaying.lookup(key) is None  # unsigned
    replaying.close()
    resumed = CallStore(tmp_path / "old.sqlite")
    assert resumed._conn.execute("PRAGMA index_list(calls)").fetchall() == []
    assert resumed._conn.execute("PRAGMA page_size").fetchone() == (4_096,)  # its own
    assert resumed.lookup(key) is None
    # Rows resumed after the old ones take the ids after them.
    resumed.record(*_record(twin))
    resumed.close()
    again = CallStore(tmp_path / "old.sqlite")
    assert again.lookup(twin).status == "answered"
    ids = [row[0] for row in again._conn.execute("SELECT id FROM calls ORDER BY id")]
    assert ids == [1, 2, 3]
    again.close()


def test_an_edited_first_answer_gives_way_to_the_keys_next_one(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    store.record(*_record("k"))
    store.record(*_record("k"))
    store.close()
    conn = sqlite3.connect(tmp_path / "calls.sqlite")
    conn.execute("UPDATE calls SET text = 'edited' WHERE id = 1")
    conn.commit()
    conn.close()
    store = CallStore(tmp_path / "calls.sqlite")
    hit = store.lookup("k")
    assert hit is not None and hit.text != "edited"
    store.close()


def test_a_hit_reads_its_row_not_the_rest_of_the_table(tmp_path: Path) -> None:
    """Counted in SQLite's virtual-machine steps, not time: a lookup of the first of 3,000 keys
    must not walk the rows after it (a cursor stepping ahead for a second row of the key did)."""
    store = CallStore(tmp_path / "calls.sqlite")
    for i in range(3_000):
        store.record(*_record(f"key-{i:05d}"))
    store.close()
    store = CallStore(tmp_path / "calls.sqlite")
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._conn.set_progress_handler(count, 10)
    assert store.lookup("key-00000") is not None
    first = steps
    steps = 0
    assert store.lookup("key-02999") is not None
    store.close()
    # Every row scanned costs several steps: 3,000 rows are far above this bound.
    assert first < 100 and steps < 100, (first, steps)


def test_totals_match_the_window_definition_on_repeated_units(tmp_path: Path) -> None:
    # Units asked once, re-asked after an invalid answer, and redone after an error (several
    # rows of one unit and reask) over two roles: the totals equal the definition's query,
    # windows over every row, which the store skips for units asked once.
    rng = random.Random(7)
    store = CallStore(tmp_path / "calls.sqlite")
    for unit in range(300):
        role = rng.choice(["writer", "reader"])
        for reask in range(rng.choice([1, 1, 2, 3])):
            for _ in range(rng.choice([1, 1, 2])):
                status = rng.choice(["answered", "invalid", "error"])
                call = CallRecord(
                    f"k{unit}-{reask}-{rng.random()}",
                    f"u{unit}",
                    "s",
                    role,
                    "b",
                    "m",
                    "{}",
                    reask=reask,
                    cost_usd=rng.choice([0.5, None, 1.0]),
                )
                store.record(
                    call,
                    LLMResponse(
                        text="x",
                        parsed={"a": 1} if status == "answered" else None,
                        status=status,
                        prompt_tokens=rng.randrange(9),
                        attempts=rng.randrange(1, 4),
                        truncated=rng.random() < 0.3,
                    ),
                )
    totals = store.totals()["by_role"]
    store.close()
    conn = sqlite3.connect(tmp_path / "calls.sqlite")
    expected = conn.execute(
        "SELECT role, backend, model, COUNT(*), COUNT(DISTINCT unit_id), "
        "SUM(last AND status='answered'), SUM(last AND status='invalid'), "
        "SUM(last AND status='error'), SUM(NOT final), "
        "SUM(final AND reask = 0 AND status='invalid'), SUM(prompt_tokens), "
        "SUM(completion_tokens), SUM(latency_s), SUM(attempts), SUM(final AND reask > 0), "
        "SUM(last AND truncated), SUM(cost_usd) FROM (SELECT *, "
        "id = MAX(id) OVER (PARTITION BY unit_id, reask) AS final, "
        "id = MAX(id) OVER (PARTITION BY unit_id) AS last FROM calls) "
        "GROUP BY role, backend, model ORDER BY role"
    ).fetchall()
    conn.close()
    assert [tuple(row.values())[:16] for row in totals] == [row[:16] for row in expected]
    assert sum(row["redone"] for row in totals) > 0 and sum(row["reasks"] for row in totals) > 0
