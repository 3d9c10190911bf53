"""Calls a backend answers at once in this process (the synthetic responder without latency) are
answered one after another without the event loop's tasks: the results, the call store's rows
and its cache keys are those of the general path, and a failure a retry could mend still goes
through the retry layer."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from biasim.simulator.engine import store_signing
from biasim.simulator.engine.calls import Call
from biasim.simulator.engine.dispatch import Dispatcher
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.engine.store import CallStore
from biasim.simulator.llm.errors import TransientError
from biasim.simulator.llm.retry import RetryPolicy
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from tests import pipeline_studies
from tests.e2e.test_power_fast_path import HOW, _study

#: What the store says about each call (not when it was made or how long it took).
STORED = "key, unit_id, stage, role, reask, request, status, text, parsed, error, checksum"


def _run(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, in_order: bool) -> tuple:
    taken: list[int] = []
    answer_in_order = Dispatcher._in_order

    async def spy(self: Dispatcher, calls: list[Call]) -> list[LLMResponse]:
        taken.append(len(calls))
        return await answer_in_order(self, calls)

    with monkeypatch.context() as patch:
        patch.setattr(Dispatcher, "_in_order", spy)
        # One key for both runs' stores, so the same answers carry the same checksums.
        patch.setattr(store_signing, "token_bytes", lambda n: b"k" * n)
        if not in_order:
            patch.setattr(BackendRuntime, "in_place", property(lambda self: False))
        outcome = execute(prepare(RunOptions(study=str(path), out=out, seed=7)))
    assert bool(taken) == in_order  # the path meant was the path taken
    with sqlite3.connect(out / "calls.sqlite") as conn:
        rows = conn.execute(f"SELECT {STORED} FROM calls ORDER BY id").fetchall()
    return outcome.results.drop(columns=[c for c in HOW if c in outcome.results]), rows


@pytest.mark.parametrize("kind", ["decisions", "failures", "pipeline"])
def test_answers_in_order_are_the_general_paths_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    if kind == "pipeline":
        path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    else:
        path = _study(tmp_path, fail_rate=0.2 if kind == "failures" else 0.0)
    general, general_rows = _run(path, tmp_path / "general", monkeypatch, in_order=False)
    in_order, in_order_rows = _run(path, tmp_path / "in-order", monkeypatch, in_order=True)
    pd.testing.assert_frame_equal(general, in_order)
    assert in_order_rows == general_rows and len(in_order_rows) == len(general)
    if kind == "failures":
        assert (in_order["status"] == "error").any()


class _FlakyOnce(SyntheticBackend):
    """Fails each request once in a way a retry mends."""

    def __init__(self, role: object) -> None:
        super().__init__(role)
        self.asked: list[int] = []

    def answer(self, request: LLMRequest) -> LLMResponse:
        self.asked.append(request.seed)
        if self.asked.count(request.seed) == 1:
            raise TransientError("busy")
        return super().answer(request)


def _flaky_run(tmp_path: Path, name: str) -> tuple[list, list[int]]:
    backend = _FlakyOnce(SimpleNamespace(synthetic={}, options={}, model=None))
    runtime = BackendRuntime(backend, concurrency=1, policy=RetryPolicy(base_delay_s=0.0))
    store = CallStore(tmp_path / f"{name}.sqlite")
    request = LLMRequest(
        messages=({"role": "user", "content": "hi"},),
        temperature=0.7,
        top_p=1.0,
        max_tokens=10,
        seed=0,
    )
    calls = [
        Call(f"u{i}", "s", "r", dataclasses.replace(request, seed=i), None, runtime)
        for i in range(3)
    ]
    answers = asyncio.run(Dispatcher(store).run(calls))
    assert store.answer_count() == 3
    store.close()
    return [(a.status, a.text, a.attempts) for a in answers], backend.asked


def test_a_failure_a_retry_mends_goes_through_the_retry_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_order = _flaky_run(tmp_path, "in-order")
    with monkeypatch.context() as patch:
        patch.setattr(BackendRuntime, "in_place", property(lambda self: False))
        general = _flaky_run(tmp_path, "general")
    assert in_order == general
    assert [status for status, _, _ in in_order[0]] == ["answered"] * 3
    assert in_order[1] == [0, 0, 1, 1, 2, 2]  # each asked once in place, once by the retry layer
