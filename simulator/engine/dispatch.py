"""Runs one stage's calls concurrently and hands the answers back in the order they were asked.

For each call: look it up in the store, else call the backend (rate limit, concurrency bound,
retries), validate the structure, re-ask once quoting the validation error if it broke (not when
a well-formed answer chose outside a stage's open choices: that one is kept), and record every
call. Completion order never matters: answers are returned by position.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import replace

from biasim.simulator.common.interrupts import CallNotIssued, StopControl
from biasim.simulator.engine.batching import (
    BatchLedger,
    BatchRefused,
    BatchStopped,
    answer_in_batches,
)
from biasim.simulator.engine.budget import CostBudget, Reservation, cost_bound, usage_anomaly
from biasim.simulator.engine.calls import Call
from biasim.simulator.engine.store import CallRecord, CallStore
from biasim.simulator.llm.errors import TransientError
from biasim.simulator.llm.logprobs import option_probabilities
from biasim.simulator.llm.retry import answer_in_place
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.types import LLMRequest, LLMResponse

REASK_TEMPLATE = (
    "Your answer did not follow the required format: {error}. Reply again with only a JSON "
    "object that matches the required format."
)


class RunAborted(RuntimeError):
    """Too many calls failed; the run stops cleanly with everything answered saved."""

    #: Whether ``--resume`` can get further (false where the design itself stops the run the
    #: same way every time, replayed from the call store).
    resumable = True


class RunInterrupted(Exception):
    """The user stopped the run; every call that finished is recorded.

    Attributes:
        answers: Per call (or per agent, once the model mapped them), the answer, or ``None``
            where the call never finished.
        finished: Per entry, whether it is final (an agent without a request is final too).
    """

    def __init__(self, answers: list[LLMResponse | None], finished: list[bool]) -> None:
        super().__init__("interrupted by the user")
        self.answers = answers
        self.finished = finished


class Dispatcher:
    """Executes calls with bounded concurrency per backend.

    Args:
        store: The run's call store.
        max_error_rate: Abort once more than this share of finished units failed (after at least
            ``min_units`` units); ``None`` never aborts.
        min_units: Units to finish before the error rate is judged.
        on_progress: Called with the number of units settled so far (agents sharing a call
            count each; see ``Call.units``) and the model's seconds for the call just finished
            (None when answered from the store).
        stop: The user's stop requests: level 1 sends no new call, level 2 cancels those in
            flight.
        budget: The run's cost limit, or ``None`` for none.
        ledger: The run's batches (see :mod:`simulator.engine.batching`).
        notify: Tells the user something the run does on its own (a batch's calls sent live).
    """

    def __init__(
        self,
        store: CallStore,
        *,
        max_error_rate: float | None = None,
        min_units: int = 20,
        on_progress: Callable[[int, float | None], None] | None = None,
        stop: StopControl | None = None,
        budget: CostBudget | None = None,
        ledger: BatchLedger | None = None,
        notify: Callable[[str], None] | None = None,
        direct: bool = False,
    ) -> None:
        self.store = store
        self.direct = direct
        self.ledger = ledger or BatchLedger()
        self.notify = notify or (lambda message: None)
        #: Answers a batch gave for this stage, by cache key (recorded already).
        self._batched: dict[str, LLMResponse] = {}
        self.stop = stop or StopControl()
        self.budget = budget
        self.max_error_rate = max_error_rate
        self.min_units = min_units
        self.on_progress = on_progress
        self.finished = 0
        self.errors = 0
        #: Units the finished calls settled (what progress counts).
        self.units_finished = 0

    async def run(self, calls: list[Call]) -> list[LLMResponse]:
        """Answer every call; ``result[i]`` answers ``calls[i]``.

        Raises:
            RunAborted: The error-rate threshold was crossed.
            RunInterrupted: The user stopped the run (with the answers that finished).
        """
        if self.direct and all(_drawn_in_place(call) for call in calls):
            return [self._settle(self._drawn_unit(call), call.units) for call in calls]
        if self.budget is None and all(call.runtime.in_place for call in calls):
            return await self._in_order(calls)
        results: list[LLMResponse | None] = [None] * len(calls)
        queues: dict[BackendRuntime, collections.deque[int]] = {}
        for index, call in enumerate(calls):
            queues.setdefault(call.runtime, collections.deque()).append(index)
        stop = self.stop
        if any(call.runtime.batch is not None for call in calls):
            try:
                self._batched = await answer_in_batches(self, calls)
            except BatchStopped:
                self.store.flush()
                raise RunInterrupted([None] * len(calls), [False] * len(calls)) from None
            except BatchRefused as exc:
                self.store.flush()
                raise RunAborted(str(exc)) from None

        async def worker(queue: collections.deque[int]) -> None:
            while queue and not stop.stopping:
                index = queue.popleft()
                try:
                    results[index] = await self._unit(calls[index])
                except CallNotIssued:
                    return

        # One worker per slot the backend may ever use; the limiter decides how many proceed.
        tasks = [
            asyncio.ensure_future(worker(queue))
            for runtime, queue in queues.items()
            for _ in range(min(len(queue), runtime.limiter.max_limit))
        ]
        unregister = stop.on_cancel(lambda: [task.cancel() for task in tasks])
        try:
            await asyncio.gather(*tasks)
        except BaseException as exc:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not (isinstance(exc, asyncio.CancelledError) and stop.level >= 2):
                raise
        finally:
            unregister()
            self.store.flush()
        if stop.stopping:
            raise RunInterrupted(results, [r is not None for r in results])
        return results  # type: ignore[return-value]

    async def _unit(self, call: Call) -> LLMResponse:
        response = await self._ask(call, call.request, reask=0)
        # An invalid answer that parsed chose outside open choices: kept as it is, since
        # re-asking would force the choice the stage leaves open.
        if response.status == "invalid" and response.parsed is None and call.reask:
            second = await self._ask(call, _reask_request(call, response), reask=1)
            response = _after_reask(response, second)
        return self._settle(response, call.units)

    async def _in_order(self, calls: list[Call]) -> list[LLMResponse]:
        """``run`` for calls a backend answers at once in this process (the synthetic
        responder without latency): one after another, without a task per slot or a coroutine
        per step, since nothing waits; the retry layer only for a failure it could mend."""
        results: list[LLMResponse | None] = [None] * len(calls)
        try:
            for index, call in enumerate(calls):
                if self.stop.stopping:
                    break
                request = call.request
                response = self._ask_now(call, request, 0) or await self._retried(call, request, 0)
                if response.status == "invalid" and response.parsed is None and call.reask:
                    request = _reask_request(call, response)
                    second = self._ask_now(call, request, 1) or await self._retried(
                        call, request, 1
                    )
                    response = _after_reask(response, second)
                results[index] = self._settle(response, call.units)
        finally:
            self.store.flush()
        if self.stop.stopping:
            raise RunInterrupted(results, [r is not None for r in results])
        return results  # type: ignore[return-value]

    def _ask_now(self, call: Call, request: LLMRequest, reask: int) -> LLMResponse | None:
        """``_ask`` for a call answered in place; ``None`` (nothing recorded) when the backend
        failed in a way a retry could mend (see :meth:`_retried`)."""
        runtime = call.runtime
        key, material = runtime.cache_key(request)
        response = self.store.lookup(key)
        if response is None:
            try:
                response = runtime.answer_now(request)
            except TransientError:
                return None
            _check(call, response)
        self._record(call, key, material, reask, response)
        return response

    def _drawn_unit(self, call: Call) -> LLMResponse:
        """``_unit`` for a synthetic call drawn in place: no store, no retry layer, no event
        loop (a throwaway run, such as one simulated study of ``biasim power``)."""
        response = self._drawn(call, call.request)
        if response.status == "invalid" and response.parsed is None and call.reask:
            response = _after_reask(response, self._drawn(call, _reask_request(call, response)))
        return response

    def _drawn(self, call: Call, request: LLMRequest) -> LLMResponse:
        """The answer ``_ask`` would give a synthetic call, drawn by the backend in place."""
        response = answer_in_place(call.runtime.backend.answer, request)
        _check(call, response)
        return response

    def _settle(self, response: LLMResponse, units: int = 1) -> LLMResponse:
        """Count a finished call and the ``units`` it settles: abort past the error-rate
        threshold, report progress."""
        self.finished += 1
        self.units_finished += units
        if response.status == "error":
            self.errors += 1
            if (
                self.max_error_rate is not None
                and self.finished >= self.min_units
                and self.errors / self.finished > self.max_error_rate
            ):
                raise RunAborted(
                    f"{self.errors} of {self.finished} units failed "
                    f"(> {self.max_error_rate:.0%}); last error: {response.error}"
                )
        if self.on_progress is not None:
            self.on_progress(self.units_finished, None if response.cached else response.latency_s)
        return response

    def _stopping(self) -> bool:
        return self.stop.stopping

    async def _retried(self, call: Call, request: LLMRequest, reask: int) -> LLMResponse:
        """``_ask`` through the retry layer alone, after the answer in place failed in a way a
        retry could mend (as :meth:`BackendRuntime.complete` goes on)."""
        return await self._ask(call, request, reask, in_place=False)

    async def _ask(
        self, call: Call, request: LLMRequest, reask: int, in_place: bool = True
    ) -> LLMResponse:
        runtime = call.runtime
        key, material = runtime.cache_key(request)
        batched = self._batched.pop(key, None)
        if batched is not None:
            return batched  # recorded when its batch was collected
        response = self.store.lookup(key)
        cost = None if response is None else runtime.cost(response)
        if response is None:
            response, cost = await self._paid(runtime, request, in_place)
            _check(call, response)
        self._record(call, key, material, reask, response, cost)
        return response

    def _record(
        self,
        call: Call,
        key: str,
        material: str,
        reask: int,
        response: LLMResponse,
        cost: float | None = None,
    ) -> None:
        """Store the call, at ``cost`` (default: what its usage costs at its price)."""
        runtime = call.runtime
        self.store.record(
            CallRecord(
                key=key,
                unit_id=call.unit_id,
                stage=call.stage,
                role=call.role,
                backend=runtime.backend.name,
                model=runtime.model,
                request=material,
                reask=reask,
                cost_usd=runtime.cost(response) if cost is None else cost,
            ),
            response,
        )

    def batch_bound(self, runtime: BackendRuntime, call: Call) -> float:
        """What the cost limit holds back for ``call`` while its batch is pending."""
        return cost_bound(runtime, call.request) if self.budget is not None else 0.0

    def reserve_now(self, total: float) -> None:
        """Hold back ``total`` for requests a provider accepted in an earlier session."""
        if self.budget is not None:
            self.budget.reserve_anyway(total)

    def fit_budget(
        self, runtime: BackendRuntime, wanted: dict[str, Call], keys: list[str]
    ) -> dict[str, float]:
        """The first of ``keys`` that fit within the cost limit, each with what it holds back;
        the rest go live, where the limit stops the run as usual."""
        fitted: dict[str, float] = {}
        for key in keys:
            bound = self.batch_bound(runtime, wanted[key])
            if self.budget is not None and not self.budget.reserve_if_fits(bound):
                break
            fitted[key] = bound
        return fitted

    async def release(self, bounds: list[float]) -> None:
        """Give back what unanswered batch requests held (they were not billed)."""
        if self.budget is not None:
            for bound in bounds:
                await self.budget.settle(bound, 0.0)

    async def batch_answer(
        self, call: Call, key: str, response: LLMResponse, bound: float
    ) -> LLMResponse:
        """Check and record a batch's answer to ``call`` like a live one, at the batch price."""
        _check(call, response)
        material = call.runtime.cache_key(call.request)[1]
        cost = call.runtime.cost(response)
        if self.budget is not None:
            cost = self._within_bound(call.runtime, call.request, response, cost)
            await self.budget.settle(bound, cost)
        self._record(call, key, material, 0, response, cost)
        return response

    async def _paid(
        self, runtime: BackendRuntime, request: LLMRequest, in_place: bool = True
    ) -> tuple[LLMResponse, float | None]:
        """A call to the backend and what it cost, within the cost limit when there is one:
        its worst case is reserved before the first attempt (and again before a retry after
        a failure that may have been billed) and settled at what it was billed."""
        if self.budget is None:
            response = await runtime.complete(request, self._stopping, in_place=in_place)
            return response, runtime.cost(response)
        hold = Reservation(self.budget, cost_bound(runtime, request))
        await hold.take()
        cost: float | None = 0.0
        try:
            response = await runtime.complete(
                request,
                self._stopping,
                in_place=in_place,
                before_retry=hold.retry,
                after_failure=hold.failed,
            )
            cost = self._within_bound(runtime, request, response, runtime.cost(response))
        finally:
            await hold.settle(cost)
        return response, cost

    def _within_bound(
        self,
        runtime: BackendRuntime,
        request: LLMRequest,
        response: LLMResponse,
        cost: float | None,
    ) -> float | None:
        """``cost``, unless the response reports more than its request could be billed: then
        the run stops at the anomaly and the call counts at the most it could cost."""
        why = usage_anomaly(runtime, request, response)
        if not why or self.budget is None:
            return cost
        bound = cost_bound(runtime, request)
        self.budget.anomaly(why, bound, cost)
        return bound


def _check(call: Call, response: LLMResponse) -> None:
    """Validate a new answer's structure and read a decision's probabilities (in place)."""
    if response.status != "error" and call.schema is not None:
        response.parsed, response.error = call.schema.parse(response.text)
        if response.parsed is not None:
            response.error = call.schema.outside_choices(response.parsed)
        response.status = "answered" if response.error is None else "invalid"
    if call.decision is not None and response.token_logprobs is not None:
        field, options = call.decision
        response.probabilities = option_probabilities(
            response.text, response.token_logprobs, field, options
        )


def _drawn_in_place(call: Call) -> bool:
    """Whether ``call`` goes to a synthetic backend that answers without waiting."""
    return bool(getattr(call.runtime.backend, "immediate", False))


def _reask_request(call: Call, response: LLMResponse) -> LLMRequest:
    """The request that re-asks ``call`` quoting why ``response`` broke the structure."""
    return replace(
        call.request,
        messages=(
            *call.request.messages,
            {"role": "assistant", "content": response.text},
            {"role": "user", "content": REASK_TEMPLATE.format(error=response.error)},
        ),
    )


def _after_reask(first: LLMResponse, second: LLMResponse) -> LLMResponse:
    """The answer kept after a re-ask: the second, unless it failed (then the invalid first
    one, with its raw text)."""
    second.reasks = 1
    if second.status == "error":
        first.reasks = 1
        return first
    return second
