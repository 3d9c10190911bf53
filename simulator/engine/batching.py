"""A stage's calls through the providers' batch APIs (roles with ``batch: true``).

Before a stage's calls go out one by one, the calls of batch roles that no store answers are
sent as batches; their answers are checked and recorded in the call store like live answers
(at the batch price) and handed to the dispatcher, which then only sends live what a batch
could not answer (an errored or expired request, an answer to re-ask).

Every batch's id and the calls in it go to the run directory's ``batches.jsonl`` the moment the
provider has accepted it, and again when its results are in the store. A run stopped while a
batch is pending (Ctrl-C, SIGTERM, a crash) is resumed by polling the same batch, so no request
is paid twice; the one window left is between the provider accepting a batch and the line
reaching the disk.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import orjson

from biasim.simulator.llm.batch_api import BatchState, ResultsElsewhere
from biasim.simulator.llm.errors import BackendError, FatalBackendError
from biasim.simulator.llm.runtime import BATCH_ID, BackendRuntime
from biasim.simulator.llm.types import LLMResponse

if TYPE_CHECKING:
    from biasim.simulator.common.interrupts import StopControl
    from biasim.simulator.engine.calls import Call
    from biasim.simulator.engine.store import CallStore

#: The run directory's record of its batches.
BATCHES = "batches.jsonl"
#: Requests per batch: well under both providers' limits (50,000 and 100,000 requests).
MAX_BATCH_REQUESTS = 10_000
#: Consecutive failed looks at a pending batch before the run stops (resumable).
MAX_POLL_FAILURES = 5


@dataclass
class BatchLedger:
    """The batches of a run: those pending (id -> the call keys in it) and the keys a batch
    could not answer (sent live from then on, never in a batch again).

    Args:
        path: ``batches.jsonl`` of the run directory, or ``None`` to keep nothing on disk.
    """

    path: Path | None = None
    pending: dict[str, list[str]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    #: Batch ids in the order they were submitted (every session).
    submitted: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            with self.path.open("ab") as handle:  # the next event starts a line of its own
                handle.write(b"\n")
        for line in raw.splitlines():
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a kill: its batch was never recorded as accepted
            if event.get("event") == "submitted":
                self.pending[event["batch_id"]] = list(event["keys"])
                self.submitted.append(event["batch_id"])
            elif event.get("event") == "collected":
                self.pending.pop(event["batch_id"], None)
                self.failed.update(event.get("failed", ()))

    def write(self, event: dict[str, object]) -> None:
        """Append ``event`` and make it durable before the run goes on."""
        if event["event"] == "submitted":
            self.pending[str(event["batch_id"])] = list(event["keys"])  # type: ignore[call-overload]
            self.submitted.append(str(event["batch_id"]))
        elif event["event"] == "collected":
            self.pending.pop(str(event["batch_id"]), None)
            self.failed.update(event.get("failed", ()))  # type: ignore[arg-type]
        if self.path is None:
            return
        with self.path.open("ab") as handle:
            handle.write(orjson.dumps(event) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())


class BatchStopped(Exception):
    """The run is stopping while a batch is pending; it stays recorded for ``--resume``."""


class BatchDispatcher(Protocol):
    """What the batch path uses of the dispatcher (:class:`.dispatch.Dispatcher`, which imports
    this module to send its batches): its store, ledger, stop requests and notices, and the
    book-keeping of its cost limit."""

    store: CallStore
    ledger: BatchLedger
    stop: StopControl
    notify: Callable[[str], None]

    def batch_bound(self, runtime: BackendRuntime, call: Call) -> float: ...

    def reserve_now(self, total: float) -> None: ...

    def fit_budget(
        self, runtime: BackendRuntime, wanted: dict[str, Call], keys: list[str]
    ) -> dict[str, float]: ...

    async def release(self, bounds: list[float]) -> None: ...

    async def batch_answer(
        self, call: Call, key: str, response: LLMResponse, bound: float
    ) -> LLMResponse: ...


class BatchRefused(Exception):
    """A batch's results lie where biasim may not go; the run stops, the batch recorded."""


async def answer_in_batches(
    dispatcher: BatchDispatcher, calls: list[Call]
) -> dict[str, LLMResponse]:
    """Send the calls of batch roles that no store answers as batches; their answers by key.

    Raises:
        BatchStopped: The run is stopping (the pending batches stay recorded).
        BatchRefused: A batch's results are on a server the role does not name.
        BackendError: A pending batch could not be looked at, several times in a row.
    """
    groups: dict[BackendRuntime, dict[str, Call]] = {}
    ledger = dispatcher.ledger
    for call in calls:
        runtime = call.runtime
        if runtime.batch is None:
            continue
        key, _ = runtime.cache_key(call.request)
        if key in ledger.failed or dispatcher.store.has(key):
            continue
        groups.setdefault(runtime, {}).setdefault(key, call)
    answers: dict[str, LLMResponse] = {}
    for runtime, wanted in groups.items():
        answers.update(await _runtime_batches(dispatcher, runtime, wanted))
    return answers


