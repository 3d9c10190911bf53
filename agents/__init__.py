"""Agent roles. Agents compose requests and read answers; they never import a concrete backend."""

from .base import LLMAgent, StagePlan
from .scenario_agent import ScenarioAgent

__all__ = ["LLMAgent", "ScenarioAgent", "StagePlan"]
