"""Concurrency and rate limits in front of a backend.

:class:`AdaptiveLimiter` bounds calls in flight and adapts the bound the way TCP does: halve it
when the server signals overload (429/503), grow it back by one per window of healthy answers.
:class:`RateLimiter` keeps requests and tokens per minute under a provider's quota.
"""

from __future__ import annotations

import asyncio
import collections
import time


class AdaptiveLimiter:
    """An async semaphore whose size follows additive-increase / multiplicative-decrease.

    Args:
        limit: Starting and maximum number of calls in flight.
        min_limit: Never shrink below this.
        adaptive: When false the bound stays fixed.
    """

    def __init__(self, limit: int, *, min_limit: int = 1, adaptive: bool = True) -> None:
        self.max_limit = max(1, limit)
        self.min_limit = max(1, min(min_limit, self.max_limit))
        self.limit = float(self.max_limit)
        self.adaptive = adaptive
        self.in_flight = 0
        self.peak_in_flight = 0
        self.shrinks = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._last_shrink = 0.0

    async def acquire(self) -> None:
        """Wait for a free slot."""
        if self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed to us just as we were cancelled
            else:
                self._waiters.remove(fut)
            raise

    def try_acquire(self) -> bool:
        """Take a free slot without waiting.

        Returns:
            Whether a slot was taken (then :meth:`release` frees it).
        """
        if self.in_flight < int(self.limit) and not self._waiters:
            self._take()
            return True
        return False

    def _take(self) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def release(self) -> None:
        """Free a slot and wake waiters while the bound allows."""
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            fut = self._waiters.popleft()
            if not fut.done():
                self._take()
                fut.set_result(None)

    def on_success(self) -> None:
        """Grow by one slot per ``limit`` healthy answers."""
        if self.adaptive and self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
            self._wake()

    def on_overload(self) -> None:
        """Halve the bound, at most once per second: one burst of 429s is one signal."""
        now = time.monotonic()
        if self.adaptive and now - self._last_shrink >= 1.0:
            self._last_shrink = now
            self.limit = max(float(self.min_limit), self.limit / 2.0)
            self.shrinks += 1

    async def __aenter__(self) -> AdaptiveLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class RateLimiter:
    """Token buckets for requests per minute and tokens per minute (either may be ``None``)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self._buckets = [
            _Bucket(rate / 60.0) if rate else None
            for rate in (requests_per_minute, tokens_per_minute)
        ]
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return any(self._buckets)

    async def wait(self, tokens: int) -> None:
        """Wait until one more request of about ``tokens`` tokens fits both budgets."""
        async with self._lock:  # first come, first served
            for bucket, amount in zip(self._buckets, (1, tokens), strict=True):
                if bucket is not None:
                    await bucket.take(amount)


class _Bucket:
    def __init__(self, per_second: float) -> None:
        self.rate = per_second
        self.capacity = max(1.0, per_second * 60.0)  # up to a minute's budget at once
        self.level = self.capacity
        self.stamp = time.monotonic()

    async def take(self, amount: float) -> None:
        amount = min(amount, self.capacity)
        while True:
            now = time.monotonic()
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.level >= amount:
                self.level -= amount
                return
            await asyncio.sleep((amount - self.level) / self.rate)
