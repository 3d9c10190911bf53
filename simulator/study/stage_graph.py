"""A study's populations and stages as a graph: which population acts in each stage, which
stages follow or read which, and the order they run in. Derived from the whole study, so it sits
above the schema (:mod:`.config`), which holds the ``populations:`` and ``reads:`` sections
(:mod:`.populations`)."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from biasim.simulator.study.populations import DEFAULT_POPULATION, PopulationConfig

if TYPE_CHECKING:
    import networkx as nx

    from biasim.simulator.study.config import StageConfig, StudyConfig
    from biasim.simulator.study.personas import PersonaConfig


def populations(config: StudyConfig) -> dict[str, PopulationConfig]:
    """The study's populations (one implicit population of decision-makers when it has none)."""
    if config.populations:
        return dict(config.populations)
    return {DEFAULT_POPULATION: PopulationConfig(agent="decision_maker", personas="study")}


def stage_population(config: StudyConfig, stage: StageConfig) -> str:
    """The population acting in ``stage`` (the first population when the stage names none)."""
    return stage.population or next(iter(populations(config)))


def stage_personas(config: StudyConfig, stage: StageConfig) -> PersonaConfig | None:
    """The persona settings of the agents acting in ``stage``: the study's, or its population's
    own (None: a population without personas)."""
    personas = populations(config)[stage_population(config, stage)].personas
    return config.personas if personas == "study" else personas


def calls_per_agent(config: StudyConfig, stage: StageConfig) -> int:
    """Calls ``stage`` sends per acting agent: its own and one per counterfactual twin."""
    cf, personas = stage.counterfactual, stage_personas(config, stage)
    return 1 if cf is None or personas is None else len(personas.axes.get(cf.axis, [None]))


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
