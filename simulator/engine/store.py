"""The call store: every request and response of a run in ``calls.sqlite``, doubling as the cache.

Writes are group-committed once per event-loop turn: all answers that arrived in the same turn
share one transaction, and each transaction is committed before the engine moves on, so a process
killed at any moment (even SIGKILL) keeps every answer it had acknowledged. WAL mode keeps those
commits cheap and lets readers (a progress monitor, a test) look while the run writes. Past
:data:`_OFFLOAD_AFTER` rows a session's transactions are committed by a writer process beside
the run (:mod:`store_writer`), in a session of its own: it commits everything it was sent even
when the run is killed (only a kill of both, as of a whole container, loses the batches it had
not committed yet, at most :data:`_MAX_UNCONFIRMED` rows). If it stops or fails, the store
commits whatever it had not confirmed itself. The end of every stage waits for it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from biasim.simulator.engine.store_signing import answer_checksum, new_secret, read_secret
from biasim.simulator.engine.store_writer import (
    WriterError,
    WriterProcess,
    wait_for_left_writer,
)
from biasim.simulator.llm.types import LLMResponse
from biasim.simulator.study.counterfactual import work_unit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    unit_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    role TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    reask INTEGER NOT NULL,
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    text TEXT,
    parsed TEXT,
    error TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s REAL,
    attempts INTEGER,
    created REAL NOT NULL,
    truncated INTEGER NOT NULL DEFAULT 0,
    server TEXT,
    from_store INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    probabilities TEXT,
    checksum TEXT
);
DROP INDEX IF EXISTS calls_key;
DROP INDEX IF EXISTS calls_key_prefix;
"""
# Keys are found through a map in memory (key -> id of its first replayable row), not an index:
# random 64-digit keys made every insert dirty a random index page, and each commit wrote those
# pages to the WAL (4 of a row's 12 us). A row is then read by its id; the scan goes past it
# only when an answer's checksum fails (edited), to the key's later rows.
# One row a query: a cursor steps one row ahead of the one it hands back, and without the limit
# that step searched the rest of the table for a second row of the key (every hit a scan).
_BY_KEY = "calls WHERE id >= ?2 AND key = ?1 AND status != 'error' ORDER BY id LIMIT 1"
#: WAL pages before a checkpoint copies them into the database (SQLite's default is 1,000):
#: each checkpoint syncs the file, a fifth of a stage's store time at the default. At
#: :data:`_PAGE_BYTES` the WAL then grows to 160 MB at most.
_AUTOCHECKPOINT_PAGES = 10_000
#: Page size of a new store (SQLite's default is 4 KiB; an existing store keeps its own): a row
#: holds its whole request (about 1 KB in a short study), and fewer, larger pages cut what a
#: commit writes and checksums into the WAL (9.2 -> 5.7 us per stored row).
_PAGE_BYTES = 16_384
#: Columns every store has had (later ones are added on open, see :func:`connect`).
_REQUIRED_COLUMNS = frozenset(
    {"key", "unit_id", "stage", "role", "status", "text", "parsed", "error", "request"}
)
#: A stored row's columns, in the order :meth:`CallStore.record` builds it.
_ROW = [
    "id",
    "key",
    "unit_id",
    "stage",
    "role",
    "backend",
    "model",
    "reask",
    "request",
    "status",
    "text",
    "parsed",
    "error",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "attempts",
    "created",
    "truncated",
    "server",
    "from_store",
    "cost_usd",
    "probabilities",
    "checksum",
]
_INSERT = f"INSERT INTO calls ({', '.join(_ROW)}) VALUES ({','.join('?' * len(_ROW))})"
#: The row's texts a backend hands over as it likes (the others the store makes itself; its
#: numbers it makes plain ints and floats).
_FROM_BACKEND = tuple(_ROW.index(c) for c in ("status", "text", "error", "server"))
_PLAIN_TEXT = frozenset({str, type(None)})
#: The same, skipping the rows a stopped writer process had committed (ids are the store's).
_INSERT_TAKEN_BACK = _INSERT.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# The key's first stored answer from a row id on: the first whose checksum holds is replayed.
_LOOKUP = (
    "SELECT id, status, text, parsed, error, prompt_tokens, completion_tokens, latency_s, "
    "attempts, {truncated}, {server}, {from_store}, {probabilities}, {checksum} FROM " + _BY_KEY
)
#: Rows buffered before a commit even if the event loop has not turned (a backend that never
#: awaits, like the synthetic responder, would otherwise hold everything until the stage ends).
_MAX_PENDING = 2048
#: Rows a session commits itself before a writer process takes the inserts over (with a core to
#: spare): a small run never starts one, a large one saves most of a second per 100,000 calls.
_OFFLOAD_AFTER = 10_000
#: Rows sent to the writer process between confirmations: the store keeps them until the
#: writer confirms them, to commit them itself if it stops (tens of MB for short answers; each
#: confirmation waits for the writer to catch up).
_MAX_UNCONFIRMED = 65_536
#: Settings of every connection that writes (the store's own and the writer process's).
_WRITE_PRAGMAS = (
    "PRAGMA synchronous=NORMAL",
    f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT_PAGES}",
)


