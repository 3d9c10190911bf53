"""The one retry layer and the concurrency / rate limiters, with scripted fake backends."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from scipy import stats

from biasim.simulator.llm.errors import FatalBackendError, OverloadedError, TransientError
from biasim.simulator.llm.limits import AdaptiveLimiter, RateLimiter
from biasim.simulator.llm.retry import RetryPolicy, call_with_retries
from biasim.simulator.llm.synthetic import uniform
from biasim.simulator.llm.types import LLMRequest, LLMResponse

REQUEST = LLMRequest(
    messages=({"role": "user", "content": "x"},), temperature=0, top_p=1, max_tokens=5, seed=1
)
FAST = RetryPolicy(
    max_attempts=4, base_delay_s=0.001, max_delay_s=0.01, timeout_s=1, total_timeout_s=5
)


def scripted(*outcomes):
    """A backend whose attempts raise or answer in the given order."""
    calls = []

    async def generate(request: LLMRequest) -> LLMResponse:
        calls.append(time.monotonic())
        outcome = outcomes[min(len(calls) - 1, len(outcomes) - 1)]
        if isinstance(outcome, Exception):
            raise outcome
        if outcome == "hang":
            await asyncio.sleep(10)
        return LLMResponse(text="ok")

    generate.calls = calls  # type: ignore[attr-defined]
    return generate


def retry(generate, policy=FAST, limiter=None):
    return asyncio.run(call_with_retries(generate, REQUEST, policy, limiter or AdaptiveLimiter(4)))


def test_transient_failures_are_retried_until_an_answer() -> None:
    gen = scripted(TransientError("500"), TransientError("reset"), "ok")
    response = retry(gen)
    assert response.status == "answered" and response.attempts == 3 and len(gen.calls) == 3


def test_fatal_errors_are_not_retried() -> None:
    gen = scripted(FatalBackendError("400 bad request"), "ok")
    response = retry(gen)
    assert response.status == "error" and response.attempts == 1
    assert "400 bad request" in response.error


def test_attempts_are_bounded_and_the_reason_kept() -> None:
    gen = scripted(TransientError("HTTP 500 from server"))
    response = retry(gen)
    assert response.status == "error" and response.attempts == 4 and len(gen.calls) == 4
    assert "HTTP 500 from server" in response.error and "4 attempt" in response.error


def test_retry_after_is_honoured() -> None:
    gen = scripted(OverloadedError("429", retry_after=0.3), "ok")
    response = retry(gen)
    assert response.status == "answered"
    assert gen.calls[1] - gen.calls[0] >= 0.3


def test_per_attempt_timeout_then_success() -> None:
    gen = scripted("hang", "ok")
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.001, timeout_s=0.1, total_timeout_s=5)
    start = time.monotonic()
    response = retry(gen, policy)
    assert response.status == "answered" and response.attempts == 2
    assert time.monotonic() - start < 1.0


def test_total_timeout_stops_retrying() -> None:
    gen = scripted(OverloadedError("429", retry_after=10))
    policy = RetryPolicy(max_attempts=10, timeout_s=1, total_timeout_s=0.5)
    start = time.monotonic()
    response = retry(gen, policy)
    assert response.status == "error" and response.attempts == 1
    assert "total timeout" in response.error and time.monotonic() - start < 0.5


def test_unexpected_exceptions_are_isolated() -> None:
    gen = scripted(KeyError("choices"), "ok")
    assert retry(gen).status == "answered"


def test_backoff_is_full_jitter_and_capped() -> None:
    import random

    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4)
    rng = random.Random(0)
    delays = [policy.backoff(a, rng) for a in (1, 2, 3, 4, 5, 6) for _ in range(200)]
    assert max(delays) <= 4 and min(delays) >= 0
    first = [policy.backoff(1, rng) for _ in range(2000)]
    assert np.mean(first) == pytest.approx(0.25, abs=0.02)


def test_adaptive_limiter_halves_on_overload_and_grows_back() -> None:
    limiter = AdaptiveLimiter(16)
    limiter.on_overload()
    assert limiter.limit == 8
    limiter.on_overload()  # the same burst: ignored within a second
    assert limiter.limit == 8
    # +1 slot per window of `limit` answers: 8 + 9 + ... + 15 = 92 answers back to 16.
    for _ in range(80):
        limiter.on_success()
    assert 14 < limiter.limit < 16
    for _ in range(40):
        limiter.on_success()
    assert limiter.limit == 16


def test_adaptive_limiter_bounds_in_flight() -> None:
    limiter = AdaptiveLimiter(3)

    async def work() -> None:
        async with limiter:
            await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(*(work() for _ in range(20)))

    asyncio.run(main())
    assert limiter.peak_in_flight == 3 and limiter.in_flight == 0


def test_rate_limiter_paces_requests_per_minute() -> None:
    # 600 rpm = 10/s with a bucket of one minute; drain the bucket, then time the next five.
    async def main() -> float:
        rate = RateLimiter(600, None)
        for _ in range(600):
            await rate.wait(0)
        start = time.monotonic()
        for _ in range(5):
            await rate.wait(0)
        return time.monotonic() - start

    assert asyncio.run(main()) == pytest.approx(0.5, abs=0.15)


def test_synthetic_uniform_is_uniform_and_independent_of_salt() -> None:
    seeds = np.arange(50_000) * 7919 + 13
    u0 = np.array([uniform(int(s), 0) for s in seeds])
    u1 = np.array([uniform(int(s), 1) for s in seeds])
    assert stats.kstest(u0, "uniform").pvalue > 0.001
    assert stats.kstest(u1, "uniform").pvalue > 0.001
    assert abs(stats.pearsonr(u0, u1).statistic) < 0.02
