"""Checks of a reading stage's committee (``readers:``) and selection rule (``selection:``)
against its readings, answers and population (located)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from biasim.simulator.common.errors import Problem
from biasim.simulator.study.stage_graph import stage_population

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import SourceMap
    from biasim.simulator.study.config import StageConfig, StudyConfig

_NUMERIC = ("integer", "number")


def committee_problems(
    config: StudyConfig, smap: SourceMap, i: int, stage: StageConfig, sizes: dict[str, int]
) -> list[Problem]:
    """A committee needs as many readers as members, and ``mean_score`` a numeric answer of a
    single reading; a selection rule ranks each document once (pools and plain single
    readings) and groups by a persona axis."""
    reads = stage.reads
    assert reads is not None
    problems: list[Problem] = []
    at = ("stages", i)
    committee = stage.readers
    if committee is not None:
        population = stage_population(config, stage)
        have = sizes.get(population)
        if have is not None and have < committee.count:
            problems.append(
                smap.problem(
                    (*at, "readers", "count"),
                    f"a committee of {committee.count} needs as many readers in `{population}` "
                    f"(it has {have}): each member is another reader",
                )
            )
        if stage.answer == "logprobs":
            problems.append(
                smap.problem(
                    (*at, "answer"),
                    "a committee's decision has no log-probabilities of its own: read each "
                    "reader's with `answer: sampled` and a committee, or one reader's with "
                    "`logprobs`",
                )
            )
        problems.extend(_score_problems(smap, at, stage))
    selection = stage.selection
    if selection is not None:
        if reads.matching == "pair" or reads.counterfactual is not None:
            problems.append(
                smap.problem(
                    (*at, "selection"),
                    "a selection rule ranks each document once: pools and single readings, "
                    "not pairs or readings under swapped names (each document is shown twice)",
                )
            )
        if selection.by is not None and selection.by not in config.personas.axes:
            problems.append(
                smap.problem((*at, "selection", "by"), f"`{selection.by}` is not a persona axis")
            )
    return problems


def _score_problems(smap: SourceMap, at: tuple, stage: StageConfig) -> list[Problem]:
    committee, reads = stage.readers, stage.reads
    assert committee is not None and reads is not None
    where = (*at, "readers", "score")
    single = reads.matching == "single"
    if committee.aggregate != "mean_score" or not single:
        if committee.score is not None:
            why = (
                "a pool or pair committee's mean score is the share of members picking"
                if committee.aggregate == "mean_score"
                else "`score` is for `aggregate: mean_score`"
            )
            return [smap.problem(where, why)]
        return []
    field = (stage.output or {}).get(committee.score or "")
    if committee.score is None or field is None or field.type not in _NUMERIC:
        return [
            smap.problem(
                (*at, "readers"),
                "`aggregate: mean_score` on single readings averages a numeric answer field: "
                "name it in `score` (an `integer` or `number` output)",
            )
        ]
    if stage.advance is None:
        return [
            smap.problem(
                (*at, "advance"), "the committee's mean score advances by the stage's `advance`"
            )
        ]
    return []
