"""Checks of ``cycles:`` and ``market:`` against the populations and stages (located)."""

from __future__ import annotations

from collections import Counter
from math import ceil, floor
from typing import TYPE_CHECKING

from jinja2 import TemplateSyntaxError

from biasim.simulator.common.errors import Problem
from biasim.simulator.study.stage_graph import stage_population
from biasim.simulator.study.templating import template_variables

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import SourceMap
    from biasim.simulator.study.config import StudyConfig


def check_market(config: StudyConfig, smap: SourceMap, sizes: dict[str, int]) -> list[Problem]:
    """What a market needs from the study: a pipeline without policies, an applicant
    population that writes with the study's personas, reader populations without personas of
    their own, and draws no larger than the population they come from."""
    if (config.cycles is None) != (config.market is None):
        where = "cycles" if config.market is None else "market"
        return [smap.problem((where,), "`cycles:` and `market:` are declared together")]
    market = config.market
    if market is None:
        return []
    if not config.populations:
        return [smap.problem(("market",), "a market needs a pipeline study (`populations:`)")]
    problems = []
    if config.policies:
        problems.append(
            smap.problem(
                ("policies",),
                "policies in a market study are not supported yet (issue 46, a later step): "
                "run each policy as its own study with the same seed; the applicant draws and "
                "attrition are common random numbers",
            )
        )
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
    if market.by not in config.personas.axes:
        problems.append(
            smap.problem(("market", "by"), f"`{market.by}` is not a persona axis of the study")
        )
    problems += _letters_problems(config, smap)
    if not problems:
        problems += _network_problems(config, smap, sizes)
    return problems


#: Most links a market's social graph may hold (a networkx graph: about 150 bytes a link).
MAX_LINKS = 2_000_000


def _network_problems(config: StudyConfig, smap: SourceMap, sizes: dict[str, int]) -> list[Problem]:
    """Whether every person can make the declared links: ``degree`` is split into up to
    ``ceil(homophily * degree)`` links within the own group and up to ``degree - floor(...)``
    to the others, without repeats or self-links."""
    from biasim.simulator.study.design import population_specs

    network = config.market.network if config.market is not None else None
    if network is None:
        return []
    if network.by not in config.personas.axes:
        return [smap.problem(("market", "network", "by"), f"`{network.by}` is not a persona axis")]
    source = config.market.applicants.population  # type: ignore[union-attr]
    if sizes.get(source, 0) * network.degree > MAX_LINKS:
        return [
            smap.problem(
                ("market", "network", "degree"),
                f"{sizes[source]:,} people x {network.degree} links is more than the "
                f"{MAX_LINKS:,} links a run's social graph may hold (memory)",
            )
        ]
    people = population_specs(config, source)
    groups = Counter(dict(s.persona.attributes).get(network.by, "") for s in people)
    own_links = ceil(network.homophily * network.degree)
    other_links = network.degree - floor(network.homophily * network.degree)
    for group, size in sorted(groups.items()):
        if size - 1 < own_links:
            return [
                smap.problem(
                    ("market", "network", "degree"),
                    f"a person of `{group}` links to up to {own_links} others of their own group "
                    f"(homophily x degree), but `{group}` has {size} people",
                )
            ]
        if other_links and len(people) - size < other_links:
            return [
                smap.problem(
                    ("market", "network", "homophily"),
                    f"a person of `{group}` links to up to {other_links} people of other groups, "
                    f"but there are {len(people) - size}: raise `homophily` or lower `degree`",
                )
            ]
    return []


def _letters_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """``referrals.letters`` must be a writing stage of the applicants whose prompt names
    ``referrer`` (the referring employee writes it in their own voice)."""
    market = config.market
    letters = market.referrals.letters if market and market.referrals else None
    if letters is None:
        return []
    at = ("market", "referrals", "letters")
    stage = next((s for s in config.stages if s.name == letters), None)
    source = market.applicants.population  # type: ignore[union-attr]
    if stage is None or stage.reads is not None or stage_population(config, stage) != source:
        return [
            smap.problem(
                at,
                f"`{letters}` must be a writing stage of `{source}` (one letter per applicant) "
                "for a referring employee to write",
            )
        ]
    named: set[str] = set()
    for part in (stage.system, stage.prompt):
        try:
            named |= template_variables(part) if part else set()
        except TemplateSyntaxError:
            return []  # reported with its line by the template checks
    if "referrer" not in named:
        return [
            smap.problem(
                at,
                f"stage `{letters}` never names `referrer` in its prompt or system: a referred "
                "applicant's letter is written in the referrer's voice (e.g. `{% if referrer %}"
                "You are {{ referrer.name }}, ...{% endif %}`)",
            )
        ]
    return []
