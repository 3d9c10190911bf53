"""The run directory: atomic writes, so a reader never sees a half-written file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from biasim.simulator.common.errors import InputError, Problem

MANIFEST = "manifest.json"
CALLS = "calls.sqlite"
RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"
SUMMARY = "summary.json"
#: The version of summary.json's shape (docs/reference/summary.schema.json): raised when a field
#: changes meaning or type, or a required one goes, so a reader can tell which shape it holds.
SUMMARY_SCHEMA_VERSION = 1


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


#: Mode of files written here: what an ordinary open() would give, not mkstemp's owner-only.
FILE_MODE = _default_mode()


def write_atomic(path: Path, write: Any) -> None:
    """Call ``write(tmp_path)`` then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _finite(data: Any) -> Any:
    """NaN and infinities as null: strict JSON, readable by every parser (not only Python's)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically; missing numbers (NaN) are written as null."""
    text = json.dumps(_finite(data), indent=2, default=str, allow_nan=False)
    write_atomic(path, lambda tmp: tmp.write_text(text + "\n"))


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` in ``run_dir``, stamped with :data:`SUMMARY_SCHEMA_VERSION` (also in
    ``summary``, which callers return): every route that writes one goes through here."""
    summary["schema_version"] = SUMMARY_SCHEMA_VERSION
    write_json(run_dir / SUMMARY, summary)


def read_json(path: Path) -> Any:
    """Read a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def read_run_json(path: Path, *, required: bool = True) -> dict[str, Any]:
    """A run directory's JSON object (``manifest.json``, ``summary.json``); ``{}`` for a
    missing file that is not ``required``.

    Raises:
        InputError: The file is missing (when required), unreadable, not JSON or not an
            object; the message names it (and the line of a JSON error).
    """
    if not required and not path.exists():
        return {}
    try:
        data = read_json(path)
    except json.JSONDecodeError as exc:
        raise InputError([_corrupt(path, f"not valid JSON ({exc.msg})", exc.lineno)]) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError([_corrupt(path, f"unreadable ({reason})")]) from None
    if not isinstance(data, dict):
        raise InputError([_corrupt(path, f"not a JSON object but {type(data).__name__}")])
    return data


def _corrupt(path: Path, what: str, line: int | None = None, field: str = "") -> Problem:
    return Problem(str(path), line, field, f"{what}; restore the run's file from a backup")


#: A manifest's fields that its readers take apart, and the JSON type each must be.
_MANIFEST_FIELDS = {"study": dict, "sessions": list, "counts": dict, "cost": dict}


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """``run_dir``'s ``manifest.json``, its fields of the right types.

    Raises:
        InputError: Missing, unreadable, or a field of the wrong type (named).
    """
    path = run_dir / MANIFEST
    manifest = read_run_json(path)
    if "study" not in manifest:
        raise InputError([_corrupt(path, "no `study` field (not a run's manifest)")])
    for field, kind in _MANIFEST_FIELDS.items():
        if field in manifest and not isinstance(manifest[field], kind):
            what = "an object" if kind is dict else "a list"
            raise InputError([_corrupt(path, f"not {what}", field=field)])
    return manifest


def check_writable(out: Path, hint: str = " (use --resume to continue a run there)") -> str | None:
    """Why ``out`` cannot become a new run directory, or ``None`` when it can.

    Creates and removes a probe directory in the nearest existing ancestor: permission bits say
    little when running as root or on read-only mounts.
    """
    if out.exists():
        if not out.is_dir():
            return f"{out} exists and is not a directory"
        if any(out.iterdir()):
            return f"{out} already exists and is not empty{hint}"
    ancestor = out if out.exists() else out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {out}: {ancestor} is not a directory"
    try:
        Path(tempfile.mkdtemp(dir=ancestor, prefix=".biasim-probe-")).rmdir()
    except OSError as exc:
        return f"cannot write to {ancestor}: {exc.strerror or exc}"
    return None


LOCK = ".lock"


class RunDirectoryBusy(RuntimeError):
    """Another process holds the run directory's lock."""


class RunLock:
    """An exclusive OS lock (``flock``) on a run directory, held while one process writes it.

    The lock belongs to the open file, so the operating system releases it when its process
    ends in any way (a crash or ``kill -9`` included): a lock file left behind by a dead process
    is never mistaken for a live writer. The file records who holds it, for the message the
    next writer sees.

    Args:
        run_dir: The run directory (created when missing).
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK
        self._handle: Any = None

    def acquire(self) -> None:
        """Take the lock or say who has it.

        Raises:
            RunDirectoryBusy: Another live process holds it; the message names its pid.
        """
        import fcntl
        import sys
        import time

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunDirectoryBusy(
                f"{self.path.parent} is being written by {holder}; wait for it to finish "
                "(or stop it) before running, resuming, analysing or auditing there"
            ) from None
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        handle.write(f"pid {os.getpid()} ({' '.join(sys.argv[:2])}, since {started})\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Let the next writer in (the file stays: removing it could race a new holder)."""
        if self._handle is not None:
            self._handle.close()  # closing the file releases the flock
            self._handle = None


@contextmanager
def holding_lock(run_dir: Path, option: str) -> Iterator[None]:
    """Hold ``run_dir``'s lock for the block, or exit 2 (``option`` names the directory's
    argument) saying which live process holds it."""
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except RunDirectoryBusy as exc:
        raise InputError([Problem(option, None, "", str(exc))]) from None
    except OSError as exc:  # a directory, a device or an unwritable file where the lock goes
        reason = exc.strerror or str(exc)
        message = f"cannot be opened as the run's lock file ({reason}); remove it"
        raise InputError([Problem(str(lock.path), None, "", message)]) from None
    try:
        yield
    finally:
        lock.release()


def partial_note(run_dir: Path, manifest: dict[str, Any]) -> str | None:
    """What a reader must know when a run's results are not its whole design (the run was
    interrupted or failed): its status, the rows stored, and how to finish it."""
    status = manifest.get("status")
    if status == "complete":
        return None
    rows = (manifest.get("counts") or {}).get("rows")
    stored = f"{rows:,} rows stored" if isinstance(rows, int) else "rows stored so far"
    return (
        f"partial results: the run's status is `{status}` ({stored}); the figures cover only "
        f"the answers so far (finish it with `biasim run --resume {run_dir}`)"
    )
