"""The call store's writer process: commits the rows a large run records, beside the run.

SQLite's insert is most of a second per 100,000 calls, and a thread cannot take it off the run:
each row's parameters are bound holding the GIL, and a thread waiting for the GIL after every
row stalls both. A child process holds its own: the run hands it each batch (``marshal``, a
tenth of the insert's time) and goes on while the child commits it, one transaction a batch.

The child runs this file as a script, with the standard library only (no package import). It
ignores SIGINT and SIGTERM: a stopped run closes the store, and the child commits every batch
it was sent before it exits at the end of its input (also when the run was killed). While it
lives it holds a lock beside the database (:func:`lock_path`): a session that opens the store
after a killed run first waits for that child to finish, so it reads every row the child
commits and never gives a new row an id the child is about to use.

Protocol, on the child's stdin: ``kind (1 byte) + length (8 bytes) + marshal payload``; kinds
``C`` (path, pragmas, insert statement; first), ``R`` (rows), ``S`` (sync: the child answers
on stdout once everything sent before is committed). Answers: ``K`` + the rows committed so
far, or ``E`` + the error, after which the child exits.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import queue
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

_HEADER = struct.Struct("<cQ")
#: Batches read ahead of the one being committed: the run never waits on a full pipe, and at
#: most this many batches are in the child's memory.
_READ_AHEAD = 8


class WriterError(sqlite3.OperationalError):
    """The writer process failed (its SQLite error) or stopped: rows it had not committed
    are not in the store, and ``--resume`` asks them again."""


#: How long a new session waits for the writer process of a killed run to finish.
_LEFT_WRITER_WAIT_S = 60.0


def lock_path(path: str) -> str:
    """The lock a writer process holds while it lives, beside the database's own files."""
    return f"{path}-writer"


def wait_for_left_writer(path: str) -> None:
    """Return once no writer process of an earlier session is committing to ``path`` (where
    ``flock`` is missing, at once). This process's own writer (another store on the same file)
    is not waited for: it is not an earlier session's.

    Raises:
        WriterError: It is still committing after :data:`_LEFT_WRITER_WAIT_S`.
    """
    try:
        import fcntl

        handle = open(lock_path(path), "rb")  # noqa: SIM115 - held across the polling below
    except (ImportError, FileNotFoundError):
        return
    with handle:
        deadline = time.monotonic() + _LEFT_WRITER_WAIT_S
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return  # released when the file closes
            except BlockingIOError:
                handle.seek(0)
                owner = handle.read().decode(errors="replace").strip()
                if owner == str(os.getpid()):
                    return
                if time.monotonic() > deadline:
                    raise WriterError(
                        f"the call store's writer process of an earlier session (of pid "
                        f"{owner or '?'}) is still committing to {path} after "
                        f"{_LEFT_WRITER_WAIT_S:.0f} s; wait for it to end, then run again"
                    ) from None
                time.sleep(0.01)


def _write(stream: IO[bytes], kind: bytes, data: bytes) -> None:
    stream.write(_HEADER.pack(kind, len(data)))
    stream.write(data)
    stream.flush()


def _send(stream: IO[bytes], kind: bytes, payload: Any) -> None:
    _write(stream, kind, marshal.dumps(payload))


def _receive(stream: IO[bytes]) -> tuple[bytes, Any] | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    kind, size = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return kind, marshal.loads(data)


