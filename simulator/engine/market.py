"""A pipeline study over cycles: a labour market whose workforce persists between rounds.

Each cycle the model draws applicants from their population, draws the reading stages' agents
from the current workforce (so the decision-makers' personas change as hiring does), runs the
pipeline's stages (one model step each, as in a single round), lets the last reading stage's
hires (up to the openings) join the workforce, and applies attrition.

With a ``network`` the people of the applicants' population form a social graph (one per
replicate market); with ``referrals`` a share of each cycle's applicants is referred by
employees over it, and with ``reapply`` rejected applicants may apply again, their history in
the template context. Both come only in a market whose one trajectory is the base (validation
refuses them beside policies or a decomposition: the referrers and the histories are kept for
the base's trajectory only).

Every draw of the market (the initial workforce, the graph, each cycle's applicants,
referrals, reapplications, readers and leavers) comes from a generator seeded by the study
seed, what is drawn, the cycle and the replicate market only: two studies that differ in their
readers' behaviour draw the same applicants and the same attrition numbers with the same seed
(common random numbers).
``market.replicates`` runs that many independent markets one after the other in the same
model; replicate 0 draws exactly what a single market draws. Nobody employed applies; the
population part of a cycle's applicants walks one stream of picks and skips the employed and
those already applying, so switching referrals off keeps the rest of it.

A study's policies run in the same model, each as its own trajectory: its own workforce, its
own applicants (drawn from the people it does not employ, on the same keyed stream, so a
trajectory's draws do not depend on which others run beside it, and two trajectories draw the
same people wherever neither employs them), its readers drawn from its workforce and its hires
from its copies of the reading stages, which read its applicants' letters. An applicant several
trajectories draw writes once (one call; results' ``applies_in`` names the trajectories that
drew them), and a trajectory that draws the base's applicants reads the base's pools. Each
trajectory draws
its readers and leavers from a fresh generator of the same key, and indexes the draws by
seniority (an employee's place in the order of joining): the i-th longest-serving employee
reads, or leaves, in one trajectory exactly when the i-th does in another. Every trajectory
hires as many as it loses while its readers answer, so an employee both trajectories hold
sits at the same place in both, and takes the same draws; the places where they differ hold
the two trajectories' different hires, paired with each other (docs/guides/labor-market.md).
A policy with ``from_cycle: k`` is the base until cycle k: its copies read nothing and it
closes each cycle with a copy of the base's workforce, so at k it forks from the base's state.

Replicates are the outer loop: each replicate market draws its initial workforce, and every
trajectory of it starts from that workforce and draws on that replicate's keys, so the pairs
of trajectories are paired within a replicate and independent across replicates.
"""

from __future__ import annotations

import gc
import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import mesa
import networkx as nx
import pandas as pd

from biasim.agents import AGENT_CLASSES, Reading
from biasim.simulator.common.csvfiles import write_csv
from biasim.simulator.engine.dispatch import RunAborted
from biasim.simulator.engine.matching import form_evaluations
from biasim.simulator.engine.model import StudyModel
from biasim.simulator.engine.referrals import draw_reapplicants, draw_referrals, homophily_graph
from biasim.simulator.llm.types import LLMResponse
from biasim.simulator.study.config import StudyConfig
from biasim.simulator.study.design import AgentSpec, population_member, population_specs
from biasim.simulator.study.market import (
    APPLIES_IN,
    COMPOSITION_COLUMNS,
    HIRES_COLUMNS,
    HIRES_CSV,
    MARKET_CSV,
    SWITCHES,
    History,
    MarketConfig,
    applicant_context,
    switch_label,
    switch_policy,
    switch_subsets,
)
from biasim.simulator.study.policies import BASE, policy_stage_name
from biasim.simulator.study.policy_copies import policy_names
from biasim.simulator.study.stage_graph import populations


