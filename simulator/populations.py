"""Populations, reading stages and the pipeline graph of a study file.

A study may hold several populations of agents with different roles (applicants who write,
screeners and managers who read what others wrote). A *reading* stage shows documents that
another population wrote in an earlier stage, matched ``single``, ``pair`` or ``pool``; it may
read only the candidates an earlier reading stage advanced (``after``), which makes the stages a
pipeline. The stages form a directed acyclic graph (networkx), run in topological order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import networkx as nx
from pydantic import Field, model_validator

from .errors import Problem
from .fields import Identifier, Strict
from .persona_config import PersonaConfig

if TYPE_CHECKING:
    from .config import StageConfig, StudyConfig
    from .yamlsource import SourceMap

#: Agent classes a population can hold (``agents`` has one Mesa agent class per role).
AgentRole = Literal[
    "applicant", "letter_writer", "decision_maker", "screener", "hiring_manager", "evaluator"
]
#: The implicit population of a study that declares none (today's scenario decision-makers).
DEFAULT_POPULATION = "agents"


class PopulationConfig(Strict):
    """One population of agents."""

    agent: AgentRole = Field(description="The agents' role class.")
    personas: Literal["study"] | PersonaConfig | None = Field(
        None,
        description="`study`: the study's `personas` and `design` (factors, replicates); a "
        "persona section of its own; or none (neutral agents without persona attributes).",
    )
    count: int = Field(
        1,
        ge=1,
        description="Agents per persona (or in all, without personas); ignored with `study`.",
    )


class ReadsConfig(Strict):
    """What a reading stage shows each of its agents, and how documents are matched."""

    stage: Identifier = Field(description="The writing stage whose documents are shown.")
    field: Identifier = Field("text", description="The output field holding the document.")
    after: Identifier | None = Field(
        None,
        description="A reading stage: only the candidates it advanced are read (a pipeline edge).",
    )
    matching: Literal["single", "pair", "pool"] = "single"
    size: int | None = Field(
        None,
        ge=2,
        description="Pool: documents per pool (with `draw: carry`, at most the carried ones).",
    )
    draw: Literal["random", "stratified", "carry"] = Field(
        "random",
        description="Pool: `random` with the study seed, `stratified` so each pool holds every "
        "group of `groups`, or `carry` (the advanced members of each pool of `after`).",
    )
    groups: list[Identifier] = Field(
        default_factory=list,
        description="Stratified pools: persona axes whose cells each pool holds (all when empty).",
    )
    within: list[Identifier] = Field(
        default_factory=list,
        description="Factors or persona axes the documents of one pair or pool share "
        "(e.g. `job`: a screener compares applications for the same job).",
    )
    differ_in: Identifier | None = Field(
        None, description="Pair: the persona axis (two values) on which the two authors differ."
    )
    counterfactual: Identifier | None = Field(
        None,
        description="Single: read each document once per value of this persona axis, with "
        "the author's name replaced by a name of that value (the rest unchanged).",
    )
    author: Literal["name", "redacted"] = Field(
        "name",
        description="`redacted` removes the author's name from the shown document and label.",
    )

    @model_validator(mode="after")
    def _fits_matching(self) -> ReadsConfig:
        pool_only = {"size": self.size, "groups": self.groups or None}
        if self.matching != "pool":
            given = [k for k, v in pool_only.items() if v is not None]
            if given or self.draw != "random":
                raise ValueError(f"{', '.join(given) or 'draw'} only apply to `matching: pool`")
        if self.matching == "pool" and self.draw != "carry" and self.size is None:
            raise ValueError("a pool needs `size` (documents per pool)")
        if self.draw == "carry" and self.after is None:
            raise ValueError("`draw: carry` keeps the pools of the `after` stage: name it")
        if (self.matching == "pair") != (self.differ_in is not None):
            raise ValueError("`matching: pair` needs `differ_in`, and only pairs take it")
        if self.counterfactual is not None and self.matching != "single":
            raise ValueError("`counterfactual` applies to `matching: single`")
        if self.counterfactual is not None and self.author == "redacted":
            raise ValueError("a counterfactual swaps the shown name: it cannot also redact it")
        return self


def populations(config: StudyConfig) -> dict[str, PopulationConfig]:
    """The study's populations (one implicit population of decision-makers when it has none)."""
    if config.populations:
        return dict(config.populations)
    return {DEFAULT_POPULATION: PopulationConfig(agent="decision_maker", personas="study")}


def stage_population(config: StudyConfig, stage: StageConfig) -> str:
    """The population acting in ``stage`` (the first population when the stage names none)."""
    return stage.population or next(iter(populations(config)))


def is_pipeline(config: StudyConfig) -> bool:
    """Whether agents read each other's work (the study declares populations)."""
    return bool(config.populations)


