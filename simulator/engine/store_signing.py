"""Keyed checksums of stored answers: an answer edited in ``calls.sqlite`` (or its checksum
set to NULL, or a row copied from another store) no longer verifies, and is never replayed.

Each store has its own secret, kept beside it as ``calls.key`` (owner-only, mode 0600): the
run directory stays portable (copied, archived, resumed or replayed on another machine) and
still verifies. That guards against edits with an SQLite tool, a NULLed or recomputed plain
checksum, and rows spliced in from another store; it does not guard against someone who also
reads the key file (they can sign an edit), which a key kept elsewhere would not stop either
once the directory travels with it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from secrets import token_bytes

import orjson

#: Bytes of a store's secret.
_SECRET_BYTES = 32


def key_path(store: Path) -> Path:
    """Where the secret of the store at ``store`` is kept (``calls.sqlite`` -> ``calls.key``)."""
    return store.with_suffix(".key")


def read_secret(store: Path) -> bytes | None:
    """The store's secret, or ``None`` when it has none that can be read (a store written
    before answers were signed, or its key file removed or damaged)."""
    try:
        text = key_path(store).read_text(encoding="ascii").strip()
        secret = bytes.fromhex(text)
    except (OSError, ValueError):
        return None
    return secret if len(secret) == _SECRET_BYTES else None


def new_secret(store: Path) -> bytes:
    """A new secret for the store at ``store``, written beside it (owner-only) before any
    answer is signed with it."""
    secret = token_bytes(_SECRET_BYTES)
    path = key_path(store)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:  # mkstemp's mode is 0600
            handle.write(secret.hex() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return secret


def answer_checksum(
    secret: bytes,
    key: str,
    status: str,
    text: str | None,
    parsed: str | None,
    error: str | None,
    probabilities: str | None,
) -> str:
    """The keyed digest (BLAKE2b in its MAC mode) of what a stored answer says, with its key."""
    message = orjson.dumps([key, status, text, parsed, error, probabilities])
    return hashlib.blake2b(message, key=secret, digest_size=16).hexdigest()
