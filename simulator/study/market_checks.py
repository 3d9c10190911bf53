"""Checks of ``cycles:`` and ``market:`` against the populations and stages (located)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from biasim.simulator.common.errors import Problem
from biasim.simulator.study.stage_graph import stage_population

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import SourceMap
    from biasim.simulator.study.config import StudyConfig


def check_market(config: StudyConfig, smap: SourceMap, sizes: dict[str, int]) -> list[Problem]:
    """What a market needs from the study: a pipeline (its policies run as trajectories of
    their own), an applicant population that writes with the study's personas, reader
    populations without personas of their own, and draws no larger than the population they
    come from."""
    if (config.cycles is None) != (config.market is None):
        where = "cycles" if config.market is None else "market"
        return [smap.problem((where,), "`cycles:` and `market:` are declared together")]
    market = config.market
    if market is None:
        return []
    if not config.populations:
        return [smap.problem(("market",), "a market needs a pipeline study (`populations:`)")]
    problems = []
    pops = config.populations
    acting = {stage.name: stage_population(config, stage) for stage in config.stages}
    writers = {acting[s.name] for s in config.stages if s.reads is None}
    readers = {acting[s.name] for s in config.stages if s.reads is not None}
    source = market.applicants.population
    if source not in pops or pops[source].personas != "study" or source not in writers:
        problems.append(
            smap.problem(
                ("market", "applicants", "population"),
                f"`{source}` must be a population with `personas: study` that writes in a stage",
            )
        )
    else:
        for path, count in (
            (("market", "applicants", "per_cycle"), market.applicants.per_cycle),
            (("market", "workforce"), market.workforce),
        ):
            if count > sizes.get(source, 0):
                problems.append(
                    smap.problem(
                        path,
                        f"{count:,} is more than the {sizes.get(source, 0):,} agents of "
                        f"`{source}` it is drawn from",
                    )
                )
    for i, name in enumerate(market.readers):
        if name not in readers or pops[name].personas is not None:
            problems.append(
                smap.problem(
                    ("market", "readers", i),
                    f"`{name}` must be a population that reads in a stage and has no personas of "
                    "its own (its readers take the personas of employees)",
                )
            )
    problems.extend(_decompose_problems(config, smap))
    if market.by not in config.personas.axes:
        problems.append(
            smap.problem(("market", "by"), f"`{market.by}` is not a persona axis of the study")
        )
    return problems


def _decompose_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """A decomposition's trajectories are named ``off_<switches>``, and a random pick needs a
    number to pick in every reading stage."""
    market = config.market
    assert market is not None
    if not market.decompose:
        return []
    problems = [
        smap.problem(("policies", name), "names starting `off_` are a decomposition's trajectories")
        for name in config.policies or {}
        if name.startswith("off_")
    ]
    if "readers" in market.decompose:
        for i, stage in enumerate(config.stages):
            reads = stage.reads
            if (
                stage.policy_of is None
                and reads is not None
                and (reads.matching == "single" or reads.counterfactual is not None)
            ):
                problems.append(
                    smap.problem(
                        ("market", "decompose"),
                        f"switching the readers off picks at random as many as a reader picks; "
                        f"stage `{stage.name}` (stages[{i}]) reads one document at a time or "
                        "under swapped names, so it picks no number",
                    )
                )
    return problems
