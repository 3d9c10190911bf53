"""Ctrl-C and SIGTERM during a run.

The first signal stops new calls: calls already sent finish and are recorded (they are paid
for), calls not yet sent are never sent. The second cancels the calls in flight at once (an
in-process model stops at its next token). Either way the run directory is written, the
manifest says ``interrupted`` and ``--resume`` asks only what was not answered. Signals never
raise ``KeyboardInterrupt`` inside the run, so no stack is unwound through an event loop or a
model thread half-way through a call.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CallNotIssued(Exception):
    """A stop arrived before this call was sent; it was never made."""


class StopControl:
    """What the user asked for by signal, shared by the signal handler, the dispatcher and the
    runner.

    Attributes:
        level: 0 run on, 1 stop issuing calls, 2 cancel the calls in flight.
        signum: The first signal received.
    """

    def __init__(self) -> None:
        self.level = 0
        self.signum: int | None = None
        #: Why the run stopped when no signal stopped it, and the exit code that says so.
        self.reason: str | None = None
        self._exit_code: int | None = None
        self._cancellers: list[Callable[[], None]] = []

    @property
    def stopping(self) -> bool:
        """A stop was asked for."""
        return self.level > 0

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 plus the signal number (130 for Ctrl-C); a stop the run
        decided itself (:meth:`halt`) has its own."""
        if self.signum is None and self._exit_code is not None:
            return self._exit_code
        return 128 + (self.signum or signal.SIGINT)

    def halt(self, reason: str, exit_code: int) -> None:
        """Stop issuing calls for a reason of the run's own (a cost limit), as a first signal
        would: calls in flight finish and are recorded."""
        if self.level == 0:
            self.level = 1
            self.reason = reason
            self._exit_code = exit_code

    def on_cancel(self, cancel: Callable[[], None]) -> Callable[[], None]:
        """Call ``cancel`` (on the event loop's thread) when in-flight calls must stop now.

        Returns:
            A function that unregisters it.
        """
        self._cancellers.append(cancel)
        if self.level >= 2:
            cancel()
        return lambda: self._cancellers.remove(cancel) if cancel in self._cancellers else None

    def request(self, signum: int = signal.SIGINT) -> str:
        """Raise the stop level by one (what a signal does); return what to tell the user."""
        self.level += 1
        if self.level == 1:
            self.signum = signum
            return (
                "stopping: no new calls; waiting for the calls in flight to finish "
                "(Ctrl-C again cancels them)"
            )
        if self.level == 2:
            return "cancelling the calls in flight; writing the run directory"
        return "writing the run directory; it takes a moment"

    def cancel_all(self) -> None:
        """Run every canceller (on the event loop's thread)."""
        for cancel in list(self._cancellers):
            cancel()


@contextmanager
def stop_on_signals(
    control: StopControl,
    loop: asyncio.AbstractEventLoop,
    notify: Callable[[str], None],
    *,
    immediate: Callable[[], None] = lambda: None,
) -> Iterator[StopControl]:
    """Route SIGINT and SIGTERM to ``control`` while the block runs.

    Args:
        control: Receives the stop requests.
        loop: The run's event loop; cancellers and messages run on it (a signal handler
            interrupts arbitrary code, so it only records the request and wakes the loop).
        notify: Prints a message to the user.
        immediate: Called from the handler itself on the second signal, for what must
            not wait for the loop (an in-process model's abort flag, thread-safe).

    Off the main thread (where Python cannot install handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield control
        return

    def handler(signum: int, frame: object) -> None:
        message = control.request(signum)
        if control.level == 2:
            # Cancel the waiting tasks before the model thread can report its abandoned
            # call, so that call ends as cancelled, never as an answer or an error.
            _call_soon(loop, control.cancel_all)
            immediate()
        _call_soon(loop, notify, message)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield control
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: str) -> None:
    # Outside the loop (between stages, writing the directory) nothing waits on it: act now.
    if loop.is_closed() or not loop.is_running():
        callback(*args)
    else:
        loop.call_soon_threadsafe(callback, *args)
