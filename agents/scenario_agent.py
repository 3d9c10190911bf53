"""Scenario decision-makers: persona-endowed agents facing a scenario in every stage."""

from __future__ import annotations

from biasim.agents.base import LLMAgent


class ScenarioAgent(LLMAgent):
    """A persona-endowed agent that answers each stage of a scenario (e.g. decides to evacuate).

    Its behaviour is entirely the base's; the class exists so a Mesa model can address these
    agents apart from other roles (``model.agents_by_type[ScenarioAgent]``).
    """
