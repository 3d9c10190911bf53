"""The Mesa model: persona-endowed agents from the design matrix, one stage per step."""

from __future__ import annotations

import asyncio
from typing import Any

import mesa
import pandas as pd

from agents import ScenarioAgent, StagePlan

from .columns import CALL_COLUMNS, ID_COLUMNS
from .config import StudyConfig
from .design import design_matrix
from .dispatch import Call, Dispatcher
from .llm.runtime import BackendRuntime
from .llm.structured import output_schema
from .llm.types import LLMResponse


def result_columns(study: StudyConfig) -> list[str]:
    """Columns of the results table: ids, persona axes, every output field, call facts."""
    fields: list[str] = []
    for stage in study.stages:
        for name in stage.output or {"text": None}:
            if name not in fields:
                fields.append(name)
    return [*ID_COLUMNS, *study.personas.axes, *CALL_COLUMNS[:1], *fields, *CALL_COLUMNS[1:]]


class StudyModel(mesa.Model):
    """Runs a study: each ``step()`` is one stage in which every agent acts once.

    All agents' requests of a stage go to the dispatcher together, so calls run concurrently;
    answers are applied to agents in creation order, so results never depend on which call
    finished first.

    Args:
        study: The validated study.
        runtimes: Role name -> backend runtime.
        dispatcher: Executes the calls of a stage.
        loop: Event loop the dispatcher runs on (backend clients stay bound to it).
    """

    def __init__(
        self,
        study: StudyConfig,
        runtimes: dict[str, BackendRuntime],
        dispatcher: Dispatcher,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(rng=study.seed)
        self.study = study
        self.runtimes = runtimes
        self.dispatcher = dispatcher
        self._loop = loop
        specs = design_matrix(study)
        ScenarioAgent.create_agents(self, len(specs), spec=specs, study=study)
        self.plans = [self._plan(stage) for stage in study.stages]
        self.stage_index = 0
        self.columns = result_columns(study)
        self.datacollector = mesa.DataCollector(
            model_reporters={
                "stage": lambda m: m.plans[m.stage_index - 1].name if m.stage_index else None,
                "answered": lambda m: m.stage_counts.get("answered", 0),
                "invalid": lambda m: m.stage_counts.get("invalid", 0),
                "error": lambda m: m.stage_counts.get("error", 0),
            },
            tables={"actions": self.columns},
        )
        self.stage_counts: dict[str, int] = {}

    @property
    def total_units(self) -> int:
        """Units of work in the whole run (agents x stages)."""
        return len(self.agents) * len(self.plans)

    def _plan(self, stage: Any) -> StagePlan:
        role = self.study.roles[stage.role]
        return StagePlan(
            name=stage.name,
            role=stage.role,
            system=stage.system,
            prompt=stage.prompt,
            schema=output_schema(stage.output) if stage.output else None,
            temperature=role.temperature,
            top_p=role.top_p,
            max_tokens=role.max_tokens,
            base_seed=self.study.seed if role.seed is None else role.seed,
        )

    def step(self) -> None:
        """Run the next stage for every agent."""
        plan = self.plans[self.stage_index]
        runtime = self.runtimes[plan.role]
        role = self.study.roles[plan.role]
        agent_set = self.agents_by_type[ScenarioAgent]
        requests = agent_set.map("compose", plan)
        agents = list(agent_set)  # one pass over the weak-reference set, in the same order
        positions = [i for i, request in enumerate(requests) if request is not None]
        calls = [
            Call(
                unit_id=agent.unit(plan),
                stage=plan.name,
                role=plan.role,
                request=request,
                schema=plan.schema,
                runtime=runtime,
                reask=role.reask,
            )
            for agent, request in zip(agents, requests, strict=True)
            if request is not None
        ]
        answers = self._loop.run_until_complete(self.dispatcher.run(calls))
        responses: list[LLMResponse | None] = [None] * len(requests)
        for position, answer in zip(positions, answers, strict=True):
            responses[position] = answer
        self.stage_counts = {}
        for agent, response in zip(agents, responses, strict=True):
            agent.observe(plan, response)
            row = self._row(agent, plan, runtime, response)
            self.stage_counts[row["status"]] = self.stage_counts.get(row["status"], 0) + 1
            self.datacollector.add_table_row("actions", row, ignore_missing=True)
        self.stage_index += 1
        self.datacollector.collect(self)
        if self.stage_index == len(self.plans):
            self.running = False

    def _row(
        self,
        agent: ScenarioAgent,
        plan: StagePlan,
        runtime: BackendRuntime,
        response: LLMResponse | None,
    ) -> dict[str, Any]:
        spec = agent.spec
        row: dict[str, Any] = {
            "unit_id": agent.unit(plan),
            "agent_id": spec.agent_id,
            "stage": plan.name,
            "role": plan.role,
            "backend": runtime.backend.name,
            "model": runtime.model,
            "synthetic": runtime.backend.synthetic,
            "condition": spec.condition,
            "replicate": spec.replicate,
            "agent_index": spec.index,
            "persona_name": spec.persona.name,
            **dict(spec.persona.attributes),
        }
        if response is None:
            row.update(
                status="error",
                valid=False,
                error=f"skipped: stage `{agent.failed_stage}` gave no valid answer",
            )
            return row
        if response.parsed is not None:
            row.update(response.parsed)
        elif plan.schema is None and response.status != "error":
            row["text"] = response.text
        row.update(
            status=response.status,
            valid=response.status == "answered",
            raw_text=response.text,
            error=response.error,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            latency_s=response.latency_s,
            attempts=response.attempts,
            reasks=response.reasks,
            cached=response.cached,
        )
        return row

    def results(self) -> pd.DataFrame:
        """One row per agent action, in design order (stage by stage)."""
        return self.datacollector.get_table_dataframe("actions")
