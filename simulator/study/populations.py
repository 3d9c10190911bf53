"""Populations, reading stages and the pipeline graph of a study file.

A study may hold several populations of agents with different roles (applicants who write,
screeners and managers who read what others wrote). A *reading* stage shows documents that
another population wrote in an earlier stage, matched ``single``, ``pair`` or ``pool``; it may
read only the candidates an earlier reading stage advanced (``after``), which makes the stages a
pipeline. The stages form a directed acyclic graph (networkx), run in topological order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from biasim.simulator.study.fields import Identifier, Strict
from biasim.simulator.study.personas import PersonaConfig

if TYPE_CHECKING:
    import networkx as nx

    from biasim.simulator.study.config import StageConfig, StudyConfig

#: Agent classes a population can hold (``agents`` has one Mesa agent class per role).
AgentRole = Literal[
    "applicant", "letter_writer", "decision_maker", "screener", "hiring_manager", "evaluator"
]
#: The text shown instead of a redacted name (in the document and as its label's name).
REDACTED = "[name withheld]"
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


def stratum_key(
    levels: Sequence[tuple[str, str]], attributes: Sequence[tuple[str, str]], within: Sequence[str]
) -> str:
    """The stratum of a document whose author has these design ``levels`` and persona
    ``attributes``: documents of one stratum share every value named in ``within``."""
    known = {**dict(levels), **dict(attributes)}
    return ",".join(f"{w}={known.get(w, '')}" for w in within)


def pool_slices(count: int, size: int) -> list[slice]:
    """How ``count`` documents of one stratum are cut into pools of ``size``: full pools, the
    last one holding what is left (the engine's matching and the prompts shown both cut so)."""
    return [slice(start, start + size) for start in range(0, count, size)]


def selects_from(k: int, shown: int) -> bool:
    """Whether an evaluation showing ``shown`` documents is a decision: picking ``k`` of ``k``
    or fewer is none (those documents are counted, not read)."""
    return shown > k


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


def stage_edges(config: StudyConfig) -> list[tuple[str, str, str]]:
    """``(from, to, kind)``: from each stage to the next of the same population (an agent
    acts in its stages in order) and from every stage a reading stage reads or follows."""
    names = {stage.name for stage in config.stages}
    edges: list[tuple[str, str, str]] = []
    last: dict[str, str] = {}
    for stage in config.stages:
        population = stage_population(config, stage)
        if population in last:
            edges.append((last[population], stage.name, "sequence"))
        last[population] = stage.name
        if stage.reads is not None:
            for upstream, kind in ((stage.reads.stage, "reads"), (stage.reads.after, "after")):
                if upstream is not None and upstream in names:
                    edges.append((upstream, stage.name, kind))
    return edges


def stage_graph(config: StudyConfig) -> nx.DiGraph:
    """Stages as a graph whose edges are :func:`stage_edges` (for the checks' cycle search)."""
    import networkx as nx  # only validation searches the graph; a run only orders it

    graph = nx.DiGraph()
    for index, stage in enumerate(config.stages):
        graph.add_node(stage.name, index=index)
    for upstream, stage, kind in stage_edges(config):
        graph.add_edge(upstream, stage, kind=kind)
    return graph


def stage_order(config: StudyConfig) -> list[str]:
    """Stage names in the order they run: topological, ties broken by declaration order.

    Raises:
        ValueError: The stages form a cycle (validation refuses such a study first).
    """
    index = {stage.name: i for i, stage in enumerate(config.stages)}
    following: dict[str, set[str]] = {name: set() for name in index}
    for upstream, stage, _ in stage_edges(config):
        following[upstream].add(stage)
    waiting = {name: 0 for name in index}
    for targets in following.values():
        for stage in targets:
            waiting[stage] += 1
    ready = [(i, name) for name, i in index.items() if not waiting[name]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for stage in following[name]:
            waiting[stage] -= 1
            if not waiting[stage]:
                heapq.heappush(ready, (index[stage], stage))
    if len(order) < len(index):
        raise ValueError("the stages form a cycle")
    return order