def stage_graph(config: StudyConfig) -> nx.DiGraph:
    """Stages as a graph: an edge from each stage to the next of the same population (an agent
    acts in its stages in order) and from every stage a reading stage reads or follows."""
    graph = nx.DiGraph()
    last: dict[str, str] = {}
    for index, stage in enumerate(config.stages):
        graph.add_node(stage.name, index=index)
    for stage in config.stages:
        population = stage_population(config, stage)
        if population in last:
            graph.add_edge(last[population], stage.name, kind="sequence")
        last[population] = stage.name
        if stage.reads is not None:
            for upstream, kind in ((stage.reads.stage, "reads"), (stage.reads.after, "after")):
                if upstream is not None and upstream in graph:
                    graph.add_edge(upstream, stage.name, kind=kind)
    return graph


def stage_order(config: StudyConfig) -> list[str]:
    """Stage names in the order they run: topological, ties broken by declaration order."""
    graph = stage_graph(config)
    return list(nx.lexicographical_topological_sort(graph, key=lambda n: graph.nodes[n]["index"]))


def check_pipeline(config: StudyConfig, smap: SourceMap) -> list[Problem]:
    """Problems with populations, reading stages and the stage graph, each located."""
    from .design import population_sizes

    problems: list[Problem] = []
    add = problems.append
    pops = populations(config)
    stages = {s.name: (i, s) for i, s in enumerate(config.stages)}
    axes = config.personas.axes
    factors = config.design.factors
    if config.populations and not any(p.personas == "study" for p in pops.values()):
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
            add(
                smap.problem(
                    ("design", "replicates"),
                    "a study with populations has no replicates: each applicant writes once "
                    "(use more agents per value)",
                )
            )
    sizes = population_sizes(config) if not problems else {}
    for i, stage in enumerate(config.stages):
        at = ("stages", i)
        if stage.population is not None and stage.population not in pops:
            add(
                smap.problem(
                    (*at, "population"),
                    f"no population named `{stage.population}`; declared: {', '.join(pops)}",
                )
            )
            continue
        population = stage_population(config, stage)
        reading = pops[population].agent in READERS
        reads = stage.reads
        if reads is None:
            if reading:
                add(
                    smap.problem(
                        (*at, "reads"),
                        f"population `{population}` holds {pops[population].agent} agents: "
                        "the stage must say what they read",
                    )
                )
            for key in ("select", "advance"):
                if getattr(stage, key) is not None:
                    add(smap.problem((*at, key), "only a reading stage (with `reads`) takes this"))
            continue
        if not config.populations:
            add(
                smap.problem(
                    (*at, "reads"),
                    "reading stages need `populations` (who writes, who reads)",
                )
            )
            continue
        if not reading:
            add(
                smap.problem(
                    (*at, "population"),
                    f"`{population}` holds {pops[population].agent} agents, who do not read "
                    f"others' documents; readers are {', '.join(sorted(READERS))}",
                )
            )
        problems.extend(_check_reads(config, smap, i, stage, stages, sizes))
        if stage.reads is not None:
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
                    add(
                        smap.problem((*at, "reads", "groups", j), f"`{axis}` is not a persona axis")
                    )
            for j, key in enumerate(reads.within):
                if key not in axes and key not in factors:
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
    graph = stage_graph(config)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        head = cycle[0][1]
        path = " -> ".join([cycle[0][0], *(v for _, v in cycle)])
        add(smap.problem(("stages", stages[head][0]), f"the stages form a cycle: {path}"))
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
    problems: list[Problem] = []
    add = problems.append
    reads = stage.reads
    assert reads is not None
    at = ("stages", i, "reads")
    source = stages.get(reads.stage)
    if source is None:
        add(smap.problem((*at, "stage"), f"no stage named `{reads.stage}`"))
        return problems
    if source[1].reads is not None:
        add(
            smap.problem(
                (*at, "stage"),
                f"`{reads.stage}` reads documents itself; name the stage that wrote them and "
                f"follow `{reads.stage}` with `after`",
            )
        )
        return problems
    writer_pop = stage_population(config, source[1])
    fields = source[1].output or {}
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
    k = stage.select
    if reads.matching == "single":
        if k is not None:
            add(smap.problem(("stages", i, "select"), "a single reading selects nothing"))
    else:
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
    n = sizes.get(writer_pop, 0)
    strata = 1
    for key in reads.within:
        strata *= len(config.design.factors.get(key) or config.personas.axes.get(key) or [1])
    per_stratum = n // strata if strata else 0
    if reads.matching == "pool" and reads.size is not None and k is not None and k >= reads.size:
        add(
            smap.problem(
                ("stages", i, "select"),
                f"selects {k} of a pool of {reads.size}: pick fewer than the pool holds",
            )
        )
    if reads.matching == "pool" and reads.size is not None and sizes and reads.size > per_stratum:
        add(
            smap.problem(
                (*at, "size"),
                f"a pool of {reads.size} is larger than the {per_stratum} documents of "
                f"`{writer_pop}`" + (f" per {' x '.join(reads.within)}" if reads.within else ""),
            )
        )
    if reads.matching == "pool" and reads.draw == "stratified" and reads.size is not None:
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
    if reads.matching == "pool" and reads.draw == "carry" and k is not None:
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