@dataclass(slots=True)
class CallRecord:
    """Who made a call, for the store (not frozen: one is built per call, and a frozen
    dataclass takes three times as long to build)."""

    key: str
    unit_id: str
    stage: str
    role: str
    backend: str
    model: str
    request: str
    reask: int = 0
    #: USD billed for this call: 0 for a stored answer, ``None`` when the price is unknown.
    cost_usd: float | None = None


def connect(path: Path | str) -> sqlite3.Connection:
    """Open a call store in WAL mode with the schema in place."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA page_size={_PAGE_BYTES}")  # before WAL mode: it fixes the size
    conn.execute("PRAGMA journal_mode=WAL")
    for pragma in _WRITE_PRAGMAS:
        conn.execute(pragma)
    conn.executescript(_SCHEMA)
    columns = _columns(conn)
    if "truncated" not in columns:
        # A store written before truncation was recorded (resumed): nothing was flagged then.
        conn.execute("ALTER TABLE calls ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0")
    if "server" not in columns:
        # Nor which server answered: those rows keep NULL.
        conn.execute("ALTER TABLE calls ADD COLUMN server TEXT")
    if "from_store" not in columns:
        # Nor whether an answer was copied from a replay source: read as asked of the model.
        conn.execute("ALTER TABLE calls ADD COLUMN from_store INTEGER NOT NULL DEFAULT 0")
    if "cost_usd" not in columns:
        # Nor what a call cost: those rows count as of unknown cost.
        conn.execute("ALTER TABLE calls ADD COLUMN cost_usd REAL")
    if "probabilities" not in columns:
        conn.execute("ALTER TABLE calls ADD COLUMN probabilities TEXT")
    if "checksum" not in columns:
        # Nor a checksum: those rows keep NULL, which never verifies (see store_check).
        conn.execute("ALTER TABLE calls ADD COLUMN checksum TEXT")
    return conn


def _plain(rows: list[tuple[Any, ...]]) -> bool:
    """Whether each text a backend handed over is a plain ``str`` (or missing)."""
    return all({type(row[i]) for row in rows} <= _PLAIN_TEXT for i in _FROM_BACKEND)


def _int(value: Any) -> int | None:
    return value if value is None or type(value) is int else int(value)


def _float(value: Any) -> float | None:
    return value if value is None or type(value) is float else float(value)


def _start_writer(path: Path) -> WriterProcess | None:
    """A writer process for the store at ``path``, or ``None`` (no core to spare, or it could
    not start): the store then commits its rows itself."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cores or 1) < 2:
        return None
    try:
        return WriterProcess(str(path), _WRITE_PRAGMAS, _INSERT)
    except (OSError, WriterError):
        return None


def store_problem(path: Path, *, read_only: bool = False) -> str | None:
    """Why ``path`` cannot serve as a call store (truncated, corrupt, not SQLite, not a store of
    calls), or ``None``; it changes nothing and creates nothing.

    Args:
        path: An existing ``calls.sqlite``.
        read_only: Open it read-only (a ``--replay`` source in someone else's directory).
    """
    try:
        uri = f"{path.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            verdict = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if verdict != ["ok"]:
                return f"corrupt call store ({'; '.join(map(str, verdict[:3]))})"
            columns = _columns(conn)
            if columns and not columns >= _REQUIRED_COLUMNS:
                missing = ", ".join(sorted(_REQUIRED_COLUMNS - columns))
                return f"not a call store of biasim (table `calls` lacks {missing})"
    except sqlite3.Error as exc:  # "file is not a database", "database disk image is malformed"
        return f"unreadable call store ({exc})"
    return None


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(calls)")}


