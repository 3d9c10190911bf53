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
from dataclasses import dataclass, replace

from .llm.runtime import BackendRuntime
from .llm.structured import OutputSchema
from .llm.types import LLMRequest, LLMResponse
from .store import CallRecord, CallStore

REASK_TEMPLATE = (
    "Your answer did not follow the required format: {error}. Reply again with only a JSON "
    "object that matches the required format."
)


@dataclass(slots=True)
class Call:
    """One unit's request for a stage."""

    unit_id: str
    stage: str
    role: str
    request: LLMRequest
    schema: OutputSchema | None
    runtime: BackendRuntime
    reask: bool = True


class RunAborted(RuntimeError):
    """Too many calls failed; the run stops cleanly with everything answered saved."""


class Dispatcher:
    """Executes calls with bounded concurrency per backend.

    Args:
        store: The run's call store.
        max_error_rate: Abort once more than this share of finished units failed (after at least
            ``min_units`` units); ``None`` never aborts.
        min_units: Units to finish before the error rate is judged.
        on_progress: Called with the number of units finished so far.
    """

    def __init__(
        self,
        store: CallStore,
        *,
        max_error_rate: float | None = None,
        min_units: int = 20,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.max_error_rate = max_error_rate
        self.min_units = min_units
        self.on_progress = on_progress
        self.finished = 0
        self.errors = 0

    async def run(self, calls: list[Call]) -> list[LLMResponse]:
        """Answer every call; ``result[i]`` answers ``calls[i]``.

        Raises:
            RunAborted: The error-rate threshold was crossed.
        """
        results: list[LLMResponse | None] = [None] * len(calls)
        queues: dict[BackendRuntime, collections.deque[int]] = {}
        for index, call in enumerate(calls):
            queues.setdefault(call.runtime, collections.deque()).append(index)

        async def worker(queue: collections.deque[int]) -> None:
            while queue:
                index = queue.popleft()
                results[index] = await self._unit(calls[index])

        # One worker per slot the backend may ever use; the limiter decides how many proceed.
        tasks = [
            asyncio.ensure_future(worker(queue))
            for runtime, queue in queues.items()
            for _ in range(min(len(queue), runtime.limiter.max_limit))
        ]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.store.flush()
        return results  # type: ignore[return-value]

    async def _unit(self, call: Call) -> LLMResponse:
        response = await self._ask(call, call.request, reask=0)
        # An invalid answer that parsed chose outside open choices: kept as it is, since
        # re-asking would force the choice the stage leaves open.
        if response.status == "invalid" and response.parsed is None and call.reask:
            retry = replace(
                call.request,
                messages=(
                    *call.request.messages,
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": REASK_TEMPLATE.format(error=response.error)},
                ),
            )
            second = await self._ask(call, retry, reask=1)
            second.reasks = 1
            if second.status == "error":  # keep the invalid answer we have, with its raw text
                response.reasks = 1
            else:
                response = second
        self.finished += 1
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
            self.on_progress(self.finished)
        return response

    async def _ask(self, call: Call, request: LLMRequest, reask: int) -> LLMResponse:
        runtime = call.runtime
        key, material = runtime.cache_key(request)
        response = self.store.lookup(key)
        if response is None:
            response = await runtime.complete(request)
            if response.status != "error" and call.schema is not None:
                response.parsed, response.error = call.schema.parse(response.text)
                if response.parsed is not None:
                    response.error = call.schema.outside_choices(response.parsed)
                response.status = "answered" if response.error is None else "invalid"
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
            ),
            response,
        )
        return response
