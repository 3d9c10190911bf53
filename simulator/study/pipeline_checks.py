"""Checks of populations, reading stages and the stage graph that the schema cannot make."""

from __future__ import annotations

from typing import TYPE_CHECKING

from biasim.simulator.common.errors import Problem
from biasim.simulator.study.committee_checks import committee_problems
from biasim.simulator.study.design import population_sizes
from biasim.simulator.study.market_checks import check_market
from biasim.simulator.study.policies import BASE
from biasim.simulator.study.stage_graph import (
    populations,
    stage_graph,
    stage_order,
    stage_population,
)

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import SourceMap
    from biasim.simulator.study.config import StageConfig, StudyConfig
    from biasim.simulator.study.policies import PolicyStage
    from biasim.simulator.study.populations import ReadsConfig


def check_pipeline(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Problems with populations, reading stages and the stage graph, each located."""
    problems = _population_problems(config, smap)
    stages = {s.name: (i, s) for i, s in enumerate(config.stages)}
    # Sizes read the populations: only once they are sound.
    sizes = population_sizes(config) if not problems else {}
    for i, stage in enumerate(config.stages):
        problems.extend(_stage_problems(config, smap, i, stage, stages, sizes))
    if not problems:
        problems.extend(check_market(config, smap, sizes))
    cycle = _stage_cycle(config)
    if cycle:
        head = cycle[0][1]
        path = " -> ".join([cycle[0][0], *(v for _, v in cycle)])
        problems.append(
            smap.problem(("stages", stages[head][0]), f"the stages form a cycle: {path}")
        )
    return problems


def _population_problems(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """The populations against the personas, the roles' models and the replicates."""
    problems: list[Problem] = []
    add = problems.append
    if config.populations and not any(p.personas == "study" for p in populations(config).values()):
        add(
            smap.problem(
                ("populations",),
                "no population uses the study's personas (`personas: study`); the "
                "`personas` and `design` sections would describe nobody",
            )
        )
    for name, pop in (config.populations or {}).items():
        if pop.personas == "study" and pop.agent in READERS:
            add(
                smap.problem(
                    ("populations", name, "agent"),
                    f"`{pop.agent}` agents read documents; they cannot take the study's design "
                    "factors (give them a `personas` section of their own, or none)",
                )
            )
    if config.populations:
        for role in config.roles:
            if config.roles[role].models:
                add(
                    smap.problem(
                        ("roles", role, "models"),
                        "a study with populations runs one model per role (compare models "
                        "with one run each and `biasim compare`)",
                    )
                )
        if config.design.replicates > 1:
            # A market's replicates are whole markets; a one-round pipeline's are more agents.
            instead = (
                "replicate markets are `market: {replicates: R}`"
                if config.market is not None
                else "use more agents per value"
            )
            add(
                smap.problem(
                    ("design", "replicates"),
                    f"a study with populations has no replicates: each applicant writes once "
                    f"({instead})",
                )
            )
    return problems


def _stage_problems(
    config: StudyConfig,
    smap: SourceMap,
    i: int,
    stage: StageConfig,
    stages: dict[str, tuple[int, StageConfig]],
    sizes: dict[str, int],
) -> list[Problem]:
    """One stage's population against what it does: a reading stage reads with readers."""
    pops = populations(config)
    at = ("stages", i)
    if stage.population is not None and stage.population not in pops:
        return [
            smap.problem(
                (*at, "population"),
                f"no population named `{stage.population}`; declared: {', '.join(pops)}",
            )
        ]
    population = stage_population(config, stage)
    agent = pops[population].agent
    if stage.reads is None:
        return _non_reading_stage_problems(smap, at, stage, population, agent)
    if not config.populations:
        return [
            smap.problem(
                (*at, "reads"),
                "reading stages need `populations` (who writes, who reads)",
            )
        ]
    problems: list[Problem] = []
    if agent not in READERS:
        problems.append(
            smap.problem(
                (*at, "population"),
                f"`{population}` holds {agent} agents, who do not read "
                f"others' documents; readers are {', '.join(sorted(READERS))}",
            )
        )
    problems.extend(_check_reads(config, smap, i, stage, stages, sizes))
    problems.extend(_reads_axes_problems(config, smap, at, stage))
    problems.extend(committee_problems(config, smap, i, stage, sizes))
    return problems


def _non_reading_stage_problems(
    smap: SourceMap, at: tuple, stage: StageConfig, population: str, agent: str
) -> list[Problem]:
    """A stage without ``reads``: its population must not be readers, and it selects nothing."""
    problems: list[Problem] = []
    if agent in READERS:
        problems.append(
            smap.problem(
                (*at, "reads"),
                f"population `{population}` holds {agent} agents: "
                "the stage must say what they read",
            )
        )
    for key in ("select", "advance", "readers", "selection"):
        if getattr(stage, key) is not None:
            problems.append(
                smap.problem((*at, key), "only a reading stage (with `reads`) takes this")
            )
    return problems


def _reads_axes_problems(
    config: StudyConfig, smap: SourceMap, at: tuple, stage: StageConfig
) -> list[Problem]:
    """The persona axes and design factors a reading stage's ``reads`` names: they exist, the
    axes documents differ in have two values, and documents are not matched on them."""
    reads = stage.reads
    assert reads is not None
    axes = config.personas.axes
    problems: list[Problem] = []
    add = problems.append
    axes_used = [reads.differ_in, reads.counterfactual, *reads.groups]
    for key, value in (
        ("differ_in", reads.differ_in),
        ("counterfactual", reads.counterfactual),
    ):
        if value is not None and value not in axes:
            add(smap.problem((*at, "reads", key), f"`{value}` is not a persona axis"))
        elif value is not None and len(axes[value]) < 2:
            add(smap.problem((*at, "reads", key), f"axis `{value}` has one value"))
    for j, axis in enumerate(reads.groups):
        if axis not in axes:
            add(smap.problem((*at, "reads", "groups", j), f"`{axis}` is not a persona axis"))
    for j, key in enumerate(reads.within):
        if key not in axes and key not in config.design.factors:
            add(
                smap.problem(
                    (*at, "reads", "within", j),
                    f"`{key}` is neither a design factor nor a persona axis",
                )
            )
        elif key in axes_used:
            add(
                smap.problem(
                    (*at, "reads", "within", j),
                    f"documents cannot share `{key}` and differ in it",
                )
            )
    return problems


#: Agent roles that read documents written by others.
READERS = frozenset({"screener", "hiring_manager", "evaluator"})


def _check_reads(
    config: StudyConfig,
    smap: SourceMap,
    i: int,
    stage: StageConfig,
    stages: dict[str, tuple[int, StageConfig]],
    sizes: dict[str, int],
) -> list[Problem]:
    """A reading stage's ``reads`` against the stage it reads and its own ``select``."""
    reads = stage.reads
    assert reads is not None
    at = ("stages", i, "reads")
    source = stages.get(reads.stage)
    if source is None:
        return [smap.problem((*at, "stage"), f"no stage named `{reads.stage}`")]
    if source[1].reads is not None:
        return [
            smap.problem(
                (*at, "stage"),
                f"`{reads.stage}` reads documents itself; name the stage that wrote them and "
                f"follow `{reads.stage}` with `after`",
            )
        ]
    return [
        *_read_source_problems(smap, at, reads, source[1], stages),
        *_selection_problems(smap, i, stage),
        *_pool_problems(config, smap, i, stage, stages, sizes, stage_population(config, source[1])),
    ]


def _read_source_problems(
    smap: SourceMap,
    at: tuple,
    reads: ReadsConfig,
    source: StageConfig,
    stages: dict[str, tuple[int, StageConfig]],
) -> list[Problem]:
    """The field read is one the source stage answers; ``after`` reads the same documents."""
    problems: list[Problem] = []
    add = problems.append
    fields = source.output or {}
    if fields and reads.field not in fields:
        add(
            smap.problem(
                (*at, "field"),
                f"stage `{reads.stage}` answers {sorted(fields)}, not `{reads.field}`",
            )
        )
    elif not fields and reads.field != "text":
        add(smap.problem((*at, "field"), f"stage `{reads.stage}` answers free `text`"))
    if reads.after is not None:
        after = stages.get(reads.after)
        if after is None:
            add(smap.problem((*at, "after"), f"no stage named `{reads.after}`"))
        elif after[1].reads is None or after[1].reads.stage != reads.stage:
            add(
                smap.problem(
                    (*at, "after"),
                    f"`{reads.after}` does not read the documents of `{reads.stage}`; "
                    "`after` must name an earlier reading of the same documents",
                )
            )
    return problems


def _selection_problems(smap: SourceMap, i: int, stage: StageConfig) -> list[Problem]:
    """``select`` and ``advance`` as the matching allows: a single reading selects nothing, a
    pair reader picks one, a pool reader says how many."""
    reads = stage.reads
    assert reads is not None
    problems: list[Problem] = []
    add = problems.append
    k = stage.select
    if reads.matching == "single":
        if k is not None:
            add(smap.problem(("stages", i, "select"), "a single reading selects nothing"))
        return problems
    if stage.advance is not None:
        add(
            smap.problem(
                ("stages", i, "advance"),
                "pairs and pools advance the documents the reader selects (`select`)",
            )
        )
    if reads.matching == "pair" and k not in (None, 1):
        add(smap.problem(("stages", i, "select"), "a pair reader picks one document"))
    if reads.matching == "pool" and k is None:
        add(smap.problem(("stages", i, "select"), "say how many documents the reader picks"))
    return problems


def _pool_problems(
    config: StudyConfig,
    smap: SourceMap,
    i: int,
    stage: StageConfig,
    stages: dict[str, tuple[int, StageConfig]],
    sizes: dict[str, int],
    writer_pop: str,
) -> list[Problem]:
    """A pool's size against the documents there are to fill it and the groups it must hold,
    and its ``select`` against the pool (or the documents carried into it)."""
    reads = stage.reads
    assert reads is not None
    if reads.matching != "pool":
        return []
    problems: list[Problem] = []
    add = problems.append
    at = ("stages", i, "reads")
    k = stage.select
    per_stratum = _documents_per_stratum(config, reads, sizes.get(writer_pop, 0))
    if reads.size is not None and k is not None and k >= reads.size:
        add(
            smap.problem(
                ("stages", i, "select"),
                f"selects {k} of a pool of {reads.size}: pick fewer than the pool holds",
            )
        )
    if reads.size is not None and sizes and reads.size > per_stratum:
        add(
            smap.problem(
                (*at, "size"),
                f"a pool of {reads.size} is larger than the {per_stratum} documents of "
                f"`{writer_pop}`" + (f" per {' x '.join(reads.within)}" if reads.within else ""),
            )
        )
    if reads.draw == "stratified" and reads.size is not None:
        cells = 1
        for axis in reads.groups or list(config.personas.axes):
            cells *= len(config.personas.axes.get(axis, [1]))
        if cells > reads.size:
            add(
                smap.problem(
                    (*at, "size"),
                    f"a stratified pool must hold each of the {cells} groups: size >= {cells}",
                )
            )
    if reads.draw == "carry" and k is not None:
        after = stages.get(reads.after or "")
        carried = after[1].select if after is not None else None
        if carried is not None and k >= carried:
            add(
                smap.problem(
                    ("stages", i, "select"),
                    f"selects {k} of the {carried} that `{reads.after}` advanced: pick fewer",
                )
            )
    return problems


def _documents_per_stratum(config: StudyConfig, reads: ReadsConfig, documents: int) -> int:
    """The writers' documents in each cell of ``reads.within`` (all of them without it)."""
    strata = 1
    for key in reads.within:
        strata *= len(config.design.factors.get(key) or config.personas.axes.get(key) or [1])
    return documents // strata if strata else 0


def check_policies(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Problems with ``policies:``: each names reading stages and changes the engine can apply
    to them while every policy keeps the same documents and pools."""
    problems: list[Problem] = []
    for i, stage in enumerate(config.stages):
        if stage.policy_of is not None:
            problems.append(
                smap.problem(("stages", i, "policy_of"), "set by `policies:`, never written")
            )
    if not config.policies:
        return problems
    if not config.populations:
        problems.append(
            smap.problem(("policies",), "policies change reading stages: declare `populations`")
        )
        return problems
    stages = {s.name: s for s in config.stages}
    for policy, spec in config.policies.items():
        at: tuple[str | int, ...] = ("policies", policy)
        if policy == BASE or "__" in policy:
            problems.append(
                smap.problem(at, f"`{BASE}` (the study's own stages) and names with `__` are taken")
            )
        for name, change in spec.stages.items():
            where = (*at, "stages", name)
            stage = stages.get(name)
            if stage is None or stage.reads is None:
                known = ", ".join(s.name for s in config.stages if s.reads is not None)
                problems.append(
                    smap.problem(where, f"no reading stage named `{name}`; reading stages: {known}")
                )
                continue
            problems.extend(_policy_change_problems(smap, where, stage, change))
        problems.extend(_start_problems(config, smap, policy, spec.from_cycle))
    return problems


def _start_problems(
    config: StudyConfig, smap: SourceMap, policy: str, start: int | None
) -> list[Problem]:
    """A policy starting at cycle k forks a market's base trajectory after cycle k - 1: it
    needs a market and a cycle the base runs before it and the policy after it."""
    if start is None:
        return []
    at = ("policies", policy, "from_cycle")
    if config.cycles is None:
        return [smap.problem(at, "a policy starts at a cycle only in a market (`cycles:`)")]
    if not 1 <= start <= config.cycles - 1:
        return [
            smap.problem(
                at,
                f"cycle {start} is outside 1 .. {config.cycles - 1}: the market runs "
                f"{config.cycles} cycles, and a policy reads in at least the last two",
            )
        ]
    return []


def _policy_change_problems(
    smap: SourceMap, where: tuple[str | int, ...], stage: StageConfig, change: PolicyStage
) -> list[Problem]:
    reads = stage.reads
    assert reads is not None
    problems = []
    if change.author == "redacted" and reads.counterfactual is not None:
        problems.append(
            smap.problem(
                (*where, "author"),
                "a counterfactual stage swaps the shown name: it cannot also redact it",
            )
        )
    if change.select is not None:
        if reads.matching != "pool":
            problems.append(
                smap.problem((*where, "select"), "only a pool reading picks a chosen number")
            )
        elif reads.size is not None and change.select >= reads.size:
            problems.append(
                smap.problem(
                    (*where, "select"),
                    f"picking {change.select} of pools of {reads.size} is no decision",
                )
            )
    if change.advance is not None and reads.matching != "single":
        problems.append(
            smap.problem((*where, "advance"), "only a single reading has an advance rule")
        )
    return problems


def _stage_cycle(config: StudyConfig) -> list[tuple[str, str]]:
    """The edges of a cycle of the stage graph, or none (the graph library is imported only
    to name the edges of one that exists)."""
    try:
        stage_order(config)
    except ValueError:
        import networkx as nx

        return list(nx.find_cycle(stage_graph(config)))
    return []
