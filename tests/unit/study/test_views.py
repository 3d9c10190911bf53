"""The derived views of a study equal what each function derives from the config, for a study
with populations and for ones without (the runs of tests/e2e/test_pipeline_runs.py and the
golden kinds tests run the model from them)."""

from __future__ import annotations

import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.study.casting import cast
from biasim.simulator.study.design import design_size, iter_populations, model_labels
from biasim.simulator.study.load import load_study
from biasim.simulator.study.stage_graph import (
    is_pipeline,
    populations,
    stage_order,
    stage_population,
)
from biasim.simulator.study.views import study_views

STUDIES = ["emergency_response", "li2025_decisions", "hiring_pipeline", "an2024_hiring"]


@pytest.mark.parametrize("name", STUDIES)
def test_views_equal_the_functions_they_stand_for(name: str) -> None:
    config = load_study(builtin_path(name)).config
    views = study_views(config)
    assert views.casting == cast(config)
    assert list(views.model_labels) == model_labels(config)
    assert views.populations == populations(config)
    assert views.stage_population == {s.name: stage_population(config, s) for s in config.stages}
    assert list(views.stage_order) == stage_order(config)
    assert views.pipeline == is_pipeline(config)
    expected = sum(1 for _ in iter_populations(config)) if views.pipeline else design_size(config)
    assert views.agents_total == expected


def test_a_pipeline_study_has_a_population_per_stage() -> None:
    views = study_views(load_study(builtin_path("hiring_pipeline")).config)
    assert views.pipeline
    assert len(set(views.stage_population.values())) > 1
    assert set(views.stage_population.values()) <= set(views.populations)
