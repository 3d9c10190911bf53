"""The run's spending cap (``--cost-limit``): no call is sent that could carry the run's cost,
with the calls in flight, past the limit.

Each call reserves an upper bound of its cost before it is sent (its prompt at a generous
characters-per-token ratio, its output at ``max_tokens``) and settles at what it was billed.
A call that does not fit waits for the calls in flight to settle; when none is in flight and it
still does not fit, the run stops like a first Ctrl-C: what is answered is saved, the run is
``interrupted`` with exit code :data:`COST_LIMIT_EXIT` and ``--resume`` (with a higher limit)
continues it. So a run stops within one call's cost of its limit and never passes it.
"""

from __future__ import annotations

import asyncio

from biasim.simulator.common.interrupts import CallNotIssued, StopControl
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.types import LLMRequest

#: Exit code of a run stopped at its cost limit (resumable).
COST_LIMIT_EXIT = 4
#: Characters per prompt token assumed for the reservation: fewer than any tokenizer of a
#: European language averages, so the bound holds.
CHARS_PER_TOKEN_BOUND = 2.0
#: Tokens a call without ``max_tokens`` is assumed to write at most.
UNCAPPED_OUTPUT_TOKENS = 4096


def cost_bound(runtime: BackendRuntime, request: LLMRequest) -> float:
    """An upper bound of what ``request`` costs on ``runtime`` (USD)."""
    if runtime.price is None:
        return 0.0
    chars = sum(len(m["content"]) for m in request.messages) + len(str(request.json_schema or ""))
    prompt = chars / CHARS_PER_TOKEN_BOUND + 8 * len(request.messages)
    output = request.max_tokens or UNCAPPED_OUTPUT_TOKENS
    return runtime.price.cost(prompt, output)


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
                if self.reserved == 0:
                    self.stop.halt(self.message(), COST_LIMIT_EXIT)
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

    async def settle(self, bound: float, cost: float | None) -> None:
        """Release a reservation of ``bound`` and add the call's billed ``cost``."""
        async with self._settled:
            self.reserved -= bound
            self.spent += cost or 0.0
            self._settled.notify_all()

    def message(self) -> str:
        """What the run says when it stops here."""
        return (
            f"stopped at the cost limit: ${self.spent:.4f} spent of ${self.limit:.4f}; the next "
            "call could pass it (continue with --resume and a higher --cost-limit)"
        )
