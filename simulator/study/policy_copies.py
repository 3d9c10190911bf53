"""A study's policies as stages: each policy's copy of every stage from its first changed one on
(:attr:`StageConfig.policy_of`), and where in the study file each copy's fields come from. It
reads and rebuilds the whole study, so it sits above the schema (:mod:`.config`), which holds the
``policies:`` section (:mod:`.policies`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from biasim.simulator.study.policies import BASE, CHANGEABLE, PolicyStage, policy_stage_name

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import SourceMap
    from biasim.simulator.study.config import StageConfig, StudyConfig


def policy_names(config: StudyConfig) -> list[str]:
    """:data:`BASE` and the study's policies, in declaration order."""
    return [BASE, *(config.policies or {})]


def expand_policies(config: StudyConfig) -> StudyConfig:
    """The study with one copy of every reading stage per policy, its changes applied."""
    if not config.policies:
        return config
    readers = [s for s in config.stages if s.reads is not None]
    copies: list[StageConfig] = []
    for policy, spec in config.policies.items():
        for stage in readers:
            copies.append(_copy(stage, policy, spec.stages.get(stage.name)))
    return config.model_copy(update={"stages": [*config.stages, *copies]})


def _copy(stage: StageConfig, policy: str, change: PolicyStage | None) -> StageConfig:
    reads = stage.reads
    assert reads is not None
    reads_update: dict[str, Any] = {}
    if reads.after is not None:
        reads_update["after"] = policy_stage_name(reads.after, policy)
    update: dict[str, Any] = {"name": policy_stage_name(stage.name, policy)}
    if change is not None:
        # The fields themselves, not a dump: a committee or a rule stays a validated model.
        given = {k: v for k in CHANGEABLE if (v := getattr(change, k)) is not None}
        if "author" in given:
            reads_update["author"] = given.pop("author")
        update.update(given)
    update["reads"] = reads.model_copy(update=reads_update)
    update["policy_of"] = (stage.name, policy)
    return stage.model_copy(update=update)


def locate_copies(config: StudyConfig, smap: SourceMap) -> tuple[SourceMap, dict[str, str]]:
    """Source locations for the stage copies of an expanded study: a field a policy changes
    where the policy writes it, the rest where the copied stage does; and each copy's field
    prefix (``stages[3]``) -> how a problem names it (``policies.redacted.stages.screen``)."""
    index = {s.name: i for i, s in enumerate(config.stages) if s.policy_of is None}
    locations, text_lines = dict(smap.locations), dict(smap.text_lines)
    names: dict[str, str] = {}
    for i, stage in enumerate(config.stages):
        if stage.policy_of is None:
            continue
        original, policy = stage.policy_of
        names[f"stages[{i}]"] = f"policies.{policy}.stages.{original}"
        for table in (locations, text_lines):
            for path, value in list(table.items()):
                if path[:2] == ("stages", index[original]):
                    table[("stages", i, *path[2:])] = value
            written = ("policies", policy, "stages", original)
            for path, value in list(table.items()):
                if path[:4] == written and len(path) > 4:
                    field = ("reads", "author") if path[4] == "author" else (path[4],)
                    table[("stages", i, *field, *path[5:])] = value
    # `replace` keeps the map's own kind (a generated persona writer's names its fields).
    return dataclasses.replace(smap, locations=locations, text_lines=text_lines), names
