"""The run's spending cap (``--cost-limit``): a hard bound on what the run lets be sent.

Before a call is sent, the most it could cost is reserved against the cap, beside what is spent
and what the calls in flight reserve:

* its prompt at one token per UTF-8 byte of every message (roles included) and of the answer's
  JSON Schema (a byte-level BPE token, every shipped provider's kind, covers at least one byte,
  so CJK and emoji cost no more than their bytes), plus :data:`MESSAGE_TOKENS_BOUND` a message
  and :data:`REQUEST_TOKENS_BOUND` a call for the chat template, plus the tokens the provider
  adds itself (the backend's ``added_prompt_tokens``: Anthropic's tool-use system prompt and
  tool definition for a structured answer);
* its output at ``max_tokens`` (or the backend's own cap, ``uncapped_max_tokens``; a priced
  role with neither cannot run under a cap, see :func:`output_token_bound`).

A call that does not fit waits for the calls in flight to settle; when none is in flight and it
still does not fit, the run stops like a first Ctrl-C: what is answered is saved, the run is
``interrupted`` with exit code :data:`COST_LIMIT_EXIT` and ``--resume`` (with a higher limit)
continues it. A retry after a failure the server may have billed (a timeout, a reset, a 5xx,
a malformed body; not a 429/503 or a refused connection) counts the failed attempt at its
reservation and reserves again. A response reporting more tokens than its request allowed is an
anomaly: the call is kept and counted at the most it could cost, and the run stops the same way.
So the ledger ends at or below the limit.
"""

from __future__ import annotations

import asyncio

from biasim.simulator.common.interrupts import CallNotIssued, StopControl
from biasim.simulator.llm.errors import BackendError, ConnectionRefused
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import canonical_json
from biasim.simulator.llm.types import LLMRequest, LLMResponse

#: Exit code of a run stopped at its cost limit or at a usage anomaly (resumable).
COST_LIMIT_EXIT = 4
#: Chat-template tokens around one message (OpenAI's count is 3-4: role and separators).
MESSAGE_TOKENS_BOUND = 8
#: Chat-template tokens a call adds once (the reply's priming, a completion prompt's labels).
REQUEST_TOKENS_BOUND = 16
#: USD below which what the calls in flight reserve is taken for nothing (rounding).
_DRIFT = 1e-9


def prompt_token_bound(runtime: BackendRuntime, request: LLMRequest) -> int:
    """The most prompt tokens ``request`` can be billed on ``runtime``."""
    text = sum(len(m["role"].encode()) + len(m["content"].encode()) for m in request.messages)
    schema = len(canonical_json(request.json_schema).encode()) if request.json_schema else 0
    added = getattr(runtime.backend, "added_prompt_tokens", None)
    provider = added(request) if added is not None else 0
    template = MESSAGE_TOKENS_BOUND * len(request.messages) + REQUEST_TOKENS_BOUND
    return text + schema + template + provider


def output_token_bound(backend: object, max_tokens: int | None) -> int | None:
    """The most output tokens a call with ``max_tokens`` can be billed on ``backend``; ``None``
    when nothing caps them (no ``max_tokens`` and no cap the backend always sends)."""
    return max_tokens or getattr(backend, "uncapped_max_tokens", None)


def cost_bound(runtime: BackendRuntime, request: LLMRequest) -> float:
    """The most ``request`` can cost on ``runtime`` (USD, at the live price the ledger uses)."""
    price = runtime.price
    if price is None or (price.input == 0 and price.output == 0):
        return 0.0
    output = output_token_bound(runtime.backend, request.max_tokens)
    if output is None:  # refused at prepare (runner.build_runtimes); never sent under a cap
        raise ValueError("a call under a cost limit needs max_tokens")
    return price.cost(prompt_token_bound(runtime, request), output)


def usage_anomaly(runtime: BackendRuntime, request: LLMRequest, response: LLMResponse) -> str:
    """Why ``response`` reports more tokens than ``request`` could be billed; ``""`` when it
    does not (or nothing is billed)."""
    if response.cached or cost_bound(runtime, request) == 0.0:
        return ""
    prompt = prompt_token_bound(runtime, request)
    output = output_token_bound(runtime.backend, request.max_tokens)
    if response.prompt_tokens <= prompt and response.completion_tokens <= (output or 0):
        return ""
    return (
        f"the {runtime.backend.name} server reported {response.prompt_tokens} prompt and "
        f"{response.completion_tokens} output tokens for a call of at most {prompt} prompt "
        f"tokens and {output} output tokens (max_tokens)"
    )


