"""The design matrix: every agent of a study with a stable id, and the context its templates see.

A study's design crosses model variants, factor levels, personas and replicates. It can be far
larger than memory (the hiring study has 738,000 agents), so it is produced lazily, in a fixed
order, and its size is known without building it.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from biasim.personas import (
    Persona,
    attribute_combinations,
    build_personas,
    combination_count,
    distinct_personas,
    iter_personas,
)
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study.biographies import BiographiesConfig
from biasim.simulator.study.config import StudyConfig
from biasim.simulator.study.market import switch_subsets
from biasim.simulator.study.persona_writer import persona_view
from biasim.simulator.study.populations import pool_slices, selects_from, stratum_key
from biasim.simulator.study.stage_graph import populations, stage_order, stage_population
from biasim.simulator.study.templating import (
    compile_expression,
    reads_answers,
    render,
    template_variables,
)

#: The design coordinate naming the model variant (a results column, like every factor).
MODEL_LABEL = "model_label"


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One agent of the design.

    Attributes:
        agent_id: Stable id ``[model/]condition/persona/index/replicate``; with the stage name it
            makes the unit id, unchanged across runs, resumes and machines.
        condition: The factor levels as text (``scenario=x,persona_condition=y``), or
            ``default`` when the study has no factors.
        levels: ``(factor, level)`` pairs in factor order.
        variables: Template variables the levels give.
        model_label: The model variant ("" when no role lists several models).
        persona: The agent's persona.
        index: Agent index within its persona group.
        replicate: Replicate index.
        slot: ``persona/index/replicate``, the tail of the id.
    """

    agent_id: str
    condition: str
    levels: tuple[tuple[str, str], ...]
    variables: tuple[tuple[str, str], ...]
    model_label: str
    persona: Persona
    index: int
    replicate: int
    slot: str
    #: The population the agent belongs to ("" in a study without populations).
    population: str = ""

    def seed_id(self, shared: frozenset[str]) -> str:
        """The agent id without its model and with the ``shared`` coordinates blanked: agents
        that differ only there draw the same seed, so identical prompts make identical
        (shareable) calls. The model never enters the seed, so a prompt gets the same seed in a
        run of one model and in a run listing several: ``biasim compare`` of single runs and
        one multi-model run see the same answers."""
        if not shared:  # the common case, per call: no string building
            return self.agent_id[len(self.model_label) + 1 :] if self.model_label else self.agent_id
        levels = ",".join(f"{f}={'*' if f in shared else lv}" for f, lv in self.levels)
        return _agent_id("", levels or "default", self.slot)


def _agent_id(model: str, condition: str, slot: str) -> str:
    return f"{model}/{condition}/{slot}" if model else f"{condition}/{slot}"


def model_labels(config: StudyConfig) -> list[str]:
    """The model variants the study runs (``[""]`` when no role lists several models)."""
    for role in config.roles.values():
        if role.models:
            return list(role.variants())
    return [""]


#: Most agents a study may have before validation refuses it (``BIASIM_MAX_AGENTS`` changes it):
#: a mistyped `agents_per_value: 1000000000` must fail at once, not fill the memory.
DEFAULT_MAX_AGENTS = 5_000_000
MAX_AGENTS_ENV = "BIASIM_MAX_AGENTS"


def max_agents() -> int:
    """The design-size limit: ``$BIASIM_MAX_AGENTS`` or :data:`DEFAULT_MAX_AGENTS`.

    Raises:
        InputError: The variable is set but is not a positive integer.
    """
    raw = os.environ.get(MAX_AGENTS_ENV)
    if raw is None:
        return DEFAULT_MAX_AGENTS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError([Problem(MAX_AGENTS_ENV, None, "", f"`{raw}`: give a positive integer")])
    return value


def design_size(config: StudyConfig) -> int:
    """Number of agents :func:`iter_design` yields, computed without building them."""
    personas = combination_count(config.personas.axes, cross=config.personas.cross)
    combos = math.prod(len(levels) for levels in config.design.factors.values())
    per = config.design.agents_per_value * config.design.replicates
    return len(model_labels(config)) * combos * personas * per


