"""Past its first rows a session's inserts go to a writer process: the store holds the same rows
as when it commits them itself, finds an answer sent but not yet committed, commits what it was
sent when the run is killed (and the next session waits for it), and when the writer stops or
fails the store commits what it had not confirmed itself: nothing is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.engine import store as store_module
from biasim.simulator.engine import store_signing, store_writer
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.engine.store import CallRecord, CallStore
from biasim.simulator.engine.store_writer import WriterError, lock_path
from biasim.simulator.llm.types import LLMResponse
from tests import pipeline_studies
from tests.conftest import answered_calls
from tests.e2e.test_power_fast_path import HOW

#: Every column but when the row was written.
COLUMNS = (
    "id, key, unit_id, stage, role, backend, model, reask, request, status, text, parsed, error, "
    "prompt_tokens, completion_tokens, latency_s, attempts, truncated, server, from_store, "
    "cost_usd, probabilities, checksum"
)


def _call(i: int) -> tuple[CallRecord, LLMResponse]:
    call = CallRecord(f"k{i}", f"u{i}", "s", "r", "b", "m", f'{{"n": {i}}}', cost_usd=0.5 * i)
    return call, LLMResponse(
        text=f"answer {i}",
        parsed={"i": i},
        status="answered" if i % 7 else "invalid",
        latency_s=i / 3,
        prompt_tokens=i,
    )


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {COLUMNS} FROM calls ORDER BY id").fetchall()


def _record_all(store: CallStore, n: int) -> None:
    async def scenario() -> None:
        for i in range(n):
            store.record(*_call(i))
            if i % 10 == 0:
                await asyncio.sleep(0)  # a loop turn: the rows so far go as one batch

    asyncio.run(scenario())


@pytest.fixture
def offload(monkeypatch: pytest.MonkeyPatch) -> None:
    # From the first batch on, as a large run does from its 10,000th row.
    monkeypatch.setattr(store_module, "_OFFLOAD_AFTER", 0)


def test_the_writer_process_stores_the_rows_the_store_would(tmp_path: Path, offload) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "_OFFLOAD_AFTER", 10**9)
        itself = CallStore(tmp_path / "itself.sqlite")
        _record_all(itself, 95)
        assert itself._writer is None
        itself.close()
    # The same key, so the same rows carry the same keyed checksums.
    (tmp_path / "offloaded.key").write_bytes((tmp_path / "itself.key").read_bytes())
    offloaded = CallStore(tmp_path / "offloaded.sqlite")
    _record_all(offloaded, 95)
    assert offloaded._writer is not None  # the path meant is the path taken
    totals = offloaded.totals()
    assert totals["by_role"][0]["calls"] == 95 and offloaded.answer_count() == 95
    offloaded.close()
    assert _rows(tmp_path / "offloaded.sqlite") == _rows(tmp_path / "itself.sqlite")
    assert not Path(lock_path(str(tmp_path / "offloaded.sqlite"))).exists()


def _send_all(store: CallStore, n: int) -> None:
    """Record ``n`` calls in one event-loop turn and send them, waiting for nothing."""

    async def scenario() -> None:
        for i in range(n):
            store.record(*_call(i))
        store._commit_pending()

    asyncio.run(scenario())


def test_an_answer_sent_but_not_yet_committed_is_found(tmp_path: Path, offload) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    _send_all(store, 30_000)  # the writer has a backlog when the lookup comes
    found = store.lookup("k29999")
    assert found is not None and found.text == "answer 29999" and found.cached
    store.close()


def test_the_writer_ignores_ctrl_c(tmp_path: Path, offload) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    _record_all(store, 20)
    store._commit_pending()
    os.kill(store._writer._child.pid, signal.SIGINT)  # as a Ctrl-C reaches the whole group
    time.sleep(0.2)
    _record_all(store, 40)  # the same keys again: new rows
    store.flush()
    store.close()
    assert len(_rows(tmp_path / "calls.sqlite")) == 60


KILLED_RUN = """
import os, signal, sys
from biasim.simulator.engine import store as store_module
from tests.unit.engine.test_store_writer import _send_all
store_module._OFFLOAD_AFTER = 0
store_module._MAX_PENDING = 10**9  # one batch: the writer is still at it when this one dies
store = store_module.CallStore(sys.argv[1])
_send_all(store, {n})
os.kill(os.getpid(), signal.SIGKILL)  # nothing waits for the writer: it goes on alone
"""


def test_a_killed_runs_writer_commits_what_it_was_sent(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    # Output to a file, not a pipe: waiting for a pipe's end would wait for the writer too.
    with (tmp_path / "stderr.txt").open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(KILLED_RUN.format(n=60_000)), str(path)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=Path(__file__).parents[3],
            timeout=120,
        )
    assert done.returncode == -signal.SIGKILL, (tmp_path / "stderr.txt").read_text()
    # The next session waits for the writer the killed run left before it reads the store.
    store = CallStore(path)
    assert store.answer_count() == 60_000
    assert store._next_id == 60_001  # a new row never takes an id the writer used
    store.close()
    assert not Path(lock_path(str(path))).exists()


def test_a_writer_that_stops_loses_nothing(
    tmp_path: Path, offload, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_MAX_PENDING", 10**9)  # one batch of them all
    store = CallStore(tmp_path / "calls.sqlite")
    _send_all(store, 30_000)
    store._writer._child.kill()  # mid-batch, or before it began
    store.record(*_call(30_000))  # sent to no writer: committed here, after the others
    assert store._writer is None
    store.close()
    rows = _rows(tmp_path / "calls.sqlite")
    assert [row[0] for row in rows] == list(range(1, 30_002))  # each once, none lost


def test_a_failed_writer_is_let_go_and_its_rows_committed_here(tmp_path: Path, offload) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    store.record(*_call(1))
    store.flush()
    store._writer._child.kill()
    store._writer._child.wait()
    store.record(*_call(2))  # outside an event loop a row is committed at once
    assert store._writer is None and store.answer_count() == 2
    store.close()


def test_a_left_writer_that_never_ends_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    monkeypatch.setattr(store_writer, "_LEFT_WRITER_WAIT_S", 0.2)
    path = tmp_path / "calls.sqlite"
    with open(lock_path(str(path)), "w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        with pytest.raises(WriterError, match=r"earlier session \(of pid 4242\) is still"):
            CallStore(path)


def test_a_second_store_on_the_file_commits_itself(tmp_path: Path, offload) -> None:
    first = CallStore(tmp_path / "calls.sqlite")
    _record_all(first, 20)
    assert first._writer is not None
    second = CallStore(tmp_path / "calls.sqlite")  # this process's writer: no wait
    second._next_id = 1000
    _record_all(second, 20)
    assert second._writer is None  # the file has a writer already
    second.close()
    first.close()
    assert len(_rows(tmp_path / "calls.sqlite")) == 40


def test_a_backends_own_value_types_are_stored_as_plain_ones(tmp_path: Path, offload) -> None:
    import numpy as np

    store = CallStore(tmp_path / "calls.sqlite")
    call, response = _call(5)
    response.text = np.str_("answer 5")
    response.prompt_tokens = np.int64(12)
    response.latency_s = np.float64(0.25)
    store.record(call, response)
    store.flush()
    store.close()
    with sqlite3.connect(tmp_path / "calls.sqlite") as conn:
        stored = conn.execute(
            "SELECT text, typeof(text), prompt_tokens, typeof(prompt_tokens), latency_s, "
            "typeof(latency_s) FROM calls"
        ).fetchall()
    assert stored == [("answer 5", "text", 12, "integer", 0.25, "real")]


def test_a_run_through_the_writer_is_the_run_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    runs = []
    # One key for both runs' stores, so the same answers carry the same checksums.
    monkeypatch.setattr(store_signing, "token_bytes", lambda n: b"k" * n)
    for name, after in (("itself", 10**9), ("offloaded", 0)):
        monkeypatch.setattr(store_module, "_OFFLOAD_AFTER", after)
        outcome = execute(prepare(RunOptions(study=str(path), out=tmp_path / name, seed=7)))
        assert outcome.status == "complete"
        stored = _rows(tmp_path / name / "calls.sqlite")
        runs.append(
            (outcome.results.drop(columns=[c for c in HOW if c in outcome.results]), stored)
        )
    pd.testing.assert_frame_equal(runs[0][0], runs[1][0])
    strip = [row[:15] + row[16:] for _, rows in runs for row in rows]  # not the latency
    assert strip[: len(runs[0][1])] == strip[len(runs[0][1]) :] and runs[0][1]


@pytest.mark.slow  # a subprocess run of 12,000 calls killed past the writer's start
def test_a_run_killed_while_its_writer_commits_resumes_exactly_once(tmp_path: Path) -> None:
    from tests.conftest import write_study

    study = write_study(tmp_path / "s.yaml", agents=2000, replicates=2, latency_ms=2)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "biasim", "run", str(study), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while answered_calls(out / "calls.sqlite") < store_module._OFFLOAD_AFTER + 200:
        assert proc.poll() is None, "the run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    done = subprocess.run(
        [sys.executable, "-m", "biasim", "run", "--resume", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 12_000 and results["unit_id"].is_unique
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == 12_000  # nothing answered was asked again


@pytest.mark.parametrize("why", ["one core", "no interpreter"])
def test_without_a_writer_process_the_store_commits_itself(
    tmp_path: Path, offload, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    if why == "one core":
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    else:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "missing-python"))
    store = CallStore(tmp_path / "calls.sqlite")
    _record_all(store, 30)
    assert store._writer is None
    assert store.answer_count() == 30
    store.close()


def test_an_edited_answer_asked_again_is_found_while_the_writer_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "calls.sqlite"
    earlier = CallStore(path)
    earlier.record(*_call(7))
    earlier.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE calls SET text = 'edited' WHERE key = 'k7'")
    monkeypatch.setattr(store_module, "_OFFLOAD_AFTER", 0)
    store = CallStore(path)
    assert store.lookup("k7") is None  # edited: asked again, and stored anew

    async def backlog_then_k7() -> None:
        for i in [*range(8, 30_000), 7]:  # k7's new answer last, behind a backlog
            store.record(*_call(i))
        store._commit_pending()

    asyncio.run(backlog_then_k7())
    found = store.lookup("k7")
    assert found is not None and found.text == "answer 7"
    store.close()
