"""The derived views of a study, computed once from its config: who plays each role under each
model label, the model labels, the populations and the one acting in each stage, the order the
stages run in, and the number of agents.

The engine reads them from one :class:`StudyViews` instead of recomputing each from the config
at every place that needs it (a stage's population was looked up again in every step).
"""

from __future__ import annotations

from dataclasses import dataclass

from biasim.simulator.study.casting import cast
from biasim.simulator.study.config import RoleConfig, StudyConfig
from biasim.simulator.study.design import design_size, model_labels, population_sizes
from biasim.simulator.study.populations import PopulationConfig
from biasim.simulator.study.stage_graph import (
    is_pipeline,
    populations,
    stage_order,
    stage_population,
)


@dataclass(frozen=True)
class StudyViews:
    """What the engine derives from a study, once.

    Attributes:
        casting: Role -> model label -> who plays it ("" for a role one model plays for every
            label), as :func:`~biasim.simulator.study.casting.cast` gives it.
        model_labels: The model variants the study runs (``("",)`` when no role lists several).
        populations: The study's populations (one implicit population without any).
        stage_population: Stage name -> the population acting in it.
        stage_order: Stage names in the order they run.
        pipeline: Whether agents read each other's work (the study declares populations).
        agents_total: Agents of the design (of every population, in a pipeline).
    """

    casting: dict[str, dict[str, RoleConfig]]
    model_labels: tuple[str, ...]
    populations: dict[str, PopulationConfig]
    stage_population: dict[str, str]
    stage_order: tuple[str, ...]
    pipeline: bool
    agents_total: int


def study_views(config: StudyConfig) -> StudyViews:
    """The derived views of ``config`` (a validated study)."""
    pipeline = is_pipeline(config)
    return StudyViews(
        casting=cast(config),
        model_labels=tuple(model_labels(config)),
        populations=populations(config),
        stage_population={s.name: stage_population(config, s) for s in config.stages},
        stage_order=tuple(stage_order(config)),
        pipeline=pipeline,
        agents_total=sum(population_sizes(config).values()) if pipeline else design_size(config),
    )