def factor_cells(
    config: StudyConfig,
) -> Iterator[tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], str]]:
    """Each combination of factor levels, in design order: its ``(factor, level)`` pairs, the
    template variables the levels give, and the condition text (``default`` without factors)."""
    factors = config.design.factors
    names = list(factors)
    for combo in itertools.product(*(factors[n].items() for n in names)):
        levels = tuple((n, level) for n, (level, _) in zip(names, combo, strict=True))
        variables = tuple(item for _, vars_ in combo for item in vars_.items())
        yield levels, variables, ",".join(f"{f}={lv}" for f, lv in levels) or "default"


def iter_design(config: StudyConfig, population: str = "") -> Iterator[AgentSpec]:
    """All agents, ordered by model, factor levels, persona, agent index and replicate (with
    ``population``, its members: ids start with the population's name)."""
    design = config.design
    width = len(str(max(design.agents_per_value - 1, 1)))
    for model in model_labels(config):
        for levels, variables, condition in factor_cells(config):
            counters: dict[str, int] = {}
            for persona in iter_personas(config.personas, design.agents_per_value, render):
                index = counters.get(persona.key, 0)
                counters[persona.key] = index + 1
                for replicate in range(design.replicates):
                    slot = f"{persona.key}/{index:0{width}d}/r{replicate}"
                    agent_id = _agent_id(model, condition, slot)
                    yield AgentSpec(
                        agent_id=f"{population}/{agent_id}" if population else agent_id,
                        condition=condition,
                        levels=levels,
                        variables=variables,
                        model_label=model,
                        persona=persona,
                        index=index,
                        replicate=replicate,
                        slot=slot,
                        population=population,
                    )


#: Evaluations of `when` expressions, over all stages, past which a stage's count is left at
#: the bound (every agent): `validate` prints the counts and must stay well under a second.
WHEN_COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class WhenCounts:
    """What evaluating the study's design-only ``when`` expressions over its design found.

    Attributes:
        agents: Stage -> agents taking part (a stage left out has only its bound, every agent:
            its `when` reads earlier answers, would take more than the evaluations left of
            :data:`WHEN_COUNT_LIMIT`, or the study has populations).
        by_label: Stage -> model label -> agents taking part.
        failures: Stage -> why its `when` could not be evaluated for some agents, and whose.
    """

    agents: dict[str, int]
    by_label: dict[str, dict[str, int]]
    failures: dict[str, str]


