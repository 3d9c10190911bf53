"""Several servers behind one role: least-outstanding-requests spreading, per-server adaptive
concurrency and health.

Each server has its own :class:`AdaptiveLimiter` (a 429/503 from one server halves only its
bound) and its own health: after :data:`DRAIN_AFTER` failures in a row (connection refused or
reset, 5xx, a body cut short, a call held past the attempt timeout) it gets no new requests for
a cool-down that doubles on every failed probe, up to :data:`MAX_COOLDOWN_S`; once the
cool-down is over one request probes it and an answer brings it back. While every server is
down requests still go out, to the one that comes back first, so a role with one server behaves
as before and the retry layer's backoff paces the attempts.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from biasim.simulator.llm.errors import BackendError
from biasim.simulator.llm.limits import AdaptiveLimiter

#: Failures in a row that take a server out of rotation (one stray 500 does not).
DRAIN_AFTER = 2
FIRST_COOLDOWN_S = 1.0
MAX_COOLDOWN_S = 30.0


@dataclass(slots=True, eq=False)
class Server:
    """One server of a role and its state.

    Attributes:
        index: Position in the role's list.
        url: Base URL without credentials (what results and the call store name).
        limiter: Its own concurrency bound.
        answered: Calls it answered.
        failed: Attempts that failed on it (any error).
        drains: Times it was taken out of rotation.
        picks: Attempts sent to it (breaks ties between equally busy servers).
        failures_in_row: Health failures since its last answer.
        cooldown_s: How long the next drain lasts.
        down_until: Monotonic time its cool-down ends; 0 while in rotation.
        probing: A probe call is in flight to it.
    """

    index: int
    url: str
    limiter: AdaptiveLimiter
    answered: int = 0
    failed: int = 0
    drains: int = 0
    picks: int = 0
    failures_in_row: int = 0
    cooldown_s: float = FIRST_COOLDOWN_S
    down_until: float = 0.0
    probing: bool = False

    @property
    def down(self) -> bool:
        """Out of rotation (draining or waiting to be probed)."""
        return self.down_until > 0.0


@dataclass(slots=True)
class ServerPool:
    """Picks a server for each attempt and keeps each server's bound and health.

    Args:
        urls: Public base URLs, in the role's order.
        limit: Each server's starting and maximum concurrency.
        adaptive: Whether each server's bound adapts (with one server the role's own limiter
            does that already).
    """

    urls: list[str]
    limit: int
    adaptive: bool
    servers: list[Server] = field(init=False)
    _waiters: collections.deque[asyncio.Future[None]] = field(
        init=False, default_factory=collections.deque
    )

    def __post_init__(self) -> None:
        self.servers = [
            Server(i, url, AdaptiveLimiter(self.limit, adaptive=self.adaptive))
            for i, url in enumerate(self.urls)
        ]

    async def acquire(self) -> Server:
        """A server with a free slot, the least busy healthy one (waits while all are full)."""
        while True:
            server = self._pick()
            if server is not None:
                return server
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._wake()  # pass on the wake-up we were handed as we were cancelled
                raise

    def _pick(self) -> Server | None:
        now = time.monotonic()
        free = [s for s in self.servers if s.limiter.in_flight < int(s.limiter.limit)]
        up = [s for s in free if not s.down or (not s.probing and now >= s.down_until)]
        if up:
            # Least outstanding requests; ties go to the least used, so light load rotates.
            best = min(up, key=lambda s: (s.limiter.in_flight, s.picks))
        elif free and all(server.down for server in self.servers):
            # Nowhere healthy to go: try the server due back first rather than stall the call.
            best = min(free, key=lambda s: s.down_until)
        else:
            return None
        best.limiter.try_acquire()
        best.probing = best.down
        best.picks += 1
        return best

    def release(self, server: Server, error: BaseException | None) -> None:
        """Free ``server``'s slot and account for how its attempt went.

        Args:
            server: The server :meth:`acquire` returned.
            error: ``None`` for an answer, the :class:`BackendError` the attempt raised, or
                anything else for an attempt that was abandoned (a timeout, a cancelled run),
                which says nothing about the server's health.
        """
        server.limiter.release()
        back = False
        if error is None:
            back = server.down
            server.answered += 1
            server.limiter.on_success()
            server.failures_in_row = 0
            server.cooldown_s = FIRST_COOLDOWN_S
            server.down_until = 0.0
            server.probing = False
        elif isinstance(error, BackendError):
            server.failed += 1
            if error.overloaded:
                server.limiter.on_overload()
            if error.retryable and not error.overloaded:
                self._failed(server)
            elif server.down:
                back = True  # a refusal or an overload still proves the server is reachable
                server.probing = False
                server.down_until = 0.0
        elif server.probing:
            server.probing = False  # the probe was abandoned: let another one go
        self._wake(everyone=back)

    def _failed(self, server: Server) -> None:
        server.failures_in_row += 1
        if server.probing:  # the probe failed: out again, for longer
            server.probing = False
            server.cooldown_s = min(MAX_COOLDOWN_S, server.cooldown_s * 2)
            server.down_until = time.monotonic() + server.cooldown_s
        elif not server.down and server.failures_in_row >= DRAIN_AFTER:
            server.drains += 1
            server.down_until = time.monotonic() + server.cooldown_s

    def _wake(self, everyone: bool = False) -> None:
        # One freed slot, one waiter; a server back in rotation may take them all.
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                if not everyone:
                    return

    def stats(self) -> list[dict[str, object]]:
        """Per server: URL, answers, failed attempts, drains, final concurrency bound."""
        return [
            {
                "url": server.url,
                "answered": server.answered,
                "failed": server.failed,
                "drains": server.drains,
                "limit": int(server.limiter.limit),
            }
            for server in self.servers
        ]
