"""Where ``biasim power`` runs its simulated studies: in this process, in a pool of processes,
or on a Ray cluster. Each study depends only on its own seed, so every executor gives the
same findings; they come back in the order the studies were listed."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")

#: What a worker process keeps between studies: the simulation and its shared argument,
#: set once per process (loaded studies, imported analysis modules and caches stay warm).
_WORKER: dict[str, Any] = {}


def run_studies(
    simulate: Callable[[Job, Any], Result],
    jobs: Sequence[Job],
    shared: Any,
    workers: int = 1,
    ray_address: str | None = None,
) -> Iterator[tuple[Job, Result]]:
    """``(job, simulate(job, shared))`` for every job, in order.

    Args:
        simulate: A module-level function (worker processes import it by name).
        jobs: The simulated studies.
        shared: What every study needs and none changes (the loaded study).
        workers: Processes (1: this one). With Ray: CPUs of a local cluster.
        ray_address: ``"local"`` for a local Ray cluster, else a running cluster's address;
            ``None`` for no Ray.
    """
    if ray_address is not None:
        yield from _on_ray(simulate, jobs, shared, workers, ray_address)
    elif workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield job, simulate(job, shared)
    else:
        # spawn, not fork: the parent may hold threads (Ray, a progress display) and an
        # event loop, neither of which survives a fork.
        with ProcessPoolExecutor(
            max_workers=min(workers, len(jobs)),
            mp_context=get_context("spawn"),
            initializer=_start_worker,
            initargs=(simulate, shared),
        ) as pool:
            yield from zip(jobs, pool.map(_in_worker, jobs), strict=True)


def _start_worker(simulate: Callable[[Any, Any], Any], shared: Any) -> None:
    _WORKER["simulate"], _WORKER["shared"] = simulate, shared


def _in_worker(job: Any) -> Any:
    return _WORKER["simulate"](job, _WORKER["shared"])


def _on_ray(
    simulate: Callable[[Job, Any], Result],
    jobs: Sequence[Job],
    shared: Any,
    workers: int,
    address: str,
) -> Iterator[tuple[Job, Result]]:
    """The studies as Ray tasks of one CPU each; ``ray.init`` starts a local cluster of
    ``workers`` CPUs for ``"local"``, else joins the cluster at ``address`` (whose workers
    must import biasim and read the study's base file at the same path)."""
    import ray

    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=max(1, workers), include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    task = ray.remote(num_cpus=1)(simulate)
    shared_ref = ray.put(shared)
    pending = [task.remote(job, shared_ref) for job in jobs]
    for job, ref in zip(jobs, pending, strict=True):
        yield job, ray.get(ref)


class Progress:
    """Lines saying how far a power analysis is and about how long it has left.

    Args:
        total: Simulated studies in all.
        emit: Where the lines go (``None``: nowhere).
    """

    def __init__(self, total: int, emit: Callable[[str], None] | None) -> None:
        self.total = total
        self.emit = emit
        self.finished = 0
        self.start = time.monotonic()

    def done(self, what: str) -> None:
        """One more study finished; ``what`` names it."""
        self.finished += 1
        if self.emit is None:
            return
        elapsed = time.monotonic() - self.start
        left = elapsed / self.finished * (self.total - self.finished)
        self.emit(f"{what} ({self.finished}/{self.total}, about {_duration(left)} left)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