def when_counts(config: StudyConfig) -> WhenCounts:
    """The design-only ``when`` expressions of ``config`` evaluated once per distinct context
    they can see (model, factor levels, and persona or replicate where they read them)."""
    cached = _WHEN_CACHE.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    written = config.personas.writer is not None
    stages = [
        s
        for s in config.stages
        if s.when is not None and not config.populations and not reads_answers(s.when, written)
    ]
    found = WhenCounts({}, {}, {})
    budget = WHEN_COUNT_LIMIT
    combos = len(model_labels(config)) * math.prod(len(f) for f in config.design.factors.values())
    varying = {"persona", "biography", *config.personas.axes}
    personas: list[tuple[Persona, int]] | None = None
    for stage in stages:
        used = template_variables("{{ " + stage.when + " }}")
        if used & varying:
            if personas is None:
                personas = _distinct_personas(config, budget // max(combos, 1))
            shown = personas
        else:
            shown = [(next(iter_personas(config.personas, 1, render)), _personas_per_combo(config))]
        replicates = config.design.replicates if "replicate" in used else 1
        evaluations = combos * len(shown) * replicates
        if not shown or evaluations > budget:
            continue
        budget -= evaluations
        _count_when(config, stage.name, stage.when, shown, replicates, found)
    _WHEN_CACHE.clear()  # one study at a time: validate, estimate and the run read it again
    _WHEN_CACHE[id(config)] = (config, found)
    return found


_WHEN_CACHE: dict[int, tuple[StudyConfig, WhenCounts]] = {}


def _personas_per_combo(config: StudyConfig) -> int:
    return combination_count(config.personas.axes, cross=config.personas.cross) * (
        config.design.agents_per_value
    )


def _distinct_personas(config: StudyConfig, limit: int) -> list[tuple[Persona, int]]:
    """The design's distinct personas with their multiplicities ([] past ``limit``)."""
    found = []
    for entry in distinct_personas(config.personas, config.design.agents_per_value, render):
        found.append(entry)
        if len(found) > limit:
            return []
    return found


def _count_when(
    config: StudyConfig,
    stage: str,
    when: str,
    personas: list[tuple[Persona, int]],
    replicates: int,
    found: WhenCounts,
) -> None:
    """Count, per model label, the agents of ``stage`` for whom ``when`` holds into ``found``
    (each persona weighted by its agents, each replicate evaluated or all alike); a context
    where it fails is recorded instead."""
    test = compile_expression(when)
    weight = config.design.replicates // replicates
    by_label: dict[str, int] = {}
    for model in model_labels(config):
        for levels, variables, condition in factor_cells(config):
            for persona, agents in personas:
                for replicate in range(replicates):
                    spec = AgentSpec(
                        "", condition, levels, variables, model, persona, 0, replicate, ""
                    )
                    try:
                        holds = bool(test(template_context(config, spec, {})))
                    except Exception as exc:
                        found.failures[stage] = (
                            f"{type(exc).__name__}: {exc} (for {condition}, persona "
                            f"{persona.key}, replicate {replicate})"
                        )
                        return
                    by_label[model] = by_label.get(model, 0) + holds * agents * weight
    found.by_label[stage] = by_label
    found.agents[stage] = sum(by_label.values())


def population_sizes(config: StudyConfig) -> dict[str, int]:
    """Agents per population of a study with populations."""

    sizes = {}
    for name, pop in populations(config).items():
        if pop.personas == "study":
            sizes[name] = design_size(config)
        elif pop.personas is None:
            sizes[name] = pop.count
        else:
            sizes[name] = combination_count(pop.personas.axes, cross=pop.personas.cross) * pop.count
    return sizes


def iter_populations(config: StudyConfig) -> Iterator[AgentSpec]:
    """Every agent of every population, population by population (ids start with its name)."""

    for name in populations(config):
        yield from population_specs(config, name)


def population_specs(config: StudyConfig, name: str) -> list[AgentSpec]:
    """The agents of population ``name``, in design order."""
    from biasim.personas import Persona

    pop = populations(config)[name]
    if pop.personas == "study":
        return list(iter_design(config, name))
    if pop.personas is None:
        personas = [Persona(key="agent", attributes=(), description="")] * pop.count
    else:
        personas = build_personas(pop.personas, pop.count, render)
    width = len(str(max(pop.count - 1, 1)))
    specs = []
    counters: dict[str, int] = {}
    for persona in personas:
        index = counters.get(persona.key, 0)
        counters[persona.key] = index + 1
        specs.append(population_member(name, persona, index, width, name))
    return specs


def population_member(
    population: str, persona: Persona, index: int, width: int, prefix: str
) -> AgentSpec:
    """An agent of ``population`` (no condition, levels or model: those are the design's): its
    slot is ``persona/index/r0``, the index ``width`` digits wide, and its id ``prefix/slot``
    (the population's name; in a labour market, with the cycle)."""
    slot = f"{persona.key}/{index:0{width}d}/r0"
    return AgentSpec(
        agent_id=f"{prefix}/{slot}",
        condition="default",
        levels=(),
        variables=(),
        model_label="",
        persona=persona,
        index=index,
        replicate=0,
        slot=slot,
        population=population,
    )


def unit_id(agent_id: str, stage: str) -> str:
    """Id of one unit of work: an agent acting in a stage."""
    return f"{agent_id}/{stage}"


def call_seed(base_seed: int, unit: str) -> int:
    """Per-call sampling seed: distinct per unit, identical across reruns."""
    digest = hashlib.blake2b(f"{base_seed}:{unit}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


def template_context(
    config: StudyConfig, spec: AgentSpec, outputs: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Variables a stage template sees.

    Study ``vars``, the variables of the agent's factor levels, each factor by name (its level),
    ``model_label``, each persona axis by name, ``persona`` (with ``name`` and ``description``;
    those the persona writer wrote once it has answered, see ``persona_writer``),
    ``condition``, ``replicate`` and ``outputs.<stage>.<field>`` of the stages the agent already
    answered; with a ``biographies`` section, ``biography`` (the agent's biography row).
    """
    context = {
        **config.vars,
        **dict(spec.variables),
        **dict(spec.levels),
        MODEL_LABEL: spec.model_label,
        **dict(spec.persona.attributes),
        "persona": persona_view(config.personas, dict(spec.levels), outputs, spec.persona),
        "condition": spec.condition,
        "replicate": spec.replicate,
        "outputs": outputs,
    }
    if config.biographies is not None:
        context["biography"] = biography_view(config.biographies, spec)
    return context


def expected_units(study: StudyConfig) -> int:
    """Units of a study with populations if every answer is valid (see ``total_units``):
    each writer once per writing stage, and each reading stage's evaluations (times its
    committee's members)."""
    return sum(expected_stage_units(study).values())


def expected_stage_units(study: StudyConfig) -> dict[str, int]:
    """Per stage of a study with populations, in pipeline order, its units if every answer
    is valid (every writer advances as far as a reading lets any); in a market, over all its
    cycles of every replicate market (each cycle's applicants are its draw, not the whole
    population), a policy's copies from its ``from_cycle`` on."""
    sizes = population_sizes(study)
    market, cycles = study.market, study.cycles or 1
    if market is not None:
        sizes[market.applicants.population] = market.applicants.per_cycle
        cycles *= market.replicates
    docs: dict[str, int] = {}
    advanced: dict[str, int] = {}
    pools: dict[str, int] = {}
    units_of: dict[str, int] = {}
    for name in stage_order(study):
        stage = next(s for s in study.stages if s.name == name)
        reads = stage.reads
        if reads is None:
            docs[name] = sizes[stage_population(study, stage)]
            units_of[name] = docs[name]
            continue
        n = advanced.get(reads.after, 0) if reads.after else docs.get(reads.stage, 0)
        if reads.matching == "single":
            units = n * (
                len(study.personas.axes[reads.counterfactual]) if reads.counterfactual else 1
            )
            advanced[name] = n
        elif reads.matching == "pair":
            units = n  # two orders of n / 2 pairs
            advanced[name] = n // 2
        elif reads.draw == "carry":
            units = pools.get(reads.after or "", 0)
            advanced[name] = units * (stage.select or 1)
        else:
            units = -(-n // (reads.size or 1))
            advanced[name] = units * (stage.select or 1)
        pools[name] = units
        # A committee reads every evaluation once per member: each member's reading is a unit.
        units_of[name] = units * (stage.readers.count if stage.readers is not None else 1)
    return {name: units * (cycles - _before_start(study, name)) for name, units in units_of.items()}


def other_applicants(study: StudyConfig) -> int:
    """At most how many applicants of a market's trajectories besides the base (policies, a
    decomposition) the base does not draw, over every cycle of every replicate market: each
    writes a letter of its own. A trajectory draws from the people it does not employ on the
    base's stream, so its applicants differ from the base's by at most the people one of the
    two employs and the other does not (none at its start, when it holds the base's
    workforce). Each cycle after, that grows by at most both sides' hires, and by the base's
    leavers where the trajectory's attrition is off; a cycle's draw caps it."""
    market = study.market
    if market is None or study.cycles is None:
        return 0
    per_cycle, hires = market.applicants.per_cycle, 2 * market.openings
    leavers = market.attrition.leavers if market.attrition.leavers is not None else per_cycle
    starts = [(p.from_cycle or 1, hires) for p in (study.policies or {}).values()]
    starts += [(1, hires + leavers * ("attrition" in off)) for off in switch_subsets(market)]
    found = sum(
        min(per_cycle, grows * (cycle - start))
        for start, grows in starts
        for cycle in range(start, study.cycles + 1)
    )
    return found * market.replicates


def _before_start(study: StudyConfig, stage: str) -> int:
    """Cycles (over every replicate market) a policy's copy of ``stage`` reads nothing in:
    those before the policy's ``from_cycle`` (the base's readings stand for it there)."""
    config = next(s for s in study.stages if s.name == stage)
    if study.market is None or config.policy_of is None:
        return 0
    policy = (study.policies or {}).get(config.policy_of[1])
    if policy is None or policy.from_cycle is None:
        return 0
    return (policy.from_cycle - 1) * study.market.replicates


#: A document as pool sizes see it: its author's design levels and persona attributes.
Author = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


def pool_sizes(study: StudyConfig) -> dict[str, tuple[int, ...]]:
    """Per reading stage of a study with populations, the distinct numbers of documents its
    evaluations show if every answer is valid, cut as the engine's matching cuts them: a
    stratum's last pool holds what is left, a carried pool what its ``after`` stage advanced,
    and a pool that cannot select is not read; in a market, a cycle's draw of applicants. The
    prompts shown render one per size."""
    writers: dict[str, list[Author]] = {}
    #: Reading stage -> its evaluations, each the authors shown (the first ``k`` advance).
    readings: dict[str, list[list[Author]]] = {}
    found: dict[str, tuple[int, ...]] = {}
    for name in stage_order(study):
        stage = next(s for s in study.stages if s.name == name)
        reads = stage.reads
        if reads is None:
            population = stage_population(study, stage)
            writers[name] = _authors(study, population)
            market = study.market
            if market is not None and population == market.applicants.population:
                # Each cycle reads its own draw of applicants, not the whole population.
                writers[name] = writers[name][: market.applicants.per_cycle]
            continue
        k = stage.select or (1 if reads.matching == "pair" else 0)
        # The first `k` shown advance: the dry render's placeholder answer picks them.
        advances = _select(study, reads.after) if reads.after else 0
        before = [shown[:advances] for shown in readings.get(reads.after or "", [])]
        if reads.matching == "pool" and reads.draw == "carry":
            evaluations = before
        else:
            docs = [a for shown in before for a in shown] if reads.after else writers[reads.stage]
            evaluations = _cut(docs, reads, k)
        evaluations = [e for e in evaluations if selects_from(k, len(e))]
        readings[name] = evaluations
        found[name] = tuple(sorted({len(e) for e in evaluations}, reverse=True))
    return found


def _authors(study: StudyConfig, population: str) -> list[Author]:
    """The agents of ``population`` as pool sizes see them; for the study's own personas
    counted from the design (as :func:`design_size`), without building 100,000 personas."""
    if populations(study)[population].personas != "study":
        return [(s.levels, s.persona.attributes) for s in population_specs(study, population)]
    per = len(model_labels(study)) * study.design.agents_per_value * study.design.replicates
    combos = [
        tuple(c.items())
        for c in attribute_combinations(study.personas.axes, cross=study.personas.cross)
    ]
    authors: list[Author] = []
    for levels, _, _ in factor_cells(study):
        for combo in combos:
            authors += [(levels, combo)] * per
    return authors


def _select(study: StudyConfig, stage_name: str | None) -> int:
    """Documents an evaluation of reading stage ``stage_name`` advances."""
    stage = next(s for s in study.stages if s.name == stage_name)
    pair = stage.reads is not None and stage.reads.matching == "pair"
    return stage.select or (1 if pair else 0) or 1


def _cut(docs: list[Author], reads: Any, k: int) -> list[list[Author]]:
    """The evaluations of a stage that does not carry pools: singles, pairs or cut pools."""
    if reads.matching == "single":
        return [[doc] for doc in docs]
    if reads.matching == "pair":
        return [docs[i : i + 2] for i in range(0, len(docs) - 1, 2)]
    strata: dict[str, list[Author]] = {}
    keys: dict[Author, str] = {}  # authors share a handful of (levels, attributes)
    for doc in docs:
        key = keys.get(doc)
        if key is None:
            key = keys[doc] = stratum_key(*doc, reads.within)
        strata.setdefault(key, []).append(doc)
    return [
        stratum[cut] for stratum in strata.values() for cut in pool_slices(len(stratum), reads.size)
    ]


def biography_view(section: BiographiesConfig, spec: AgentSpec) -> dict[str, str]:
    """What templates see as ``biography``: the row of the agent's pair and axis value, with
    ``name`` (first and last) and ``pronoun`` (him / her, the paper's CBG prompt)."""
    levels = dict(spec.levels)
    axis_value = dict(spec.persona.attributes)[section.axis]
    return section.row(levels[section.factor], axis_value)
