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
        problems += _draw_size_problems(config, smap, sizes.get(source, 0))
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
    problems += _letters_problems(config, smap)
    problems += _trajectory_problems(config, smap)
    if not problems:
        problems += _network_problems(config, smap, sizes)
    return problems


def _draw_size_problems(config: StudyConfig, smap: SourceMap, size: int) -> list[Problem]:
    """The initial workforce and each cycle's applicants come from the applicants' population,
    and an employee never applies: the first cycle's applicants are drawn from those the
    initial workforce leaves (later cycles record any shortfall in ``applicants_short``)."""
    market = config.market
    assert market is not None
    source = market.applicants.population
    needed = market.workforce + market.applicants.per_cycle
    per_agent = size / config.design.agents_per_value
    # The population grows with the agents per value: say the smallest that holds both draws.
    bound = (
        f"; `design.agents_per_value` (`--agents`) of at least {ceil(needed / per_agent)} gives "
        f"`{source}` the {needed:,} people the workforce and one cycle's applicants need"
        if per_agent
        else ""
    )
    if market.workforce > size:
        return [
            smap.problem(
                ("market", "workforce"),
                f"{market.workforce:,} is more than the {size:,} agents of `{source}` it is "
                f"drawn from{bound}",
            )
        ]
    free = size - market.workforce
    if market.applicants.per_cycle > free:
        return [
            smap.problem(
                ("market", "applicants", "per_cycle"),
                f"{market.applicants.per_cycle:,} is more than the {free:,} agents of "
                f"`{source}` out of work at the first cycle ({size:,} less the workforce of "
                f"{market.workforce:,}; employees do not apply){bound}",
            )
        ]
    return []


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


def _trajectory_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Referrals and reapplication with other trajectories (policies, a decomposition) are
    refused: the trajectories are paired by sharing each cycle's applicants and letters, and
    each trajectory's own workforce would refer (and reject) its own applicants."""
    market = config.market
    assert market is not None
    others = [
        w for w, on in (("`policies:`", config.policies), ("`decompose`", market.decompose)) if on
    ]
    return [
        smap.problem(
            ("market", name),
            f"{name} with {' and '.join(others)} is not supported yet (issue 46): every "
            "trajectory reads the cycle's one set of applicants and letters, which is what "
            "pairs them, while each trajectory's workforce would refer and reject applicants "
            "of its own; run each policy as its own study with the same seed (the population "
            "draws, readers and leavers stay common random numbers)",
        )
        for name in ("referrals", "reapply")
        if others and getattr(market, name) is not None
    ]
