"""How far a run is: a live bar in a terminal, a plain line every few seconds in a log file.

Both show the same figures (units done of total, calls/s or s/call when slow, ETA, errors so
far), so a run whose output goes to a file is as legible as one watched in a terminal. The pace
and the ETA come from the recent calls the model answered (:class:`Pace`): answers from the
call store and units skipped by ``when`` cost no model time and promise nothing about it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class Tick(Protocol):
    """``tick(done, errors, latency, total)``: units finished so far, how many of them failed,
    the seconds the model took for the unit just finished (None when it asked no model:
    a cached answer, a skipped unit, a stage counted in full), and the run's units now when
    the run learns more of them than the factory was given (a market's letters of applicants
    only a policy draws); None keeps the total."""

    def __call__(
        self, done: int, errors: int, latency: float | None = None, total: int | None = None
    ) -> None: ...


#: ``factory(total_units, label)`` returns the run's tick.
ProgressFactory = Callable[[int, str], Tick]
#: Seconds between log lines when output is not a terminal.
DEFAULT_LOG_EVERY_S = 10.0


#: Answered calls the pace is measured over: recent enough to follow a model that slows down.
PACE_WINDOW = 20


class Pace:
    """Calls per second from the last :data:`PACE_WINDOW` answered calls: as many calls as
    were answered, over the time from the first one's start to the last one's end, so calls in
    flight together count once and one slow call is measured from its first answer."""

    def __init__(self, window: int = PACE_WINDOW) -> None:
        self._calls: collections.deque[tuple[float, float]] = collections.deque(maxlen=window)

    def answered(self, latency: float, now: float) -> None:
        """A call answered at ``now`` after ``latency`` seconds."""
        self._calls.append((now - latency, now))

    def rate(self) -> float | None:
        """Calls per second, None before any answered call."""
        if not self._calls:
            return None
        span = self._calls[-1][1] - min(start for start, _ in self._calls)
        return len(self._calls) / span if span > 0 else None

    def eta(self, left: int) -> float | None:
        """Seconds for ``left`` more calls at the current pace (0 when none is left)."""
        if left <= 0:
            return 0.0
        rate = self.rate()
        return left / rate if rate else None


def rate_text(per_second: float | None) -> str:
    """``12.5 calls/s``, or ``4.2 s/call`` below one call a second (slow models read better)."""
    if not per_second:
        return "- calls/s"
    if per_second < 1:
        return f"{1 / per_second:,.1f} s/call"
    return f"{per_second:,.1f} calls/s"


def clock(seconds: float | None) -> str:
    """``H:MM:SS``, or ``-:--:--`` when unknown."""
    if seconds is None:
        return "-:--:--"
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(rate_text(task.fields.get("rate")), style="progress.data.speed")


class _EtaColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"ETA {clock(task.fields.get('eta'))}", style="progress.remaining")


class _ErrorsColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        errors = task.fields.get("errors", 0)
        return Text(f"errors {errors}", style="red" if errors else "progress.data.speed")


class TerminalProgress:
    """Rich's live bar, redrawn at most ten times a second."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            _ErrorsColumn(),
            TimeElapsedColumn(),
            _EtaColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> ProgressFactory:
        self._progress.__enter__()
        return self.factory

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.__exit__(kind, exc, tb)

    def factory(self, total: int, label: str) -> Tick:
        """A tick for one run of ``total`` units."""
        progress = self._progress
        task = progress.add_task(label, total=total, errors=0, rate=None, eta=None)
        last = [0.0]
        units = [total]
        pace = Pace()

        def tick(
            done: int, errors: int, latency: float | None = None, total: int | None = None
        ) -> None:
            now = time.monotonic()
            if latency is not None:
                pace.answered(latency, now)
            grown = total is not None and total != units[0]
            if grown:
                units[0] = total
            # Rich's bookkeeping costs more than a synthetic call: update ten times a second.
            if now - last[0] >= 0.1 or done >= units[0] or grown:
                last[0] = now
                eta = pace.eta(units[0] - done)
                progress.update(
                    task, total=units[0], completed=done, errors=errors, rate=pace.rate(), eta=eta
                )

        return tick


@dataclass
class _State:
    label: str
    total: int
    started: float
    done: int = 0
    errors: int = 0
    pace: Pace = field(default_factory=Pace)


class LogProgress:
    """A line every ``every_s`` seconds (and one at the end) for output that is not a terminal.

    A background thread writes the lines, so a log shows progress even while a slow call
    holds up every unit.
    """

    def __init__(self, stream: TextIO, every_s: float = DEFAULT_LOG_EVERY_S) -> None:
        self._stream = stream
        self._every = every_s
        self._states: list[_State] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="biasim-progress", daemon=True)

    def __enter__(self) -> ProgressFactory:
        self._thread.start()
        return self.factory

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._write(final=True)

    def factory(self, total: int, label: str) -> Tick:
        """A tick for one run of ``total`` units."""
        state = _State(label=label, total=total, started=time.monotonic())
        with self._lock:
            self._states.append(state)

        def tick(
            done: int, errors: int, latency: float | None = None, total: int | None = None
        ) -> None:
            state.done, state.errors = done, errors
            if total is not None:
                state.total = total
            if latency is not None:
                state.pace.answered(latency, time.monotonic())

        return tick

    def _beat(self) -> None:
        while not self._stop.wait(self._every):
            self._write(final=False)

    def _write(self, *, final: bool) -> None:
        with self._lock:
            for state in self._states:
                self._stream.write(self.line(state, time.monotonic(), final=final) + "\n")
        self._stream.flush()

    @staticmethod
    def line(state: _State, now: float, *, final: bool = False) -> str:
        """One progress line: pace and ETA from the recent answered calls."""
        elapsed = now - state.started
        rate = state.pace.rate()
        eta = state.pace.eta(state.total - state.done)
        share = state.done / state.total if state.total else 1.0
        return (
            f"progress {state.label}: {state.done}/{state.total} units ({share:.0%}), "
            f"{rate_text(rate)}, errors {state.errors}, elapsed {clock(elapsed)}, "
            f"ETA {clock(eta)}" + (" (end)" if final else "")
        )


def progress_display(
    console: Console, every_s: float = DEFAULT_LOG_EVERY_S
) -> TerminalProgress | LogProgress:
    """The live bar on a terminal, else timed log lines on the console's stream."""
    if console.is_terminal:
        return TerminalProgress(console)
    return LogProgress(console.file, every_s)