async def _runtime_batches(
    dispatcher: BatchDispatcher, runtime: BackendRuntime, wanted: dict[str, Call]
) -> dict[str, LLMResponse]:
    """Poll the recorded batches holding some of ``wanted``, submit the rest, and collect."""
    ledger = dispatcher.ledger
    batches: dict[str, list[str]] = {
        batch_id: [k for k in keys if k in wanted]
        for batch_id, keys in ledger.pending.items()
        if any(k in wanted for k in keys)
    }
    covered = {k for keys in batches.values() for k in keys}
    bounds = {k: dispatcher.batch_bound(runtime, wanted[k]) for k in covered}
    dispatcher.reserve_now(sum(bounds.values()))  # accepted by the provider: it will be billed
    fresh = [k for k in wanted if k not in covered]
    for start in range(0, len(fresh), MAX_BATCH_REQUESTS):
        chunk = dispatcher.fit_budget(runtime, wanted, fresh[start : start + MAX_BATCH_REQUESTS])
        if not chunk:
            break
        bounds.update(chunk)
        try:
            batch_id = await runtime.batch.submit(  # type: ignore[union-attr]
                [(k, wanted[k].request) for k in chunk]
            )
        except BackendError as exc:
            # Not accepted, not billed: these calls go live.
            await dispatcher.release([chunk[k] for k in chunk])
            dispatcher.notify(f"a batch was refused ({exc}); its calls are sent live")
            break
        ledger.write(
            {
                "event": "submitted",
                "batch_id": batch_id,
                "stage": next(iter(wanted.values())).stage,
                "backend": runtime.backend.name,
                "model": runtime.model,
                "keys": list(chunk),
            }
        )
        batches[batch_id] = list(chunk)
    results = await asyncio.gather(
        *(_collect(dispatcher, runtime, b, keys, wanted, bounds) for b, keys in batches.items())
    )
    return {k: v for found in results for k, v in found.items()}


async def _collect(
    dispatcher: BatchDispatcher,
    runtime: BackendRuntime,
    batch_id: str,
    keys: list[str],
    wanted: dict[str, Call],
    bounds: dict[str, float],
) -> dict[str, LLMResponse]:
    """Wait for one batch, record its answers, and say which of its calls it failed."""
    try:
        state = await _wait(dispatcher, runtime, batch_id)
    except BaseException:
        await dispatcher.release([bounds[k] for k in keys])
        raise
    answers: dict[str, LLMResponse] = {}
    failed: list[str] = []
    for key in keys:
        outcome = state.results.get(key, f"batch {state.status} without an answer for it")
        if isinstance(outcome, str):
            failed.append(key)
            await dispatcher.release([bounds[key]])
            continue
        outcome.extra[BATCH_ID] = batch_id
        outcome.server = getattr(runtime.backend, "base_url", None)
        answers[key] = await dispatcher.batch_answer(wanted[key], key, outcome, bounds[key])
    dispatcher.store.flush()
    dispatcher.ledger.write({"event": "collected", "batch_id": batch_id, "failed": failed})
    if failed:
        dispatcher.notify(
            f"batch {batch_id} ({state.status}) did not answer {len(failed)} of {len(keys)} "
            "calls; they are sent live"
        )
    return answers


async def _wait(dispatcher: BatchDispatcher, runtime: BackendRuntime, batch_id: str) -> BatchState:
    """Poll until the batch has ended; stop (leaving it recorded) when the run stops."""
    failures = 0
    while True:
        if dispatcher.stop.stopping:
            raise BatchStopped(batch_id)
        try:
            state = await runtime.batch.poll(batch_id)  # type: ignore[union-attr]
            failures = 0
        except ResultsElsewhere as exc:
            # Neither read (the key would go there) nor sent live (the batch is billed).
            raise BatchRefused(
                f"batch {batch_id}: {exc}; it stays recorded in {BATCHES} and `--resume` "
                "looks at it again"
            ) from None
        except FatalBackendError as exc:
            # The provider refuses to show the batch (gone, not this key's): nothing of it
            # will be answered, so its calls go live rather than hold the run for ever.
            return BatchState(batch_id, True, f"unreadable ({exc})")
        except BackendError:
            failures += 1
            if failures >= MAX_POLL_FAILURES:
                raise
            state = None
        if state is not None and state.ended:
            return state
        await _sleep_unless(runtime.batch_poll_s, lambda: dispatcher.stop.stopping)


async def _sleep_unless(seconds: float, stopping: Callable[[], bool]) -> None:
    """Sleep ``seconds``, waking early when ``stopping()`` turns true."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not stopping() and loop.time() < end:
        await asyncio.sleep(min(0.05, end - loop.time()))