class WorkforceEmpty(RunAborted):
    """A cycle starts with nobody employed to read: openings went unfilled (fewer advanced
    than left, e.g. a committee of `aggregate: all`) or every answer of a cycle was invalid.
    The run stops with what it answered; resuming replays the same draws to the same end."""

    resumable = False

    def __init__(self, model: MarketModel, trajectory: Trajectory, population: str) -> None:
        where = "" if trajectory.key == BASE else f" of trajectory `{trajectory.key}`"
        replicate = f" of replicate market {model.replicate}" if model.replicate else ""
        unfilled = sum(
            c.unfilled for c in trajectory.compositions if c.replicate == model.replicate
        )
        super().__init__(
            f"cycle {model.cycle}{replicate}: the workforce{where} is empty at the cycle's "
            f"start, so no employee can read in `{population}`; {unfilled} opening(s) went "
            "unfilled before it (fewer applicants advanced than employees left; market.csv "
            "`unfilled`). Declare more applicants advancing per cycle (pools, `select`, a "
            "committee's `aggregate`) or fewer leavers"
        )


def market_rng(seed: int, what: str, cycle: int, replicate: int = 0) -> random.Random:
    """The generator of one kind of market draw in one cycle (0: the initial workforce) of
    one replicate market. Replicate 0's key has no replicate in it: a study that declares no
    replicates draws what it drew before they existed."""
    market = "market" if replicate == 0 else f"market/r{replicate}"
    digest = hashlib.blake2b(f"{seed}:{market}:{what}:{cycle}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


class Employee(mesa.Agent):
    """A member of the workforce: the applicant hired, the cycle they joined (0: initial),
    which person of the applicants' population they are (their node in the social graph)."""

    def __init__(
        self, model: MarketModel, spec: AgentSpec, joined: int, person: int, trajectory: str
    ) -> None:
        super().__init__(model)
        self.spec = spec
        self.joined = joined
        self.person = person
        #: The trajectory this employee works in (its key in ``model.trajectories``).
        self.trajectory = trajectory

    @property
    def tenure(self) -> int:
        """Cycles worked (0 in the cycle of hiring)."""
        return self.model.cycle - self.joined  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Entry:
    """How a person came to apply in a cycle: drawn from the population, referred by an
    employee (``referrer``, a person), or applying again after a rejection."""

    person: int
    how: str
    referrer: int | None = None


@dataclass(frozen=True)
class CycleComposition:
    """One closed cycle: group -> count of applicants (referred, reapplied), readers, hires,
    leavers, workforce and its tenure; and, for the cycle as a whole, the openings no hire
    filled and the applicants asked for that nobody out of work was left to be."""

    replicate: int
    cycle: int
    applicants: Counter[str]
    referred: Counter[str]
    reapplied: Counter[str]
    readers: Counter[str]
    hires: Counter[str]
    left: Counter[str]
    workforce: Counter[str]
    tenure: Counter[str]
    unfilled: int = 0
    short: int = 0
    #: The applicants hired (agent ids), whose groups ``hires`` counts.
    hired: tuple[str, ...] = ()

    def counts(self) -> tuple[Counter[str], ...]:
        """The counts in the order of :data:`COMPOSITION_COLUMNS` (after replicate, cycle and
        group)."""
        return (
            self.applicants,
            self.referred,
            self.reapplied,
            self.readers,
            self.hires,
            self.left,
            self.workforce,
            self.tenure,
        )


@dataclass
class Trajectory:
    """One market on the common random numbers: a policy, or the base with mechanisms
    switched off; its employees in the order they joined (the seniority the draws index), the
    cycle's readers per reader population, and its closed cycles (of every replicate market)."""

    #: Its key in ``MarketModel.trajectories``: the policy, or ``off_<switches>``.
    key: str
    policy: str
    off: frozenset[str]
    #: The policy whose stage copies it reads with; None when its readers are switched off.
    reads_as: str | None
    #: The cycle it starts reading in (a policy's ``from_cycle``); before it, it is the base.
    start: int = 1
    staff: list[Employee] = field(default_factory=list)
    #: This cycle's applicants (agent ids): its own draw from the people it does not employ.
    applied: set[str] = field(default_factory=set)
    #: Applicants this cycle asked for beyond the people it does not employ.
    short: int = 0
    readers: dict[str, list[Any]] = field(default_factory=dict)
    decided: Counter[str] = field(default_factory=Counter)
    compositions: list[CycleComposition] = field(default_factory=list)


def trajectories(study: StudyConfig) -> list[Trajectory]:
    """The base, each policy, then each subset of the switches a decomposition turns off."""
    assert study.market is not None
    found = [Trajectory(p, p, frozenset(), p, _start(study, p)) for p in policy_names(study)]
    for off in switch_subsets(study.market):
        key = "off_" + "_".join(k for k in SWITCHES if k in off)
        found.append(Trajectory(key, BASE, off, switch_policy(off)))
    return found


def _start(study: StudyConfig, policy: str) -> int:
    """The cycle ``policy`` starts reading in: its ``from_cycle``, else the first."""
    found = (study.policies or {}).get(policy)
    return found.from_cycle if found is not None and found.from_cycle is not None else 1


class MarketModel(StudyModel):
    """:class:`StudyModel` over ``study.cycles`` cycles; a cycle's stages are its steps."""

    def __init__(self, study: StudyConfig, *args: Any, **kwargs: Any) -> None:
        assert study.market is not None and study.cycles is not None
        self.market: MarketConfig = study.market
        self.cycle = 0
        #: The replicate market now running (0 .. market.replicates - 1).
        self.replicate = 0
        #: Key -> trajectory (the base first), all on the same random numbers.
        self.trajectories = {t.key: t for t in trajectories(study)}
        #: The policy a stage copy reads as -> the trajectory whose workforce reads it.
        self._reading = {t.reads_as: t for t in self.trajectories.values() if t.reads_as}
        self._pool = population_specs(study, study.market.applicants.population)
        self._applied: dict[str, AgentSpec] = {}
        # Referrals and reapplication run with the base as the only trajectory (validation
        # refuses them beside policies or a decomposition), so their state is the model's.
        #: This cycle's applicants (agent id) -> how they came to apply.
        self._entries: dict[str, Entry] = {}
        #: Person -> their applications before the current cycle (in this replicate market).
        self._history: dict[int, History] = {}
        #: People rejected in an earlier cycle and not hired since, in the order first rejected.
        self._rejected: dict[int, None] = {}
        self.graph: nx.DiGraph | None = None
        self._exclusions: dict[str, Counter[str]] = {}
        #: Letter units of the applicants only a trajectory besides the base drew, so far.
        self._other_letters = 0
        super().__init__(study, *args, **kwargs)

    @property
    def total_units(self) -> int:
        """The plan's units (:meth:`StudyModel.total_units`: validate's and estimate's count,
        the base's applicants only) and the letter units of the applicants only another
        trajectory drew in the cycles opened so far: each writes once per writing stage of the
        applicants' population. Which people those are is known only as the trajectories'
        hires make their workforces differ, so the total grows as the run opens cycles (the
        progress, the summary and the manifest read it; estimate bounds it with ``<=``)."""
        return super().total_units + self._other_letters

    @property
    def compositions(self) -> list[CycleComposition]:
        """The base trajectory's closed cycles (of every replicate market so far)."""
        return self.trajectories[BASE].compositions

    @property
    def workforce(self) -> mesa.agent.AgentSet:
        """The base trajectory's employees now (a Mesa AgentSet, in the order they joined)."""
        return mesa.agent.AgentSet(self.trajectories[BASE].staff, random=self.random)

    def _next_wave(self) -> None:
        """Close the cycle that ended (hires, attrition) and open the next one."""
        if self.cycle == 0:
            self._hire_initial()
        else:
            self._close_cycle()
        if self.cycle == self.study.cycles:
            if self.replicate + 1 == self.market.replicates:
                self.running = False
                return
            self._next_replicate()
        self.cycle += 1
        self.wave = self.replicate * self.study.cycles + self.cycle
        self._open_cycle()

    def _next_replicate(self) -> None:
        """Start the next replicate market afresh: nothing of the last one's workforces
        stays; every trajectory starts again from the new replicate's initial workforce."""
        for trajectory in self.trajectories.values():
            for employee in trajectory.staff:
                employee.remove()
            trajectory.staff, trajectory.readers = [], {}
        self.replicate += 1
        self.cycle = 0
        self._history, self._rejected = {}, {}
        self._hire_initial()

    @property
    def _tag(self) -> str:
        """What names the cycle in unit ids, pools and clusters: ``c003``, and in replicate
        markets after the first ``r001/c003`` (replicate 0 keeps a single market's ids, so its
        calls and their seeds are those of a study without replicates)."""
        cycle = f"c{self.cycle:03d}"
        return cycle if self.replicate == 0 else f"r{self.replicate:03d}/{cycle}"

    def _hire_initial(self) -> None:
        rng = market_rng(self.study.seed, "workforce", 0, self.replicate)
        drawn = sorted(rng.sample(range(len(self._pool)), self.market.workforce))
        empty: Counter[str] = Counter()
        for trajectory in self.trajectories.values():
            trajectory.staff = [Employee(self, self._pool[i], 0, i, trajectory.key) for i in drawn]
            staff, tenure = self._staff(trajectory)
            trajectory.compositions.append(
                CycleComposition(self.replicate, 0, *[empty] * 6, staff, tenure)
            )
        self.graph = self._social_graph()

    def _social_graph(self) -> nx.DiGraph | None:
        """The replicate market's social graph over the applicants' population (drawn with the
        replicate's key: each replicate is a market of its own, its graph included; replicate
        0's is a single market's)."""
        network = self.market.network
        if network is None:
            return None
        return homophily_graph(
            [self._group(s.persona, network.by) for s in self._pool],
            network,
            market_rng(self.study.seed, "network", 0, self.replicate),
        )

    def _open_cycle(self) -> None:
        gc.unfreeze()
        for agent in [a for a in self.agents if not isinstance(a, Employee)]:
            agent.remove()
        self.documents, self.advanced, self.members = {}, {}, {}
        source = self.market.applicants.population
        drawn = {t.key: self._draw_applicants(t) for t in self.trajectories.values()}
        # Every applicant of any trajectory writes once (a call key covers its own request
        # only, so an applicant two trajectories draw is one call); each trajectory's stages
        # read its own applicants' documents (_documents_read).
        union: dict[int, Entry] = {}
        for found in drawn.values():
            for entry in found:
                union.setdefault(entry.person, entry)
        entries = sorted(union.values(), key=lambda e: e.person)
        self._count_other_letters(len(entries) - len(drawn[BASE]))
        applied = [_in_cycle(self._pool[e.person], self._tag, self.replicate) for e in entries]
        self._applied = {spec.agent_id: spec for spec in applied}
        self._entries = {spec.agent_id: e for spec, e in zip(applied, entries, strict=True)}
        ids = {e.person: spec.agent_id for spec, e in zip(applied, entries, strict=True)}
        for trajectory in self.trajectories.values():
            trajectory.decided = Counter()
            trajectory.applied = {ids[e.person] for e in drawn[trajectory.key]}
        for name, pop in populations(self.study).items():
            cls = AGENT_CLASSES[pop.agent]
            if name in self.market.readers:
                for trajectory in self._reading.values():
                    specs = self._draw_readers(trajectory, name, pop.count)
                    trajectory.readers[name] = [cls(self, spec, self.study) for spec in specs]
                self.members[name] = self.trajectories[BASE].readers[name]
                continue
            if name == source:
                self.members[name] = [self._applicant(cls, spec) for spec in applied]
                continue
            specs = [
                _in_cycle(s, self._tag, self.replicate) for s in population_specs(self.study, name)
            ]
            self.members[name] = [cls(self, spec, self.study) for spec in specs]

    def _count_other_letters(self, others: int) -> None:
        """Add the letter units of this cycle's ``others`` applicants whom only trajectories
        besides the base drew to :attr:`total_units`."""
        source = self.market.applicants.population
        writing = [
            p.name
            for p in self.plans
            if self.stage_configs[p.name].reads is None
            and self.views.stage_population[p.name] == source
        ]
        self._other_letters += others * len(writing)

    def _draw_applicants(self, trajectory: Trajectory) -> list[Entry]:
        """``trajectory``'s applicants this cycle (by person), none of them employed in it: the
        referred share first, then earlier rejected applicants who apply again, then the rest
        drawn from the people it does not employ (the whole draw without referrals and
        reapplications), in person order; ``trajectory.short`` is how many of ``per_cycle``
        nobody was left to be. The generators are keyed by seed, what, cycle and replicate,
        not by trajectory: two trajectories draw the same people wherever neither employs
        them, and a trajectory's draw does not depend on which others run beside it."""
        seed, cycle, market, replicate = self.study.seed, self.cycle, self.market, self.replicate
        per_cycle = market.applicants.per_cycle
        employed = [e.person for e in trajectory.staff]
        entries: list[Entry] = []
        if market.referrals is not None and self.graph is not None:
            wanted = round(market.referrals.share * per_cycle)
            rng = market_rng(seed, "referrals", cycle, replicate)
            found = draw_referrals(self.graph, employed, set(), wanted, rng)
            entries += [Entry(r.person, "referral", r.referrer) for r in found]
        if market.reapply is not None:
            taken = {e.person for e in entries} | set(employed)
            rng = market_rng(seed, "reapply", cycle, replicate)
            again = draw_reapplicants(list(self._rejected), taken, market.reapply.probability, rng)
            entries += [Entry(p, "reapply") for p in again[: per_cycle - len(entries)]]
        taken = set(employed) | {e.person for e in entries}
        rng = market_rng(seed, "applicants", cycle, replicate)
        drawn = out_of_work(len(self._pool), taken, per_cycle - len(entries), rng)
        entries += [Entry(p, "population") for p in drawn]
        # Fewer people out of work than applicants asked for: recorded, not shrunk silently.
        trajectory.short = per_cycle - len(entries)
        return sorted(entries, key=lambda e: e.person)

    def _applicant(self, cls: Any, spec: AgentSpec) -> Any:
        """An applicant agent with its market context: its history and its referrer."""
        agent = cls(self, spec, self.study)
        entry = self._entries[spec.agent_id]
        history = self._history.get(entry.person, History())
        referrer = self._pool[entry.referrer].persona if entry.referrer is not None else None
        agent.extra_context = applicant_context(history, referrer)
        agent.extra_key = (history, entry.referrer)
        return agent

    def _draw_readers(self, trajectory: Trajectory, population: str, count: int) -> list[AgentSpec]:
        """``count`` employees of ``trajectory`` (without replacement while there are enough)
        as this cycle's readers of ``population``: each reader takes the employee's persona.
        Every trajectory draws the same seniority places (a fresh generator of one key)."""
        staff = trajectory.staff
        if not staff:
            raise WorkforceEmpty(self, trajectory, population)
        rng = market_rng(self.study.seed, f"readers/{population}", self.cycle, self.replicate)
        if count <= len(staff):
            chosen = rng.sample(range(len(staff)), count)
        else:
            chosen = [rng.randrange(len(staff)) for _ in range(count)]
        specs = []
        for j, i in enumerate(chosen):
            persona = staff[i].spec.persona
            member = population_member(population, persona, j, 3, f"{population}/{self._tag}")
            specs.append(replace(member, replicate=self.replicate))
            trajectory.decided[self._group(persona)] += 1
        return specs

    def _close_cycle(self) -> None:
        """Per trajectory: attrition (the leavers' places are the openings), then the hires
        join (up to the openings, in the order its last reading stage formed its
        evaluations); the cycle's composition is recorded."""
        base_stages = [p.name for p in self.plans if self.stage_configs[p.name].policy_of is None]
        hiring = [n for n in base_stages if self.stage_configs[n].reads is not None][-1]
        groups = {a: self._group(s.persona) for a, s in self._applied.items()}
        base = self.trajectories[BASE]
        for trajectory in self.trajectories.values():
            if self.cycle < trajectory.start:
                self._follow(trajectory, base)
                continue
            left = Counter() if "attrition" in trajectory.off else self._attrition(trajectory)
            came = {
                how: Counter(groups[a] for a in trajectory.applied if self._entries[a].how == how)
                for how in ("referral", "reapply")
            }
            if trajectory.reads_as is None:
                picked = self._random_picks(hiring, trajectory)
            else:
                picked = self.advanced.get(policy_stage_name(hiring, trajectory.reads_as), {})
            advanced = [a for authors in picked.values() for a in authors]
            rng = market_rng(self.study.seed, "hires", self.cycle, self.replicate)
            hires = [self._applied[a] for a in fill_openings(advanced, self.market.openings, rng)]
            unfilled = self.market.openings - len(hires)
            trajectory.staff += [
                Employee(
                    self, spec, self.cycle, self._entries[spec.agent_id].person, trajectory.key
                )
                for spec in hires
            ]
            if trajectory.key == BASE:
                self._remember(trajectory, hires)
            staff_now, tenure_now = self._staff(trajectory)
            trajectory.compositions.append(
                CycleComposition(
                    replicate=self.replicate,
                    cycle=self.cycle,
                    applicants=Counter(groups[a] for a in trajectory.applied),
                    referred=came["referral"],
                    reapplied=came["reapply"],
                    readers=trajectory.decided,
                    hires=Counter(self._group(s.persona) for s in hires),
                    hired=tuple(s.agent_id for s in hires),
                    left=left,
                    workforce=staff_now,
                    tenure=tenure_now,
                    unfilled=unfilled,
                    short=trajectory.short,
                )
            )

    def _follow(self, trajectory: Trajectory, base: Trajectory) -> None:
        """A policy not started yet closes the cycle as the base did (the base closes first):
        its workforce becomes a copy of the base's, in the same order of joining, so at its
        first cycle it forks from the base's state on the same seniority places."""
        for employee in trajectory.staff:
            employee.remove()
        trajectory.staff = [
            Employee(self, e.spec, e.joined, e.person, trajectory.key) for e in base.staff
        ]
        trajectory.compositions.append(base.compositions[-1])

    def _remember(self, base: Trajectory, hires: list[AgentSpec]) -> None:
        """Each of the base's applicants' history gains this cycle; those not hired are
        rejected (and may reapply), those hired leave the rejected."""
        hired = {self._entries[s.agent_id].person for s in hires}
        for entry in (e for a, e in self._entries.items() if a in base.applied):
            person = entry.person
            before = self._history.get(person, History())
            rejected = person not in hired
            self._history[person] = History(
                (*before.cycles, self.cycle), before.rejections + rejected
            )
            if rejected:
                self._rejected.setdefault(person, None)
            else:
                self._rejected.pop(person, None)

    def _random_picks(self, hiring: str, trajectory: Trajectory) -> dict[str, list[str]]:
        """The readers switched off: every reading stage's evaluations formed as the stage
        forms them (same pools), each picking as many as its reader would, uniformly at random
        (no call); per pool of ``hiring``, the authors it advanced. It mirrors the documents
        ``StudyModel._readings`` passes on, since no reader acts here."""
        advanced: dict[str, dict[str, list[str]]] = {}
        for plan in self.plans:
            config = self.stage_configs[plan.name]
            reads = config.reads
            if reads is None or config.policy_of is not None:
                continue
            documents = self._own_documents(trajectory, reads.stage)
            before = advanced.get(reads.after or "", {})
            if reads.after is not None:
                passed = {author for authors in before.values() for author in authors}
                documents = [d for d in documents if d.author.agent_id in passed]
            matching = form_evaluations(
                reads,
                self._pool_label(plan.name),
                documents,
                k=plan.select or 0,
                seed=self.study.seed,
                axes=self.study.personas.axes,
                carried=before if reads.draw == "carry" else None,
            )
            rng = market_rng(self.study.seed, f"pick/{plan.name}", self.cycle, self.replicate)
            stage = advanced.setdefault(plan.name, {})
            for evaluation in matching.evaluations:
                shown = evaluation.shown
                for i in sorted(rng.sample(range(len(shown)), min(evaluation.k, len(shown)))):
                    author = shown[i].document.author.agent_id
                    stage.setdefault(evaluation.cluster, []).append(author)
        return advanced.get(hiring, {})

    def _attrition(self, trajectory: Trajectory) -> Counter[str]:
        """Remove the cycle's leavers from ``trajectory`` (every trajectory draws the same
        seniority places); per group, how many left."""
        rule = self.market.attrition
        staff = trajectory.staff
        rng = market_rng(self.study.seed, "attrition", self.cycle, self.replicate)
        if rule.leavers is not None:
            leaving = rng.sample(range(len(staff)), min(rule.leavers, len(staff)))
        else:
            draws = [rng.random() for _ in staff]
            leaving = [i for i, u in enumerate(draws) if u < (rule.rate or 0.0)]
        left = Counter(self._group(staff[i].spec.persona) for i in leaving)
        for i in leaving:
            staff[i].remove()
        gone = set(leaving)
        trajectory.staff = [e for i, e in enumerate(staff) if i not in gone]
        return left

    def _staff(self, trajectory: Trajectory) -> tuple[Counter[str], Counter[str]]:
        """Per group: ``trajectory``'s employees now, and their cycles worked summed."""
        staff: Counter[str] = Counter()
        tenure: Counter[str] = Counter()
        for employee in trajectory.staff:
            group = self._group(employee.spec.persona)
            staff[group] += 1
            tenure[group] += employee.tenure
        return staff, tenure

    def _group(self, persona: Any, by: str | None = None) -> str:
        return dict(persona.attributes).get(by or self.market.by, "")

    def _documents_read(self, stage: str, written: str) -> list[Any]:
        config = self.stage_configs[stage]
        policy = config.policy_of[1] if config.policy_of else BASE
        return self._own_documents(self._reading[policy], written)

    def _own_documents(self, trajectory: Trajectory, written: str) -> list[Any]:
        """The documents of ``written`` by ``trajectory``'s applicants (in the order written,
        so a trajectory that draws the base's applicants forms the base's pools)."""
        documents = self.documents.get(written, [])
        if len(self.trajectories) == 1:
            return documents
        return [
            d
            for d in documents
            if d.author.agent_id in trajectory.applied or d.author.agent_id not in self._applied
        ]

    def _pool_label(self, stage: str) -> str:
        # Each cycle's pools are drawn afresh, and their ids (in unit ids) name the cycle.
        return f"{self._tag}/{super()._pool_label(stage)}"

    def _readings(self, plan: Any) -> list[Reading]:
        config = self.stage_configs[plan.name]
        population = self.views.stage_population[plan.name]
        policy = config.policy_of[1] if config.policy_of else BASE
        if self.cycle < self._reading[policy].start:
            # Not started: the base's readings stand for the policy's, so its copies read
            # nothing (no call, no row).
            return []
        if population in self.market.readers:
            # A policy's copy of a stage is read by that policy's workforce.
            self.members[population] = self._reading[policy].readers[population]
        readings = super()._readings(plan)
        # The exclusions are counted over every cycle, not the last one's.
        total = self._exclusions.setdefault(plan.name, Counter())
        total.update(self.exclusions.get(plan.name, {}))
        self.exclusions[plan.name] = dict(total)
        return readings

    def _row(self, agent: Any, plan: Any, response: LLMResponse | None) -> dict[str, Any]:
        row = super()._row(agent, plan, response)
        row["cycle"] = self.cycle
        row["replicate"] = self.replicate
        entry = self._entries.get(agent.spec.agent_id)
        if entry is not None and not isinstance(agent, Reading):
            row.update(self._entry_columns(entry))
            if len(self.trajectories) > 1:
                row[APPLIES_IN] = "|".join(
                    t.key for t in self.trajectories.values() if agent.spec.agent_id in t.applied
                )
        if isinstance(agent, Reading):
            # Pools of different cycles (and replicate markets) are different clusters
            # (analyses cluster on them).
            for column in ("evaluation", "cluster"):
                row[column] = f"{self._tag}/{row[column]}"
        return row

    def _entry_columns(self, entry: Entry) -> dict[str, Any]:
        """An applicant's row: who referred them (the referrer's id in the applicants'
        population), with referrals; whether they applied again and their history, with
        reapplication."""
        columns: dict[str, Any] = {}
        if self.market.referrals is not None:
            referrer = entry.referrer
            columns["referred_by"] = None if referrer is None else self._pool[referrer].agent_id
        if self.market.reapply is not None:
            history = self._history.get(entry.person, History())
            columns.update(
                reapplied=entry.how == "reapply",
                applications_before=len(history.cycles),
                rejections_before=history.rejections,
            )
        return columns

    def notes(self) -> list[str]:
        """Cycles short of applicants (too few people out of work) and openings left unfilled
        (fewer advanced than openings), over every trajectory and replicate market."""
        closed = [c for t in self.trajectories.values() for c in t.compositions if c.cycle]
        lines = []
        short = [c for c in closed if c.short]
        if short:
            lines.append(
                f"market: {len(short)} cycle(s) short of applicants, {sum(c.short for c in short)}"
                " applicant(s) missing in all: fewer people out of work than `per_cycle` "
                f"(employees do not apply; {MARKET_CSV} column `applicants_short`)"
            )
        unfilled = [c for c in closed if c.unfilled]
        if unfilled:
            lines.append(
                f"market: {sum(c.unfilled for c in unfilled)} opening(s) unfilled in "
                f"{len(unfilled)} cycle(s): fewer applicants advanced than there were openings "
                f"({MARKET_CSV} column `unfilled`)"
            )
        return lines

    def write_tables(self, out: Path) -> None:
        """The per-cycle composition table (every closed cycle), one row per replicate market,
        cycle and group of every trajectory (the base first, each over every replicate)."""
        groups = list(self.study.personas.axes[self.market.by])
        rows = [
            [
                c.replicate,
                c.cycle,
                group,
                *(n[group] for n in c.counts()),
                c.unfilled,
                c.short,
                t.policy,
                switch_label(t.off),
            ]
            for t in self.trajectories.values()
            for c in t.compositions
            for group in groups
        ]
        write_csv(out / MARKET_CSV, pd.DataFrame(rows, columns=list(COMPOSITION_COLUMNS)))
        hired = [
            [c.replicate, c.cycle, t.policy, switch_label(t.off), agent_id]
            for t in self.trajectories.values()
            for c in t.compositions
            for agent_id in c.hired
        ]
        write_csv(out / HIRES_CSV, pd.DataFrame(hired, columns=list(HIRES_COLUMNS)))


def out_of_work(size: int, taken: set[int], wanted: int, rng: random.Random) -> list[int]:
    """``wanted`` people of a population of ``size`` drawn uniformly without replacement among
    those not ``taken`` (employed, or applying already), all of them when there are no more.
    The draw walks one stream of uniform picks and skips the taken, so two markets whose
    workforces differ draw the same people wherever neither employs them (common random
    numbers)."""
    if size - len(taken) <= wanted:
        return [p for p in range(size) if p not in taken]
    seen: set[int] = set()
    drawn: list[int] = []
    while len(drawn) < wanted:
        person = rng.randrange(size)
        if person not in seen:
            seen.add(person)
            if person not in taken:
                drawn.append(person)
    return drawn


def fill_openings(advanced: list[str], openings: int, rng: random.Random) -> list[str]:
    """Who of ``advanced`` (authors, in the order the evaluations were formed; repeats count
    once) fills the ``openings``: all of them when they fit, else a uniform random draw of as
    many, kept in that order. Taking the first ones would hire from the first pools read and
    so add a position bias of the engine's own."""
    unique = list(dict.fromkeys(advanced))
    if len(unique) <= openings:
        return unique
    chosen = set(rng.sample(range(len(unique)), openings))
    return [author for i, author in enumerate(unique) if i in chosen]


def _in_cycle(spec: AgentSpec, tag: str, replicate: int) -> AgentSpec:
    """``spec`` as an agent of the cycle ``tag`` names (see ``MarketModel._tag``): the cycle
    enters its id after the population, so its units (and call seeds) are its own in every
    cycle and replicate market it is drawn in."""
    population, _, rest = spec.agent_id.partition("/")
    return replace(spec, agent_id=f"{population}/{tag}/{rest}", replicate=replicate)
