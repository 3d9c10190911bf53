"""Agents who read what other agents wrote: screeners, hiring managers, evaluators.

A reader's unit of work is a :class:`Reading`: one evaluation (one document, a pair or a pool)
shown to it with stable labels (Applicant 1, 2, ...). Its answer rates the document or picks
``select`` of them by label; the model turns that into who advances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from biasim.agents.base import LLMAgent, StagePlan, render_messages
from biasim.simulator.llm.structured import OutputSchema, reading_schema
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from biasim.simulator.study.design import AgentSpec, call_seed

if TYPE_CHECKING:
    # The engine draws the evaluations and hands them to the readers; a reader never draws.
    from biasim.agents.documents import Evaluation


class ReaderAgent(LLMAgent):
    """An agent that reads documents other agents wrote and rates or picks among them."""

    def read(self, evaluation: Evaluation, member: int = 0) -> Reading:
        """The unit of work of reading ``evaluation`` (as ``member`` j >= 1 of a committee)."""
        return Reading(self, evaluation, member=member)


class Screener(ReaderAgent):
    """Reads applications and shortlists some (a pool) or accepts them (one at a time)."""


class HiringManager(ReaderAgent):
    """Decides among candidates others advanced (e.g. picks one of a shortlist)."""


class Evaluator(ReaderAgent):
    """Rates documents another agent wrote (a letter, an application), alone or side by side."""


@dataclass(slots=True)
class Reading:
    """One evaluation by one reader: what the model dispatches, like an agent's own stage."""

    agent: ReaderAgent
    evaluation: Evaluation
    failed_stage: str | None = None
    #: A committee member's place (1, 2, ...); 0 for the stage's only reader.
    member: int = 0

    @property
    def spec(self) -> AgentSpec:
        """The reader's design entry."""
        return self.agent.spec

    def unit(self, stage: StagePlan) -> str:
        """Stable id: the reader, the stage and the evaluation (so a resumed stage reads the
        same documents under the same id); a committee member's names its place."""
        unit = f"{self.agent.spec.agent_id}/{stage.name}/{self.evaluation.id}"
        return f"{unit}/reader{self.member}" if self.member else unit

    def context(self) -> dict[str, Any]:
        """What the templates see: the reader's own variables, ``documents`` (each with
        ``label``, ``name``, ``text`` and the ``attributes`` its name stands for), ``document``
        (the first), ``select`` and ``pool_size``, and the design variables every shown
        document shares (e.g. the job they applied for)."""
        shown = self.evaluation.shown
        documents = [
            {
                "label": i + 1,
                "name": s.name,
                "text": s.text,
                "attributes": dict(s.attributes),
                "variant": s.variant,
            }
            for i, s in enumerate(shown)
        ]
        return {
            **self.evaluation.shared("variables"),
            **self.evaluation.shared("levels"),
            **self.agent._context(),
            "documents": documents,
            "document": documents[0],
            "select": self.evaluation.k,
            "pool_size": len(shown),
        }

    def schema(self, stage: StagePlan) -> OutputSchema | None:
        """The stage's answer fields, plus ``selected`` (k labels) for pairs and pools."""
        if not self.evaluation.k:
            return self.agent.schema(stage)
        key = ("selection", self.evaluation.k, len(self.evaluation.shown))
        hit = stage.rendered.get(key)
        if hit is None:
            hit = reading_schema(
                stage.output or {},
                self.evaluation.k,
                len(self.evaluation.shown),
                forced=stage.forced_choice,
            )
            stage.rendered[key] = hit
        return hit

    def compose(
        self, stage: StagePlan, *, part: str = "prompt", text: str | None = None
    ) -> LLMRequest:
        """The request for this reading (``part`` as in :meth:`LLMAgent.compose`)."""
        messages = render_messages(stage, part, self.context(), text)
        schema = self.schema(stage) if part != "completion" else None
        shown = tuple(s.attributes for s in self.evaluation.shown)
        attributes = dict(self.agent.spec.persona.attributes)
        if len(shown) == 1:
            # A single reading: the synthetic responder answers from the identity shown.
            attributes.update(shown[0])
        return LLMRequest(
            messages=messages,
            seed=call_seed(stage.base_seed, self.unit(stage)),
            json_schema=schema.json_schema if schema is not None else None,
            attributes=tuple(attributes.items()),
            shown=shown,
            **stage.sampling_for(self.agent.spec.model_label),
        )

    def observe(self, stage: StagePlan, response: LLMResponse | None) -> None:
        """Readers keep no state between evaluations: each is judged on its own."""
