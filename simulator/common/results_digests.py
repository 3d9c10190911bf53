"""Digests of a run's results tables, recorded in ``manifest.json`` when a session ends: a table
edited afterwards is refused by every reader (``analyze``, ``audit``, ``compare``) naming the
file, unless ``--accept-edits`` records in the manifest, and so in the report, that the results
were edited and the digest seen.

A SHA-256 of each file, not a keyed digest: whoever can edit the table can edit the manifest
too, so this catches edits made without a word (by hand, by a script that rewrote the table),
not someone who also rewrites the manifest's digests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.rundir import MANIFEST, RESULTS_CSV, RESULTS_PARQUET

#: The option that accepts edited results (and records the edit).
ACCEPT_EDITS_OPTION = "--accept-edits"
#: The tables whose digests the manifest records.
RESULTS_FILES = (RESULTS_PARQUET, RESULTS_CSV)
#: The manifest's fields: the digests recorded at the end of the run's last session, and the
#: edits accepted since.
DIGESTS = "results_sha256"
EDITS = "results_edits"


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of the file at ``path`` (hex), or ``None`` when there is no such file."""
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def record_digests(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Record the digests of the tables the session just wrote (edits accepted of earlier
    tables no longer apply: these were written again from the call store)."""
    manifest[DIGESTS] = {name: file_sha256(run_dir / name) for name in RESULTS_FILES}
    manifest.pop(EDITS, None)


def check_results(
    run_dir: Path, manifest: dict[str, Any], *, accept: bool, command: str
) -> list[dict[str, Any]]:
    """Verify the tables against the manifest's digests (or edits accepted before).

    Returns:
        The edits newly accepted (``accept`` true), to be added to the manifest's ``EDITS``.

    Raises:
        InputError: A table differs from its digest, is missing, or the manifest records no
            digest, and ``accept`` is false; each names the file and how to go on.
    """
    recorded = manifest.get(DIGESTS)
    recorded = recorded if isinstance(recorded, dict) else None
    accepted = {e.get("file"): e.get("seen_sha256") for e in _edits(manifest)}
    problems: list[Problem] = []
    new: list[dict[str, Any]] = []
    for name in RESULTS_FILES:
        seen = file_sha256(run_dir / name)
        expected = (recorded or {}).get(name)
        if (recorded is not None and seen == expected) or (
            name in accepted and accepted[name] == seen
        ):
            continue
        if accept:
            when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            new.append(
                {
                    "file": name,
                    "recorded_sha256": expected,
                    "seen_sha256": seen,
                    "accepted": when,
                    "by": command,
                }
            )
            continue
        problems.append(Problem(str(run_dir / name), None, "", _why(expected, seen, recorded)))
    if problems:
        raise InputError(problems)
    return new


def _why(expected: str | None, seen: str | None, recorded: dict[str, Any] | None) -> str:
    if recorded is None:
        what = (
            f"{MANIFEST} records no digest of it (a run from before biasim recorded them), "
            "so it cannot be verified"
        )
    elif seen is None:
        what = f"missing, though the run recorded its digest in {MANIFEST}"
    else:
        what = (
            f"changed after the run: its SHA-256 is {_short(seen)}, not {_short(expected)} as "
            f"recorded in {MANIFEST}"
        )
    return (
        f"{what}; restore it, write the tables again from the call store with `biasim run "
        f"--resume RUN_DIR`, or analyse it as it is with {ACCEPT_EDITS_OPTION} (recorded in "
        "the manifest and the report)"
    )


def _short(digest: str | None) -> str:
    return f"{digest[:16]}..." if digest else "none"


def _edits(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    edits = manifest.get(EDITS)
    return [e for e in edits if isinstance(e, dict)] if isinstance(edits, list) else []


def edits_note(manifest: dict[str, Any]) -> str | None:
    """What a reader must know when results were edited after the run (accepted with
    ``--accept-edits``): each table, the digest seen and the one the run recorded."""
    edits = _edits(manifest)
    if not edits:
        return None
    each = "; ".join(
        f"{e.get('file')} (SHA-256 {_short(e.get('seen_sha256'))} where the run recorded "
        f"{_short(e.get('recorded_sha256'))}; accepted with {ACCEPT_EDITS_OPTION} by "
        f"`{e.get('by')}` on {e.get('accepted')})"
        for e in edits
    )
    return f"results edited after the run: {each}; the figures are of the edited tables"
