"""Before ``--resume`` sends a call: is the call store the one the run left?

A deleted ``calls.sqlite``, rows removed from it, or answers edited in it would otherwise be
asked again (paid twice) or replayed as genuine without a word. The check counts what would be
asked again and stops the resume until the user accepts it with ``--reask-lost``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.rundir import CALLS
from biasim.simulator.engine.store import answer_checksum

#: The option that lets a resume ask again what the store lost.
REASK_OPTION = "--reask-lost"


@dataclass(frozen=True)
class StoreHealth:
    """What a call store holds: its rows, its answers (rows that are not errors) and the keys
    whose answers were all changed after they were stored (a key asked again with
    ``--reask-lost`` has an intact later answer, which a resume replays)."""

    rows: int
    answers: int
    altered: int


def store_health(path: Path) -> StoreHealth:
    """Read every row of the store once and verify its checksum.

    Raises:
        InputError: The file is not a readable call store.
    """
    rows = answers = 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
            checksum = "checksum" if "checksum" in columns else "NULL"
            query = f"SELECT key, status, text, parsed, error, {checksum} FROM calls"
            altered: set[str] = set()
            for key, status, text, parsed, error, check in conn.execute(query):
                rows += 1
                answers += status != "error"
                if _altered(key, status, text, parsed, error, check):
                    altered.add(key)
            if altered:
                # Rare: a second pass for intact answers of those keys alone.
                for key, status, text, parsed, error, check in conn.execute(query):
                    intact = status != "error" and not _altered(
                        key, status, text, parsed, error, check
                    )
                    if intact:
                        altered.discard(key)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        problem = Problem(str(path), None, "", f"not a readable call store: {exc}")
        raise InputError([problem]) from None
    return StoreHealth(rows, answers, len(altered))


def _altered(
    key: str, status: str, text: str | None, parsed: str | None, error: str | None, check: Any
) -> bool:
    return check is not None and check != answer_checksum(key, status, text, parsed, error)


def check_before_resume(run_dir: Path, manifest: dict[str, Any], accept: bool) -> str | None:
    """Compare the store with what the manifest recorded at the end of the last session.

    Returns:
        A note saying what will be asked again (when ``accept``), or None when nothing was lost.

    Raises:
        InputError: Answers were lost or altered and ``accept`` is false; the message says how
            many would be asked again and names :data:`REASK_OPTION`.
    """
    path = run_dir / CALLS
    recorded = int((manifest.get("counts") or {}).get("stored_answers") or 0)
    if not path.is_file():
        lost, altered, what = recorded, 0, f"{path} is missing"
    else:
        health = store_health(path)
        lost, altered = max(0, recorded - health.answers), health.altered
        what = f"{path} has {health.answers:,} answers where the last session left {recorded:,}"
        if altered:
            what += f"; {altered:,} answers were changed after they were stored"
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
