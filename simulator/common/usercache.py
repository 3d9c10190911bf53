"""A small on-disk cache of results that are slow to compute and fixed by their inputs (the
pronoun swaps a spaCy tagger makes on a study's biographies, read again by every `validate`
and `run` of that study).

The caller's key must hold everything that changes the answer (the inputs, the versions of the
models and of the code that computes it). Entries live in ``$BIASIM_CACHE_DIR``, else
``$XDG_CACHE_HOME/biasim``, else ``~/.cache/biasim``; a cache that cannot be read or written
is skipped (the value is computed), and each kind keeps its newest :data:`KEEP` entries only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

CACHE_ENV = "BIASIM_CACHE_DIR"
#: Entries kept per kind (the oldest are removed past it), so the cache has a bound.
KEEP = 64
#: Largest entry read back: a study's biographies are bounded far below it by the CSV limits,
#: so anything larger was not written here and is not loaded into memory.
MAX_ENTRY_BYTES = 64 * 1024 * 1024
#: A partial file this old was left by a writer that was killed (a write takes milliseconds).
_PARTIAL_AGE_S = 3600


def cache_dir() -> Path:
    """Where the cache lives (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "biasim"


def cache_key(*parts: Any) -> str:
    """A hex digest of ``parts`` (JSON-encoded, so lists and strings are told apart)."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def read_entry(kind: str, key: str) -> Any | None:
    """The JSON value stored under ``kind``/``key``, or None when there is none readable (or
    it is larger than :data:`MAX_ENTRY_BYTES`: not read at all, it is computed again)."""
    path = cache_dir() / kind / f"{key}.json"
    try:
        if path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_entry(kind: str, key: str, value: Any) -> None:
    """Store ``value`` (atomically: a reader never sees half an entry); errors are ignored."""
    folder = cache_dir() / kind
    partial = folder / f"{key}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, folder / f"{key}.json")
        _prune(folder)
    except OSError:
        with contextlib.suppress(OSError):  # the folder may be no folder at all
            partial.unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    """Keep the newest :data:`KEEP` entries, and no partial file a killed writer left."""
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    stale = time.time() - _PARTIAL_AGE_S
    partials = [p for p in folder.glob("*.tmp") if p.stat().st_mtime < stale]
    for old in [*entries[KEEP:], *partials]:
        old.unlink(missing_ok=True)
