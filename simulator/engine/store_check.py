"""Before ``--resume`` sends a call: is the call store the one the run left?

A deleted ``calls.sqlite``, rows removed from it, or answers edited in it (their keyed checksum
changed, removed, or the store's key gone: see :mod:`store_signing`) would otherwise be asked
again (paid twice) or replayed as genuine without a word. The check counts what would be
asked again and stops the resume until the user accepts it with ``--reask-lost``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.rundir import CALLS
from biasim.simulator.engine.store_signing import answer_checksum, key_path, read_secret

#: The option that lets a resume ask again what the store lost.
REASK_OPTION = "--reask-lost"


#: Row ids of altered answers named in a message (the count says how many there are).
_ROWS_NAMED = 5


@dataclass(frozen=True)
class StoreHealth:
    """What a call store holds: its rows, its answers (rows that are not errors), the keys
    whose answers were all changed after they were stored or carry no valid keyed checksum (a
    key asked again with ``--reask-lost`` has an intact later answer, which a resume
    replays), the first such rows' ids, and whether the store has its key at all."""

    rows: int
    answers: int
    altered: int
    altered_rows: tuple[int, ...] = ()
    signed: bool = True


def store_health(path: Path) -> StoreHealth:
    """Read every row of the store once and verify its keyed checksum (one that is missing,
    or a store without its key, verifies nothing).

    Raises:
        InputError: The file is not a readable call store.
    """
    secret = read_secret(path)
    rows = answers = 0
    altered: dict[str, int] = {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            query = _rows_query(conn)
            for rowid, key, status, *answer, check in conn.execute(query):
                rows += 1
                answers += status != "error"
                if status != "error" and not _verifies(secret, key, status, answer, check):
                    altered.setdefault(key, rowid)
            if altered:
                # Rare: a second pass for intact answers of those keys alone.
                for _, key, status, *answer, check in conn.execute(query):
                    if status != "error" and _verifies(secret, key, status, answer, check):
                        altered.pop(key, None)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        problem = Problem(str(path), None, "", f"not a readable call store: {exc}")
        raise InputError([problem]) from None
    named = tuple(sorted(altered.values())[:_ROWS_NAMED])
    return StoreHealth(rows, answers, len(altered), named, secret is not None)


def _rows_query(conn: sqlite3.Connection) -> str:
    columns = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    probabilities = "probabilities" if "probabilities" in columns else "NULL"
    checksum = "checksum" if "checksum" in columns else "NULL"
    return (
        f"SELECT id, key, status, text, parsed, error, {probabilities}, {checksum} "
        "FROM calls ORDER BY id"
    )


def _verifies(secret: bytes | None, key: str, status: str, answer: list[Any], check: Any) -> bool:
    return secret is not None and check == answer_checksum(secret, key, status, *answer)


def altered_message(path: Path, health: StoreHealth) -> str:
    """What is wrong with the store's answers, naming its first altered rows."""
    if not health.signed:
        return (
            f"{path} has no readable key file {key_path(path).name} beside it (a store written "
            f"before biasim signed its answers, its key removed, or another user's), so none "
            f"of its "
            f"{health.answers:,} answers can be verified"
        )
    rows = ", ".join(map(str, health.altered_rows))
    more = ", ..." if health.altered > len(health.altered_rows) else ""
    return (
        f"{health.altered:,} answers were changed after they were stored or carry no valid "
        f"checksum (row id {rows}{more})"
    )


def check_before_resume(run_dir: Path, manifest: dict[str, Any], accept: bool) -> str | None:
    """Compare the store with what the manifest recorded at the end of the last session.

    Returns:
        A note saying what will be asked again (when ``accept``), or None when nothing was lost.

    Raises:
        InputError: Answers were lost or altered and ``accept`` is false; the message says how
            many would be asked again and names :data:`REASK_OPTION`.
    """
    path = run_dir / CALLS
    recorded = (manifest.get("counts") or {}).get("stored_answers")
    recorded = recorded if isinstance(recorded, int) else 0  # none recorded: none to count
    if not path.is_file():
        lost, altered, what = recorded, 0, f"{path} is missing"
    else:
        health = store_health(path)
        lost, altered = max(0, recorded - health.answers), health.altered
        what = f"{path} has {health.answers:,} answers where the last session left {recorded:,}"
        if altered:
            what += f"; {altered_message(path, health)}"
    if not lost and not altered:
        return None
    reasked = lost + altered
    message = (
        f"{what}: resuming would ask {reasked:,} calls again (paid twice) instead of replaying them"
    )
    if not accept:
        raise InputError(
            [
                Problem(
                    str(path),
                    None,
                    "",
                    f"{message}; restore the store, or accept with {REASK_OPTION}",
                )
            ]
        )
    return message