def _first_ids(conn: sqlite3.Connection) -> dict[str, int]:
    """Every key with a replayable answer, with the id of its first such row (read newest
    first, so the oldest id of a key is the one left)."""
    return dict(conn.execute("SELECT key, id FROM calls WHERE status != 'error' ORDER BY id DESC"))


def _lookup_sql(conn: sqlite3.Connection) -> str:
    # A read-only replay source may predate the columns: its answers read as not truncated,
    # from no recorded server.
    columns = _columns(conn)
    return _LOOKUP.format(
        truncated="truncated" if "truncated" in columns else "0",
        server="server" if "server" in columns else "NULL",
        from_store="from_store" if "from_store" in columns else "0",
        probabilities="probabilities" if "probabilities" in columns else "NULL",
        checksum="checksum" if "checksum" in columns else "NULL",
    )


class CallStore:
    """Append-only log of calls with cache lookups.

    Args:
        path: The run's ``calls.sqlite``.
        replay_from: Another run's ``calls.sqlite`` to answer from first; hits are copied into
            this store so the new run directory is complete on its own.
    """

    def __init__(self, path: Path | str, replay_from: Path | str | None = None) -> None:
        self.path = Path(path)
        wait_for_left_writer(str(self.path))
        # The key exists before the first answer is signed with it; a store that lost its key
        # gets a new one, so its old answers no longer verify (a resume refuses them first).
        self._secret = read_secret(self.path) or new_secret(self.path)
        self._conn = connect(self.path)
        # Keys with a replayable answer, each with its first row's id: most lookups in a fresh
        # run are misses, and the map answers those without touching the database.
        self._ids = _first_ids(self._conn)
        last = self._conn.execute("SELECT MAX(id) FROM calls").fetchone()[0]
        # Ids are given here, so a row's id is known before its commit.
        self._next_id = (last or 0) + 1
        self._replay: sqlite3.Connection | None = None
        self._replay_ids: dict[str, int] = {}
        self._lookups = {self._conn: _lookup_sql(self._conn)}
        # Each store's answers verify with its own key (a replay source without one: none do).
        self._secrets: dict[sqlite3.Connection | None, bytes | None] = {self._conn: self._secret}
        if replay_from is not None:
            # Closed by the thread that reads the totals (see runner), one thread at a time.
            self._replay = sqlite3.connect(
                f"file:{replay_from}?mode=ro", uri=True, check_same_thread=False
            )
            self._lookups[self._replay] = _lookup_sql(self._replay)
            self._secrets[self._replay] = read_secret(Path(replay_from))
            self._replay_ids = _first_ids(self._replay)
        self._pending: list[tuple[Any, ...]] = []
        self._flush_scheduled = False
        self._written = 0
        self._offload_tried = False
        # Batches the writer process was sent and has not confirmed (committed here if it
        # stops), and their rows.
        self._unconfirmed: list[list[tuple[Any, ...]]] = []
        self._unconfirmed_rows = 0
        # With a writer process: rows with an id below `_visible` are committed for sure,
        # those below `_sent` are sent to it.
        self._writer: WriterProcess | None = None
        self._visible = self._sent = self._next_id
        self.new_calls = 0
        self.cache_hits = 0

    def lookup(self, key: str) -> LLMResponse | None:
        """The stored answer for ``key`` (answered or invalid; errors are never replayed, nor
        an answer whose keyed checksum is missing or no longer matches: it was edited after it
        was stored)."""
        for conn, first in (
            (self._conn, self._ids.get(key)),
            (self._replay, self._replay_ids.get(key)),
        ):
            secret = self._secrets.get(conn)
            while conn is not None and first is not None:
                if conn is self._conn and self._visible <= first < self._sent:
                    self._wait_for_writer()  # recorded this session, perhaps not committed yet
                row = conn.execute(self._lookups[conn], (key, first)).fetchone()
                if row is None:
                    break
                (
                    rowid,
                    status,
                    text,
                    parsed,
                    error,
                    ptok,
                    ctok,
                    latency,
                    attempts,
                    truncated,
                    server,
                    stored,
                    probabilities,
                    check,
                ) = row
                if secret is None or check != answer_checksum(
                    secret, key, status, text, parsed, error, probabilities
                ):
                    first = rowid + 1  # edited or unsigned: the key's next row, if it has one
                    continue
                self.cache_hits += 1
                return LLMResponse(
                    text=text or "",
                    parsed=orjson.loads(parsed) if parsed else None,
                    status=status,
                    error=error,
                    prompt_tokens=ptok or 0,
                    completion_tokens=ctok or 0,
                    latency_s=latency or 0.0,
                    attempts=attempts or 1,
                    truncated=bool(truncated),
                    server=server,
                    probabilities=orjson.loads(probabilities) if probabilities else None,
                    cached=True,
                    extra={"replayed": True} if conn is self._replay else {},
                    # A replayed answer is from a store now; one of this run's, as it was.
                    first_cached=True if conn is self._replay else bool(stored),
                )
        return None

    def has(self, key: str) -> bool:
        """Whether a lookup of ``key`` would find an answer to replay (without counting a hit
        or checking its checksum): a batch leaves such calls out."""
        return key in self._ids or key in self._replay_ids

    def record(self, call: CallRecord, response: LLMResponse) -> None:
        """Queue a call for the next group commit (within this event-loop turn).

        A hit from this store is already recorded; a hit from a replay source is copied in.
        """
        if response.cached and not response.extra.get("replayed"):
            return
        if not response.cached:
            self.new_calls += 1
        parsed = orjson.dumps(response.parsed).decode() if response.parsed is not None else None
        probabilities = (
            orjson.dumps(response.probabilities).decode() if response.probabilities else None
        )
        # Signed here, before the row may go to the writer process (which never sees the key).
        checksum = answer_checksum(
            self._secret,
            call.key,
            response.status,
            response.text,
            parsed,
            response.error,
            probabilities,
        )
        self._pending.append(
            (
                self._next_id,
                call.key,
                call.unit_id,
                call.stage,
                call.role,
                call.backend,
                call.model,
                call.reask,
                call.request,
                response.status,
                response.text,
                parsed,
                response.error,
                # Numbers as Python's own (a plug-in may hand numpy's, which neither SQLite nor
                # the writer process's hand-off takes as numbers).
                _int(response.prompt_tokens),
                _int(response.completion_tokens),
                _float(response.latency_s),
                _int(response.attempts),
                time.time(),
                int(response.truncated),
                response.server,
                int(response.from_store),
                # A copy from a replay source was not paid by this run.
                0.0 if response.cached else _float(call.cost_usd),
                probabilities,
                checksum,
            )
        )
        if response.status != "error":
            self._ids.setdefault(call.key, self._next_id)
        self._next_id += 1
        if len(self._pending) >= _MAX_PENDING:
            self._commit_pending()
        elif not self._flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_scheduled = True
            loop.call_soon(self._commit_pending)

    def flush(self) -> None:
        """Commit every queued call; return once they are committed (also those the writer
        process was sent)."""
        self._commit_pending()
        self._wait_for_writer()

    def _commit_pending(self) -> None:
        """Commit the queued calls in one transaction: here, or handed to the writer process
        (which commits them while the run goes on)."""
        self._flush_scheduled = False
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        if not self._offload_tried and self._written + len(rows) > _OFFLOAD_AFTER:
            self._offload_tried = True
            self._writer = _start_writer(self.path)
        self._written += len(rows)
        if self._writer is not None and self._handed(rows):
            return
        self._insert(rows)
        self._visible = self._sent = self._next_id

    def _handed(self, rows: list[tuple[Any, ...]]) -> bool:
        """Whether the writer process took ``rows``; when it stopped or failed, what it had
        not confirmed is committed here (:meth:`_take_back`) and ``rows`` are not taken."""
        assert self._writer is not None
        try:
            if not _plain(rows):
                raise ValueError("a backend's text of its own type")
            self._writer.send(rows)
        except ValueError:  # a value the hand-off cannot carry as it is: committed here
            self._wait_for_writer()  # after the rows sent before, in the order of their ids
            return False
        except WriterError:
            self._take_back()
            return False
        self._unconfirmed.append(rows)
        self._sent = self._next_id  # nothing is queued behind these rows
        self._unconfirmed_rows += len(rows)
        if self._unconfirmed_rows >= _MAX_UNCONFIRMED:
            self._wait_for_writer()  # what the store keeps for a failing writer stays bounded
        return True

    def _wait_for_writer(self) -> None:
        """Return once the writer process has committed every row it was sent (or, when it
        stopped or failed, once those rows are committed here)."""
        if self._writer is None:
            return
        try:
            self._writer.sync()
        except WriterError:
            self._take_back()
            return
        self._unconfirmed.clear()
        self._unconfirmed_rows = 0
        self._visible = self._sent

    def _take_back(self) -> None:
        """Let a stopped or failed writer process go and commit here every row it had not
        confirmed (those it did commit are skipped: the store gives the ids). An SQLite error
        here is the run's, as without the writer."""
        writer, self._writer = self._writer, None
        with suppress(WriterError):
            writer.close()  # type: ignore[union-attr]
        batches, self._unconfirmed, self._unconfirmed_rows = self._unconfirmed, [], 0
        self._insert([row for batch in batches for row in batch], taken_back=True)
        self._visible = self._sent = self._next_id - len(self._pending)

    def _insert(self, rows: list[tuple[Any, ...]], *, taken_back: bool = False) -> None:
        self._conn.execute("BEGIN")
        self._conn.executemany(_INSERT_TAKEN_BACK if taken_back else _INSERT, rows)
        self._conn.execute("COMMIT")

    def totals(self) -> dict[str, Any]:
        """Per role and model: calls made, units of work (an invalid answer and its re-ask are
        one; an agent's counterfactual set is one, as the progress counts it), answers (one per
        call of a unit, twins' too) by their final state, invalid first answers, re-asks,
        calls redone after an error on ``--resume``, tokens, latency, attempts and answers cut
        at ``max_tokens``."""
        self.flush()
        # A call is `final` when no later row redid it (a failed call asked again on resume);
        # a unit's `last` row, its re-ask where there was one, is the unit's final state.
        # Only the columns counted: with `*` the window's sort carried every request and
        # answer text (most of a second at 40,000 calls). A unit asked once is its own final
        # and last row; only the units with several rows need the windows (0.98 -> 0.51 s at
        # 125,000 calls, all asked once).
        # A twin's call is part of its agent's unit of work (one definition, in Python).
        self._conn.create_function("work_unit", 2, work_unit, deterministic=True)
        columns = (
            "role, backend, model, unit_id, stage, status, reask, prompt_tokens, "
            "completion_tokens, latency_s, attempts, truncated, cost_usd"
        )
        cur = self._conn.execute(
            "WITH repeated(unit_id) AS "
            "(SELECT unit_id FROM calls GROUP BY unit_id HAVING COUNT(*) > 1) "
            "SELECT role, backend, model, COUNT(*), COUNT(DISTINCT work_unit(unit_id, stage)), "
            "SUM(last AND status='answered'), SUM(last AND status='invalid'), "
            "SUM(last AND status='error'), SUM(NOT final), "
            "SUM(final AND reask = 0 AND status='invalid'), SUM(prompt_tokens), "
            "SUM(completion_tokens), SUM(latency_s), SUM(attempts), SUM(final AND reask > 0), "
            "SUM(last AND truncated), SUM(cost_usd), SUM(cost_usd IS NULL) FROM ("
            f"SELECT {columns}, 1 AS final, 1 AS last FROM calls "
            "WHERE unit_id NOT IN repeated UNION ALL "
            f"SELECT {columns}, id = MAX(id) OVER (PARTITION BY unit_id, reask) AS final, "
            "id = MAX(id) OVER (PARTITION BY unit_id) AS last FROM calls "
            "WHERE unit_id IN repeated) "
            "GROUP BY role, backend, model ORDER BY role"
        )
        keys = (
            "role",
            "backend",
            "model",
            "calls",
            "units",
            "answered",
            "invalid",
            "error",
            "redone",
            "invalid_first",
            "prompt_tokens",
            "completion_tokens",
            "latency_s",
            "attempts",
            "reasks",
            "truncated",
            "cost_usd",
            "unpriced",
        )
        rows = [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]
        for row in rows:
            # Calls of a model without a known price leave the sum unknown, not smaller.
            if row.pop("unpriced"):
                row["cost_usd"] = None
        return {"by_role": rows, "cost_usd": self.spent()}

    def spent(self) -> float | None:
        """USD billed by every call in this store, over every session of the run (``None``
        when a call's price was unknown)."""
        self.flush()
        total, unpriced = self._conn.execute(
            "SELECT COALESCE(SUM(cost_usd), 0), SUM(cost_usd IS NULL) FROM calls"
        ).fetchone()
        return None if unpriced else float(total)

    def answer_count(self) -> int:
        """Rows that hold an answer (answered or invalid, not an error)."""
        self.flush()
        query = "SELECT COUNT(*) FROM calls WHERE status != 'error'"
        return int(self._conn.execute(query).fetchone()[0])

    def close(self) -> None:
        """Commit what is queued and close (the writer process too)."""
        try:
            self.flush()
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.close()
        finally:
            self._conn.close()
        if self._replay is not None:
            self._replay.close()
