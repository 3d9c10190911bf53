"""The design matrix: every agent of a study with a stable id, and the context its templates see."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from personas import Persona, build_personas

from .config import StudyConfig
from .templating import render


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One agent of the design.

    Attributes:
        agent_id: Stable id ``condition/attributes/index/replicate``; with the stage name it
            makes the unit id, unchanged across runs, resumes and machines.
        condition: Condition name.
        condition_vars: The condition's template variables.
        persona: The agent's persona.
        index: Agent index within its persona group.
        replicate: Replicate index.
    """

    agent_id: str
    condition: str
    condition_vars: tuple[tuple[str, str], ...]
    persona: Persona
    index: int
    replicate: int


def design_matrix(config: StudyConfig) -> list[AgentSpec]:
    """All agents, ordered by condition, persona, agent index and replicate."""
    design = config.design
    personas = build_personas(config.personas, design.agents_per_value, render)
    width = len(str(max(design.agents_per_value - 1, 1)))
    specs: list[AgentSpec] = []
    for condition, cvars in design.conditions.items():
        counters: dict[str, int] = {}
        for persona in personas:
            index = counters.get(persona.key, 0)
            counters[persona.key] = index + 1
            for replicate in range(design.replicates):
                specs.append(
                    AgentSpec(
                        agent_id=f"{condition}/{persona.key}/{index:0{width}d}/r{replicate}",
                        condition=condition,
                        condition_vars=tuple(cvars.items()),
                        persona=persona,
                        index=index,
                        replicate=replicate,
                    )
                )
    return specs


def unit_id(agent_id: str, stage: str) -> str:
    """Id of one unit of work: an agent acting in a stage."""
    return f"{agent_id}/{stage}"


def call_seed(base_seed: int, unit: str) -> int:
    """Per-call sampling seed: distinct per unit, identical across reruns."""
    digest = hashlib.blake2b(f"{base_seed}:{unit}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


def template_context(
    config: StudyConfig,
    condition: str,
    condition_vars: dict[str, str] | tuple[tuple[str, str], ...],
    persona: Persona,
    replicate: int,
    outputs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Variables a stage template sees.

    Study ``vars``, the condition's variables, each persona axis by name, ``persona`` (with
    ``name`` and ``description``), ``condition``, ``replicate`` and ``outputs.<stage>.<field>``
    of the stages the agent already acted in.
    """
    return {
        **config.vars,
        **dict(condition_vars),
        **dict(persona.attributes),
        "persona": persona.context(),
        "condition": condition,
        "replicate": replicate,
        "outputs": outputs,
    }
