"""The checks of a counterfactual stage the schema cannot make: they read the personas and the
stage kind, so they sit above the schema (:mod:`.config`), beside the other checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from biasim.simulator.study.counterfactual import NAME
from biasim.simulator.study.stage_graph import stage_personas

if TYPE_CHECKING:
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.common.yamlsource import FieldPath, SourceMap
    from biasim.simulator.study.config import StageConfig, StudyConfig
    from biasim.simulator.study.personas import PersonaConfig


def counterfactual_refusal(
    config: StudyConfig, stage: StageConfig
) -> tuple[str | None, str] | None:
    """Why ``stage`` cannot run as counterfactual sets (the field under `counterfactual`, None for
    the whole entry, and the reason), or None."""
    cf = stage.counterfactual
    assert cf is not None
    personas = stage_personas(config, stage)
    if stage.reads is not None:
        return None, (
            "a reading stage has no twins: its documents come from another stage (a reading "
            "stage's `reads.counterfactual` swaps the names a reader sees instead)"
        )
    if stage.pairing is not None:
        return None, (
            "a pairing stage shows names of every value in each call: there is no one value to swap"
        )
    if personas is None:
        return None, "the stage's population has no personas to swap"
    if personas.source == "generated":
        return None, ("generated personas are written by a model, so no swapped twin of one exists")
    if cf.axis not in personas.axes:
        known = ", ".join(personas.axes)
        return ("within" if cf.swap == NAME else "swap"), (
            f"`{cf.axis}` is not a persona axis (known: {known})"
        )
    if len(personas.axes[cf.axis]) < 2:
        return "swap", f"`{cf.axis}` has one value: there is nothing to swap it for"
    if not personas.cross and len(personas.axes) > 1:
        return "swap", "axes not crossed: a persona carries one axis, so a swap may drop it"
    if cf.swap == NAME and personas.source != "name_bank":
        return "swap", "`swap: name` needs named personas (`personas.source: name_bank`)"
    if personas.source == "name_bank":
        return _missing_names(personas)
    return None


def _missing_names(personas: PersonaConfig) -> tuple[str | None, str] | None:
    """A combination (each may be a swapped persona) without names in the bank, if any."""
    from biasim.personas.attributes import attribute_combinations

    for attrs in attribute_combinations(personas.axes, cross=True):
        key = "/".join(attrs.values())
        if not personas.names.get(key):
            return "swap", f"the name bank has no names for `{key}`, a swapped persona"
    return None


def check_counterfactual(
    config: StudyConfig, stage: StageConfig, at: FieldPath, smap: SourceMap
) -> list[Problem]:
    """The stage's refusal as a problem at its field, or none."""
    refused = counterfactual_refusal(config, stage)
    if refused is None:
        return []
    field, reason = refused
    where = (*at, "counterfactual", *([field] if field else []))
    return [smap.problem(where, reason)]