def may_be_billed(failure: BackendError) -> bool:
    """Whether a failed attempt may still be billed: the server may have read the prompt and
    written an answer that was lost (timeout, reset, 5xx, malformed body); a 429/503 or a
    refused connection was turned away before any of that."""
    return not failure.overloaded and not isinstance(failure, ConnectionRefused)


class CostBudget:
    """The cap, what the run has spent (every session) and what the calls in flight reserve.

    Args:
        limit: USD.
        spent: USD already billed (earlier sessions of a resumed run).
        stop: Halted when a call cannot fit.
    """

    def __init__(self, limit: float, spent: float, stop: StopControl) -> None:
        self.limit = limit
        self.spent = spent
        self.reserved = 0.0
        #: USD counted for failed attempts that may have been billed (within ``spent``).
        self.unconfirmed = 0.0
        self.stop = stop
        self._settled = asyncio.Condition()

    async def reserve(self, bound: float) -> None:
        """Wait until a call of cost ``bound`` fits, and reserve it.

        Raises:
            CallNotIssued: It cannot fit even with nothing in flight (the run is halted), or
                the run is stopping.
        """
        async with self._settled:
            while self.spent + self.reserved + bound > self.limit:
                if self.stop.stopping:
                    raise CallNotIssued()
                if self.reserved <= _DRIFT:
                    self.stop.halt(self.message(), COST_LIMIT_EXIT)
                    self._settled.notify_all()  # the others waiting see the run stop
                    raise CallNotIssued()
                await self._settled.wait()
            self.reserved += bound

    def reserve_if_fits(self, bound: float) -> bool:
        """Reserve ``bound`` now if it fits beside what is spent and reserved (a batch's
        request, which cannot wait for calls in flight: the batch goes out at once)."""
        if self.spent + self.reserved + bound > self.limit:
            return False
        self.reserved += bound
        return True

    def reserve_anyway(self, bound: float) -> None:
        """Reserve ``bound`` without a check: requests a provider already accepted in an
        earlier session (a pending batch) are billed whatever the limit is now."""
        self.reserved += bound

    async def settle(self, bound: float, cost: float | None, unconfirmed: bool = False) -> None:
        """Release a reservation of ``bound`` and add the call's billed ``cost`` (one that
        may have been billed, for a failed attempt, when ``unconfirmed``)."""
        async with self._settled:
            if unconfirmed:
                self.unconfirmed += cost or 0.0
            self.reserved -= bound
            if self.reserved <= _DRIFT:  # sums of floats: nothing in flight leaves ~1e-17
                self.reserved = 0.0
            self.spent += cost or 0.0
            self._settled.notify_all()

    def anomaly(self, why: str, bound: float, reported: float | None) -> None:
        """Stop the run: a response reported more than its request could cost."""
        self.stop.halt(
            f"stopped at a usage anomaly: {why}; the call is kept and counted at the most it "
            f"could cost (${bound:.4f}, not the ${reported or 0.0:.4f} its usage says); check "
            "the provider's bill before continuing with --resume",
            COST_LIMIT_EXIT,
        )

    def message(self) -> str:
        """What the run says when it stops here."""
        unconfirmed = (
            f" (${self.unconfirmed:.4f} of it for failed attempts that may have been billed)"
            if self.unconfirmed
            else ""
        )
        return (
            f"stopped at the cost limit: ${self.spent:.4f} spent{unconfirmed} of "
            f"${self.limit:.4f}; the next call could pass it (continue with --resume and a "
            "higher --cost-limit)"
        )


class Reservation:
    """One call's hold on the budget, from before its first attempt until it is settled."""

    def __init__(self, budget: CostBudget, bound: float) -> None:
        self.budget = budget
        self.bound = bound
        self.held = False

    async def take(self) -> None:
        """Reserve the call's bound (waiting for room; see :meth:`CostBudget.reserve`)."""
        await self.budget.reserve(self.bound)
        self.held = True

    async def failed(self, failure: BackendError) -> None:
        """After a failed attempt, the last included: count it at the call's bound if it may
        have been billed (the hold is spent; a retry reserves again)."""
        if self.held and may_be_billed(failure):
            self.held = False
            await self.budget.settle(self.bound, self.bound, unconfirmed=True)

    async def retry(self, failure: BackendError) -> None:
        """Before another attempt: reserve again if the failed one spent the hold.

        Raises:
            CallNotIssued: The next attempt does not fit (the run stops at the limit).
        """
        if not self.held:
            await self.take()

    async def settle(self, cost: float | None) -> None:
        """Release the hold and add what the call was billed."""
        if self.held:
            self.held = False
            await self.budget.settle(self.bound, cost)