class WriterProcess:
    """The parent's end: sends batches, waits for them when asked, and closes the child.

    Args:
        path: The store's database (its schema already in place).
        pragmas: Statements each connection runs first (the store's own settings).
        insert: The statement each row is inserted with.

    Raises:
        OSError: The child could not be started.
        WriterError: It started but could not open the store.
    """

    def __init__(self, path: str, pragmas: Sequence[str], insert: str) -> None:
        # -I -S: no site packages, no environment; the script needs the standard library only.
        # A session of its own: a hangup or Ctrl-\ sent to the run's process group does not
        # reach it, and it commits what it was sent. Its errors come back on the pipe.
        self._child = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _widen(self._child.stdin)  # type: ignore[arg-type]
        self.sent = 0
        self.committed = 0
        self._write(b"C", marshal.dumps((path, list(pragmas), insert)))
        # Once the child holds its lock and its connection (or why not): from here on a killed
        # run's next session waits for it.
        answer = _receive(self._child.stdout)  # type: ignore[arg-type]
        if answer is None or answer[0] != b"K":
            with contextlib.suppress(OSError):
                self._child.stdin.close()  # type: ignore[union-attr]
            self._child.wait()
            raise self._failure(answer)

    def send(self, rows: list[tuple[Any, ...]]) -> None:
        """Hand ``rows`` to the child (committed in one transaction, after those sent before).

        Only plain values (str, int, float, None, bytes) go as they are: ``marshal`` writes
        numpy's numbers and strings as raw bytes (the store makes every value plain).

        Raises:
            ValueError: A value ``marshal`` cannot carry (nothing was sent).
            WriterError: The child failed or stopped.
        """
        data = marshal.dumps(rows)
        self._write(b"R", data)
        self.sent += len(rows)

    def sync(self) -> None:
        """Return once every row sent is committed.

        Raises:
            WriterError: The child failed or stopped.
        """
        if self.committed == self.sent:
            return
        self._write(b"S", marshal.dumps(None))
        answer = _receive(self._child.stdout)  # type: ignore[arg-type]
        if answer is None or answer[0] != b"K":
            raise self._failure(answer)
        self.committed = answer[1]

    def close(self) -> None:
        """Commit what was sent, then end the child.

        Raises:
            WriterError: The child failed or stopped before committing everything.
        """
        try:
            self.sync()
        finally:
            with contextlib.suppress(OSError):  # a child that stopped has closed its end
                self._child.stdin.close()  # type: ignore[union-attr]
            self._child.wait()
            self._child.stdout.close()  # type: ignore[union-attr]

    def _write(self, kind: bytes, data: bytes) -> None:
        try:
            _write(self._child.stdin, kind, data)  # type: ignore[arg-type]
        except (OSError, ValueError):  # a closed pipe, or the file closed after a failure
            raise self._failure(_receive(self._child.stdout)) from None  # type: ignore[arg-type]

    def _failure(self, answer: tuple[bytes, Any] | None) -> WriterError:
        if answer is not None and answer[0] == b"E":
            return WriterError(f"the call store's writer process failed: {answer[1]}")
        return WriterError(
            f"the call store's writer process stopped (exit status {self._child.poll()})"
        )


def _widen(pipe: IO[bytes]) -> None:
    """The pipe's buffer as large as the system allows (Linux; 64 KiB by default): a batch
    then goes in at once, not in slices each waiting for the child to read the one before."""
    try:
        import fcntl

        with open("/proc/sys/fs/pipe-max-size") as limit:
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, int(limit.read()))
    except (ImportError, OSError, ValueError, AttributeError):
        pass


def _read_ahead(source: IO[bytes], batches: queue.Queue[tuple[bytes, Any] | None]) -> None:
    while (message := _receive(source)) is not None:
        batches.put(message)
    batches.put(None)


def _serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """Commit each batch received, answer each sync, until the input ends."""
    config = _receive(source)
    if config is None:
        return
    path, pragmas, insert = config[1]
    with _holding(lock_path(path)):
        _commit_all(source, sink, path, pragmas, insert)


@contextlib.contextmanager
def _holding(lock: str) -> Iterator[None]:
    """``lock`` held (``flock``) for the block, naming the run's pid; the file is removed
    before it is let go.

    Raises:
        BlockingIOError: Another writer holds it (the run then commits its rows itself).
    """
    with open(lock, "a+b") as handle:
        try:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:
            pass
        handle.truncate(0)
        handle.write(str(os.getppid()).encode())
        handle.flush()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock)


def _commit_all(source: IO[bytes], sink: IO[bytes], path: str, pragmas: Any, insert: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in pragmas:
        conn.execute(pragma)
    _send(sink, b"K", 0)  # ready
    batches: queue.Queue[tuple[bytes, Any] | None] = queue.Queue(_READ_AHEAD)
    threading.Thread(target=_read_ahead, args=(source, batches), daemon=True).start()
    committed = 0
    try:
        while (message := batches.get()) is not None:
            kind, rows = message
            if kind == b"R":
                conn.execute("BEGIN")
                conn.executemany(insert, rows)
                conn.execute("COMMIT")
                committed += len(rows)
            elif kind == b"S":
                _send(sink, b"K", committed)
    finally:
        conn.close()


def main() -> int:
    # A stopped run closes the store itself; the child commits what it was sent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _serve(sys.stdin.buffer, sys.stdout.buffer)
    except Exception as exc:  # reported to the run, which commits the rows itself
        with contextlib.suppress(OSError):  # a run that ended reads nothing
            _send(sys.stdout.buffer, b"E", f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
