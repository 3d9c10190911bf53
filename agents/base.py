"""The common base of persona-endowed agents that act through language-model calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mesa

from personas import Persona
from simulator.design import AgentSpec, call_seed, template_context, unit_id
from simulator.llm.structured import OutputSchema
from simulator.llm.types import LLMRequest, LLMResponse
from simulator.templating import compile_template

if TYPE_CHECKING:
    from simulator.config import StudyConfig


@dataclass(frozen=True)
class StagePlan:
    """What agents need to act in one stage: templates, output contract, sampling parameters."""

    name: str
    role: str
    system: str | None
    prompt: str
    schema: OutputSchema | None
    temperature: float
    top_p: float
    max_tokens: int
    base_seed: int
    #: Rendered messages by template context. Templates are pure functions of their variables
    #: (the sandbox has no random filter), and agents sharing a persona share a prompt.
    rendered: dict[tuple[Any, ...], tuple[dict[str, str], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )


class LLMAgent(mesa.Agent):
    """An agent whose actions are answers from a language model.

    It composes one request per stage from its persona and what it answered before, and keeps
    each stage's structured answer in ``outputs`` for later stages' templates. It never talks to
    a backend: the model collects every agent's request and dispatches them together.
    """

    def __init__(self, model: mesa.Model, spec: AgentSpec, study: StudyConfig) -> None:
        super().__init__(model)
        self.spec = spec
        self.study = study
        self.outputs: dict[str, dict[str, Any]] = {}
        self.failed_stage: str | None = None

    @property
    def persona(self) -> Persona:
        """The agent's persona."""
        return self.spec.persona

    def unit(self, stage: StagePlan) -> str:
        """Stable id of this agent's work in ``stage``."""
        return unit_id(self.spec.agent_id, stage.name)

    def compose(self, stage: StagePlan) -> LLMRequest | None:
        """The request for ``stage``, or ``None`` when an earlier stage left nothing to build on."""
        if self.failed_stage is not None:
            return None
        spec = self.spec
        key = (spec.condition, spec.persona, spec.replicate, _freeze(self.outputs))
        messages = stage.rendered.get(key)
        if messages is None:
            context = template_context(
                self.study,
                spec.condition,
                spec.condition_vars,
                spec.persona,
                spec.replicate,
                self.outputs,
            )
            parts = [("system", stage.system), ("user", stage.prompt)]
            messages = tuple(
                {"role": role, "content": compile_template(source).render(context)}
                for role, source in parts
                if source is not None
            )
            stage.rendered[key] = messages
        return LLMRequest(
            messages=messages,
            temperature=stage.temperature,
            top_p=stage.top_p,
            max_tokens=stage.max_tokens,
            seed=call_seed(stage.base_seed, self.unit(stage)),
            json_schema=stage.schema.json_schema if stage.schema is not None else None,
            replicate=spec.replicate,
            attributes=spec.persona.attributes,
        )

    def observe(self, stage: StagePlan, response: LLMResponse | None) -> None:
        """Take in the answer to ``stage`` (``None`` when the stage was skipped)."""
        if response is None or response.status != "answered":
            self.failed_stage = self.failed_stage or stage.name
            return
        self.outputs[stage.name] = (
            response.parsed if response.parsed is not None else {"text": response.text}
        )


def _freeze(outputs: dict[str, dict[str, Any]]) -> tuple[Any, ...]:
    return tuple((stage, tuple(sorted(answer.items()))) for stage, answer in outputs.items())
