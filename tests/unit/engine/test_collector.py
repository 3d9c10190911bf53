"""The cyclic garbage collector around the stages: paused while a stage answered in this process
builds its rows (and while a wave's agents are built), running for a stage that waits on a
server, and never left off or holding a finished model's objects where it cannot free them."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from biasim.simulator.common.interrupts import StopControl
from biasim.simulator.engine.model import StudyModel
from biasim.simulator.engine.runner import RunOptions, _run_parts, execute, prepare
from biasim.simulator.llm.runtime import BackendRuntime
from tests import pipeline_studies


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


@pytest.mark.parametrize("in_place", [True, False])
def test_the_collector_is_paused_only_for_stages_answered_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    seen: dict[str, list[bool]] = {"stage": [], "agents": []}
    run_stage, build_agents = StudyModel._run_stage, StudyModel._build_agents

    def stage_spy(self: StudyModel, plan: object) -> None:
        seen["stage"].append(gc.isenabled())
        run_stage(self, plan)

    def agents_spy(self: StudyModel, batch: list) -> None:
        seen["agents"].append(gc.isenabled())
        build_agents(self, batch)

    monkeypatch.setattr(StudyModel, "_run_stage", stage_spy)
    monkeypatch.setattr(StudyModel, "_build_agents", agents_spy)
    if not in_place:
        # As for a backend that waits on a server: the calls go through the event loop.
        monkeypatch.setattr(BackendRuntime, "in_place", property(lambda self: False))
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    outcome = execute(prepare(RunOptions(study=str(path), out=tmp_path / "run")))

    assert outcome.status == "complete"
    assert seen["stage"] == [not in_place] * 3  # apply, screen, offer
    assert seen["agents"] == [False]
    # After the run the collector runs and may free every object of it.
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_what_an_earlier_run_left_frozen_is_freed_when_a_model_is_built(tmp_path: Path) -> None:
    """A run stopped mid-way leaves its wave frozen; the next model's first wave collects what
    it left before pausing the collector, instead of freezing it again for good."""
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    garbage = _Cycle()
    left = weakref.ref(garbage)
    gc.freeze()
    del garbage
    gc.collect()
    assert left() is not None  # frozen: the collector skips it

    prepared = prepare(RunOptions(study=str(path), out=tmp_path / "run"))
    (tmp_path / "run").mkdir()
    store, _, writer, model = _run_parts(prepared, asyncio.new_event_loop(), StopControl(), print)
    store.close()
    writer.close()

    assert left() is None
    assert len(model.agents) > 0
    assert gc.isenabled()
