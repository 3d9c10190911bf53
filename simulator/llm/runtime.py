"""A backend in service: its identity, cache keys, concurrency bound, rate limits and retries."""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from biasim.simulator.common.interrupts import CallNotIssued
from biasim.simulator.llm.batch_api import BatchAPI
from biasim.simulator.llm.errors import BackendError, TransientError
from biasim.simulator.llm.limits import AdaptiveLimiter, RateLimiter
from biasim.simulator.llm.pricing import Price
from biasim.simulator.llm.registry import Backend
from biasim.simulator.llm.retry import (
    FirstContact,
    RetryPolicy,
    answer_in_place,
    call_with_retries,
)
from biasim.simulator.llm.structured import canonical_json
from biasim.simulator.llm.types import LLMRequest, LLMResponse, extra_sampling

#: The key of ``LLMResponse.extra`` naming the batch that answered a call.
BATCH_ID = "batch_id"


class BackendRuntime:
    """Everything between the engine and one backend instance.

    Args:
        backend: The backend.
        concurrency: Upper bound on calls in flight.
        policy: Retry policy.
        requests_per_minute: Optional request quota.
        tokens_per_minute: Optional token quota.
        probe_timeout_s: Per-attempt timeout until the server has answered once.
        price: What a call costs, or ``None`` when the model's price is unknown.
        batch: The provider's batch API, when the role sends its calls in batches.
        batch_poll_s: Seconds between two looks at a pending batch.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        concurrency: int,
        policy: RetryPolicy,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        probe_timeout_s: float = 60.0,
        price: Price | None = None,
        batch: BatchAPI | None = None,
        batch_poll_s: float = 30.0,
    ) -> None:
        self.backend = backend
        self.price = price
        self.batch = batch
        self.batch_poll_s = batch_poll_s
        self.identity: dict[str, Any] = backend.identity()
        self.model = str(self.identity.get("model", ""))
        self._identity_json = canonical_json(self.identity)
        # The synthetic responder has no server to overload; real backends adapt, here or,
        # when they spread a role over several servers, per server (then this bound is fixed).
        adaptive = not backend.synthetic and not getattr(backend, "adapts_per_server", False)
        self.limiter = AdaptiveLimiter(concurrency, adaptive=adaptive)
        self.rate = RateLimiter(requests_per_minute, tokens_per_minute)
        self.policy = policy
        self._jitter = random.Random()
        # Only a server can be absent or silent; a model in this process (the synthetic
        # responder, llama.cpp loading a model on its first call) is neither.
        served = "base_url" in self.identity or "host" in self.identity
        self.contact = FirstContact(probe_timeout_s) if served else None
        # A backend that answers at once in this process, unpaced, needs no retry machinery.
        self._in_place = bool(getattr(backend, "immediate", False)) and not self.rate.active
        #: Whether an invalid answer is worth asking again with the error quoted: not for a
        #: decision tool, which reads no instructions and would answer the same.
        self.reasks = bool(getattr(backend, "reasks", True))

    def cache_key(self, request: LLMRequest) -> tuple[str, str]:
        """``(key, material)``: the key covers the backend's identity, the endpoint, every
        message, every sampling parameter, the seed, the replicate index and the requested
        schema."""
        fields = {
            "backend": self._identity_json,
            "messages": request.messages,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
            "seed": request.seed,
            "replicate": request.replicate,
            "schema": request.json_schema,
            # Only the synthetic responder answers from the attributes themselves.
            "attributes": request.attributes if self.backend.synthetic else None,
        }
        if request.shown and self.backend.synthetic:
            # Only for readings, so the keys of every other call stay what they were.
            fields["shown"] = request.shown
        if request.items and self.backend.synthetic:
            fields["items"] = request.items
        if request.picks != 1 and self.backend.synthetic:
            fields["picks"] = request.picks
        # Set only when used, so the keys of calls without them stay what they were.
        fields.update(extra_sampling(request))
        if request.endpoint != "chat":
            fields["endpoint"] = request.endpoint
        if request.top_logprobs:
            fields["top_logprobs"] = request.top_logprobs
        material = canonical_json(fields)
        return hashlib.sha256(material.encode()).hexdigest(), material

    @property
    def in_place(self) -> bool:
        """Whether :meth:`answer_now` answers this backend's calls: at once, in this process,
        unpaced and unbatched (the synthetic responder without latency)."""
        return self._in_place and self.batch is None

    def answer_now(self, request: LLMRequest) -> LLMResponse:
        """What :meth:`complete` answers for a backend answering :attr:`in_place`.

        Raises:
            TransientError: The backend failed in a way a retry could mend.
        """
        return answer_in_place(self.backend.answer, request)  # type: ignore[attr-defined]

    def cost(self, response: LLMResponse) -> float | None:
        """USD this backend billed for ``response`` (nothing for a stored answer); ``None``
        when the price is unknown."""
        if response.cached:
            return 0.0
        if self.price is None:
            return None
        # A batch answer is billed at the batch price (the live one where the table has none).
        batch = BATCH_ID in response.extra and self.price.batch_input is not None
        return self.price.cost(response.prompt_tokens, response.completion_tokens, batch=batch)

    async def complete(
        self,
        request: LLMRequest,
        stopping: Callable[[], bool] | None = None,
        *,
        in_place: bool = True,
        before_retry: Callable[[BackendError], Awaitable[None]] | None = None,
        after_failure: Callable[[BackendError], Awaitable[None]] | None = None,
    ) -> LLMResponse:
        """One call through the rate limiter, the concurrency bound and the retry layer
        (answered in place first where the backend can be, unless ``in_place`` is false:
        that answer already failed in a way a retry could mend); ``before_retry`` and
        ``after_failure`` as :func:`call_with_retries` takes them.

        Raises:
            CallNotIssued: ``stopping()`` was true before an attempt was sent.
        """
        if self._in_place and in_place:
            if stopping is not None and stopping():
                raise CallNotIssued
            with contextlib.suppress(TransientError):
                return answer_in_place(self.backend.answer, request)  # type: ignore[attr-defined]
        return await call_with_retries(
            self.backend.generate,
            request,
            self.policy,
            self.limiter,
            self.rate if self.rate.active else None,
            self._jitter,
            stopping,
            self.contact,
            before_retry,
            after_failure,
        )
