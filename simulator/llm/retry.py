"""The one retry layer. SDK retries are switched off in every backend; this is the only place
that retries, backs off, honours ``Retry-After`` and enforces per-attempt and total timeouts."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from biasim.simulator.common.interrupts import CallNotIssued
from biasim.simulator.llm.allowlist import redact_text
from biasim.simulator.llm.errors import (
    BackendError,
    ConnectionRefused,
    FatalBackendError,
    TransientError,
    connection_failure,
)
from biasim.simulator.llm.limits import AdaptiveLimiter, RateLimiter
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: Event-loop time at which the attempt in progress times out. A backend that sees its call
#: cancelled can tell this timeout (the server took too long) from a run being interrupted.
ATTEMPT_DEADLINE: ContextVar[float] = ContextVar("attempt_deadline", default=math.inf)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try.

    Attributes:
        max_attempts: Attempts per call, the first included.
        base_delay_s: First backoff; doubles each attempt (full jitter).
        max_delay_s: Cap on one backoff.
        timeout_s: Per-attempt timeout; ``None`` for a model in this process, whose slow call
            is not a lost one (cutting it off and retrying would only start it again).
        total_timeout_s: Budget for all attempts and waits of one call (an attempt in
            progress without a per-attempt timeout is never cut by it).
        timeout_per_token_s: Each requested token (``max_tokens``) may add this much to the
            per-attempt timeout: a server on this machine answering a long request is slow,
            not gone.
    """

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    timeout_s: float | None = 120.0
    total_timeout_s: float = 600.0
    timeout_per_token_s: float = 0.0

    def attempt_timeout(self, request: LLMRequest) -> float | None:
        """The per-attempt timeout for ``request``."""
        if self.timeout_s is None:
            return None
        return max(self.timeout_s, self.timeout_per_token_s * (request.max_tokens or 0))

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff before attempt ``attempt + 1``."""
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


@dataclass(slots=True)
class FirstContact:
    """Whether a backend's server has answered yet, shared by every call to it.

    Until it has, an attempt waits at most ``timeout_s`` (not the role's longer timeout) and a
    refused connection is final: a server that accepts connections but never answers, or an
    address where nothing listens, is reported within a minute instead of after every retry.

    Attributes:
        timeout_s: Per-attempt timeout before the first answer.
        answered: Set by the first call that gets an answer (valid or not).
    """

    timeout_s: float = 60.0
    answered: bool = False
    #: Why the server is taken for silent (a first call timed out); later calls fail at once.
    silent: str = ""


async def call_with_retries(
    generate: Callable[[LLMRequest], Awaitable[LLMResponse]],
    request: LLMRequest,
    policy: RetryPolicy,
    limiter: AdaptiveLimiter,
    rate: RateLimiter | None = None,
    rng: random.Random | None = None,
    stopping: Callable[[], bool] | None = None,
    contact: FirstContact | None = None,
    before_retry: Callable[[BackendError], Awaitable[None]] | None = None,
    after_failure: Callable[[BackendError], Awaitable[None]] | None = None,
) -> LLMResponse:
    """Call ``generate`` until it answers, fails for good, or the budget runs out.

    A concurrency slot is held only while an attempt is in flight, never while backing off.
    ``after_failure`` is awaited with each failed attempt's error, the last one included (the
    cost limit counts an attempt that may have been billed there); ``before_retry`` with the
    last failure before each attempt after the first (the cost limit reserves for it there).

    Raises:
        CallNotIssued: ``stopping()`` turned true before an attempt was sent (the user
            stopped the run), or ``before_retry`` raised it: nothing more is recorded and a
            resumed run asks again.

    Returns:
        The backend's response with ``attempts`` and ``latency_s`` set, or an ``error``
        response whose ``error`` names the last failure and the attempt count.
    """
    rng = rng or random.Random()
    if contact is not None and contact.silent and not contact.answered:
        return LLMResponse(status="error", error=contact.silent, attempts=0)
    deadline = time.monotonic() + policy.total_timeout_s
    reason = "no attempt was made"
    attempt = 0
    failure: BackendError | None = None
    while attempt < policy.max_attempts:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason += "; total timeout reached"
            break
        attempt += 1
        if failure is not None and before_retry is not None:
            await before_retry(failure)
        if rate is not None and rate.active:
            # Without a cap the answer's length is unknown: the prompt alone is paced.
            await rate.wait((request.max_tokens or 0) + _prompt_tokens(request))
        outcome = await _attempt(generate, request, policy, limiter, stopping, contact, remaining)
        if isinstance(outcome, LLMResponse):
            outcome.attempts = attempt
            return outcome
        failure = outcome
        if after_failure is not None:
            await after_failure(failure)
        # An SDK may quote the server URL, credentials included.
        reason = redact_text(str(failure) or type(failure).__name__)
        if failure.overloaded:
            limiter.on_overload()
        if not failure.retryable:
            break
        if isinstance(failure, ConnectionRefused) and contact is not None and not contact.answered:
            reason += "; nothing has answered at this address yet: is the server running?"
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


async def _attempt(
    generate: Callable[[LLMRequest], Awaitable[LLMResponse]],
    request: LLMRequest,
    policy: RetryPolicy,
    limiter: AdaptiveLimiter,
    stopping: Callable[[], bool] | None,
    contact: FirstContact | None,
    remaining: float,
) -> LLMResponse | BackendError:
    """One attempt inside a concurrency slot: the answer (latency set), or why it failed.

    Raises:
        CallNotIssued: ``stopping()`` turned true before the attempt was sent.
    """
    probing = contact is not None and not contact.answered
    async with limiter:
        if stopping is not None and stopping():
            raise CallNotIssued
        timeout = configured = policy.attempt_timeout(request)
        if timeout is not None:
            timeout = configured = min(timeout, remaining)
            if probing:
                timeout = min(timeout, contact.timeout_s)
        start = time.perf_counter()
        ends = math.inf if timeout is None else asyncio.get_running_loop().time() + timeout
        token = ATTEMPT_DEADLINE.set(ends)
        try:
            # asyncio.timeout arms one timer; wait_for would spawn a task per attempt.
            async with asyncio.timeout_at(None if timeout is None else ends):
                response = await generate(request)
        except TimeoutError:
            failure: BackendError = TransientError(f"timed out after {timeout:.3g} s")
            if probing and timeout < configured and not contact.answered:
                failure = FatalBackendError(
                    f"the server has not answered any call yet: no answer within "
                    f"{timeout:.3g} s (raise the role's probe_timeout_s for a model that "
                    "loads slowly)"
                )
                contact.silent = str(failure)
            return failure
        except BackendError as exc:
            return connection_failure(exc) or exc
        except Exception as exc:  # a backend bug or an SDK surprise: isolate, keep the reason
            return connection_failure(exc) or TransientError(f"{type(exc).__name__}: {exc}")
        finally:
            ATTEMPT_DEADLINE.reset(token)
        if contact is not None:
            contact.answered = True
        limiter.on_success()
        response.latency_s = response.latency_s or time.perf_counter() - start
        return response


def answer_in_place(
    answer: Callable[[LLMRequest], LLMResponse], request: LLMRequest
) -> LLMResponse:
    """What :func:`call_with_retries` makes of a backend that answers in this process at
    once (the synthetic responder without latency): it cannot hang, so no timer is armed,
    and its only failures are final at the first attempt.

    Raises:
        TransientError: The backend failed in a way that a retry could mend (the caller
            then goes through :func:`call_with_retries`).
    """
    start = time.perf_counter()
    try:
        response = answer(request)
    except BackendError as exc:
        if exc.retryable:
            raise
        reason = redact_text(str(exc) or type(exc).__name__)
        return LLMResponse(status="error", error=f"{reason} (after 1 attempt(s))", attempts=1)
    response.attempts = 1
    response.latency_s = response.latency_s or time.perf_counter() - start
    return response


def _prompt_tokens(request: LLMRequest) -> int:
    # About four characters a token: only used to pace a tokens-per-minute budget.
    return sum(len(m.get("content", "")) for m in request.messages) // 4
