"""Agent roles. Agents compose requests and read answers; they never import a concrete backend.

Each role is a Mesa agent class. In a study with populations the model keeps each
population's agents by population name (``model.members["screeners"]``), so two populations of
one class stay apart; a study without populations has one kind of agent, :class:`ScenarioAgent`,
read through Mesa's ``model.agents_by_type``.
"""

from biasim.agents.base import LLMAgent, StagePlan
from biasim.agents.readers import Evaluator, HiringManager, ReaderAgent, Reading, Screener
from biasim.agents.scenario_agent import ScenarioAgent
from biasim.agents.writers import Applicant, LetterWriter
from biasim.simulator.llm.structured import SELECTED

#: Population ``agent`` names -> the class of their agents.
AGENT_CLASSES: dict[str, type[LLMAgent]] = {
    "applicant": Applicant,
    "letter_writer": LetterWriter,
    "decision_maker": ScenarioAgent,
    "screener": Screener,
    "hiring_manager": HiringManager,
    "evaluator": Evaluator,
}

__all__ = [
    "AGENT_CLASSES",
    "SELECTED",
    "Applicant",
    "Evaluator",
    "HiringManager",
    "LLMAgent",
    "LetterWriter",
    "ReaderAgent",
    "Reading",
    "ScenarioAgent",
    "Screener",
    "StagePlan",
]
