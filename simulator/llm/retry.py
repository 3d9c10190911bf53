"""The one retry layer. SDK retries are switched off in every backend; this is the only place
that retries, backs off, honours ``Retry-After`` and enforces per-attempt and total timeouts."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .endpoints import redact_text
from .errors import BackendError, TransientError
from .limits import AdaptiveLimiter, RateLimiter
from .types import LLMRequest, LLMResponse


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try.

    Attributes:
        max_attempts: Attempts per call, the first included.
        base_delay_s: First backoff; doubles each attempt (full jitter).
        max_delay_s: Cap on one backoff.
        timeout_s: Per-attempt timeout.
        total_timeout_s: Budget for all attempts and waits of one call.
    """

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    timeout_s: float = 120.0
    total_timeout_s: float = 600.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff before attempt ``attempt + 1``."""
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


async def call_with_retries(
    generate: Callable[[LLMRequest], Awaitable[LLMResponse]],
    request: LLMRequest,
    policy: RetryPolicy,
    limiter: AdaptiveLimiter,
    rate: RateLimiter | None = None,
    rng: random.Random | None = None,
) -> LLMResponse:
    """Call ``generate`` until it answers, fails for good, or the budget runs out.

    A concurrency slot is held only while an attempt is in flight, never while backing off.

    Returns:
        The backend's response with ``attempts`` and ``latency_s`` set, or an ``error``
        response whose ``error`` names the last failure and the attempt count.
    """
    rng = rng or random.Random()
    deadline = time.monotonic() + policy.total_timeout_s
    reason = "no attempt was made"
    attempt = 0
    while attempt < policy.max_attempts:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason += "; total timeout reached"
            break
        attempt += 1
        if rate is not None and rate.active:
            # Without a cap the answer's length is unknown: the prompt alone is paced.
            await rate.wait((request.max_tokens or 0) + _prompt_tokens(request))
        retry_after: float | None = None
        async with limiter:
            start = time.perf_counter()
            try:
                # asyncio.timeout arms one timer; wait_for would spawn a task per attempt.
                async with asyncio.timeout(min(policy.timeout_s, remaining)):
                    response = await generate(request)
            except TimeoutError:
                failure: BackendError = TransientError(
                    f"timed out after {min(policy.timeout_s, remaining):.3g} s"
                )
            except BackendError as exc:
                failure = exc
            except Exception as exc:  # a backend bug or an SDK surprise: isolate, keep the reason
                failure = TransientError(f"{type(exc).__name__}: {exc}")
            else:
                limiter.on_success()
                response.attempts = attempt
                response.latency_s = response.latency_s or time.perf_counter() - start
                return response
        # An SDK may quote the server URL, credentials included.
        reason = redact_text(str(failure) or type(failure).__name__)
        if failure.overloaded:
            limiter.on_overload()
        if not failure.retryable:
            break
        retry_after = failure.retry_after
        delay = retry_after if retry_after is not None else policy.backoff(attempt, rng)
        if attempt >= policy.max_attempts or time.monotonic() + delay >= deadline:
            if time.monotonic() + delay >= deadline:
                reason += "; total timeout would pass before the next attempt"
            break
        await asyncio.sleep(delay)
    return LLMResponse(
        status="error", error=f"{reason} (after {attempt} attempt(s))", attempts=attempt
    )


def _prompt_tokens(request: LLMRequest) -> int:
    # About four characters a token: only used to pace a tokens-per-minute budget.
    return sum(len(m.get("content", "")) for m in request.messages) // 4
