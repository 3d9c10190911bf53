"""Counterfactual twins: an agent's call asked again with only a persona value or name swapped.

A twin is not a Mesa agent: it lives for one stage, makes one call and steps no further. It
shares its agent's design coordinates, answers so far and id, so its seed (drawn from the id)
and its prompt are the agent's with only the swapped persona; its answer feeds no later stage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from biasim.agents.base import LLMAgent
from biasim.simulator.study.counterfactual import twin_unit

if TYPE_CHECKING:
    from biasim.agents.base import StagePlan
    from biasim.personas.attributes import Persona
    from biasim.simulator.llm.types import LLMResponse


class CounterfactualTwin(LLMAgent):
    """``original``'s call with ``persona`` in place of its own (see the module docstring).

    Attributes:
        original: The agent whose call this one repeats.
        swap_value: The value of the swapped axis the twin carries.
    """

    def __init__(self, original: LLMAgent, persona: Persona, swap_value: str) -> None:
        # Deliberately not LLMAgent.__init__: registering with the Mesa model would make the
        # twin act in every later stage.
        self.original = original
        self.swap_value = swap_value
        self.spec = replace(original.spec, persona=persona)
        self.study = original.study
        self.outputs = original.outputs
        self.failed_stage = original.failed_stage
        self.extra_context = original.extra_context
        self.extra_key = original.extra_key

    def unit(self, stage: StagePlan) -> str:
        """The agent's unit with the swapped value: its own entry in the call store."""
        return twin_unit(self.original.unit(stage), self.swap_value)

    def observe(self, stage: StagePlan, response: LLMResponse | None) -> None:
        """Nothing: the twin's answer is a result, never an input of a later stage."""
