"""A pipeline study over cycles: a labour market whose workforce persists between rounds.

Each cycle the model draws applicants from their population, draws the reading stages' agents
from the current workforce (so the decision-makers' personas change as hiring does), runs the
pipeline's stages (one model step each, as in a single round), lets the last reading stage's
hires (up to the openings) join the workforce, and applies attrition.

Every draw of the market (the initial workforce, each cycle's applicants, readers and
leavers) comes from a generator seeded by the study seed, what is drawn, the cycle and the
replicate market only: two studies that differ in their readers' behaviour (a policy run as its
own study) draw the same applicants and the same attrition numbers with the same seed (common
random numbers). ``market.replicates`` runs that many independent markets one after the other
in the same model; replicate 0 draws exactly what a single market draws.
"""

from __future__ import annotations

import gc
import hashlib
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mesa
import pandas as pd

from biasim.agents import AGENT_CLASSES, Reading
from biasim.simulator.common.csvfiles import write_csv
from biasim.simulator.engine.dispatch import RunAborted
from biasim.simulator.engine.model import StudyModel
from biasim.simulator.llm.types import LLMResponse
from biasim.simulator.study.config import StudyConfig
from biasim.simulator.study.design import AgentSpec, population_member, population_specs
from biasim.simulator.study.market import COMPOSITION_COLUMNS, MARKET_CSV, MarketConfig
from biasim.simulator.study.stage_graph import populations


def market_rng(seed: int, what: str, cycle: int, replicate: int = 0) -> random.Random:
    """The generator of one kind of market draw in one cycle (0: the initial workforce) of
    one replicate market. Replicate 0's key has no replicate in it: a study that declares no
    replicates draws what it drew before they existed."""
    market = "market" if replicate == 0 else f"market/r{replicate}"
    digest = hashlib.blake2b(f"{seed}:{market}:{what}:{cycle}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


class Employee(mesa.Agent):
    """A member of the workforce: the applicant hired, the cycle they joined (0: initial)."""

    def __init__(self, model: MarketModel, spec: AgentSpec, joined: int) -> None:
        super().__init__(model)
        self.spec = spec
        self.joined = joined

    @property
    def tenure(self) -> int:
        """Cycles worked (0 in the cycle of hiring)."""
        return self.model.cycle - self.joined  # type: ignore[attr-defined]


@dataclass(frozen=True)
class CycleComposition:
    """One closed cycle: group -> count of applicants, readers, hires, leavers, workforce."""

    replicate: int
    cycle: int
    applicants: Counter[str]
    readers: Counter[str]
    hires: Counter[str]
    left: Counter[str]
    workforce: Counter[str]
    tenure: Counter[str]

    def counts(self) -> tuple[Counter[str], ...]:
        """The counts in the order of :data:`COMPOSITION_COLUMNS` (after replicate, cycle and
        group)."""
        return (self.applicants, self.readers, self.hires, self.left, self.workforce, self.tenure)


class MarketModel(StudyModel):
    """:class:`StudyModel` over ``study.cycles`` cycles; a cycle's stages are its steps."""

    def __init__(self, study: StudyConfig, *args: Any, **kwargs: Any) -> None:
        assert study.market is not None and study.cycles is not None
        self.market: MarketConfig = study.market
        self.cycle = 0
        #: The replicate market now running (0 .. market.replicates - 1).
        self.replicate = 0
        self.compositions: list[CycleComposition] = []
        self._pool = population_specs(study, study.market.applicants.population)
        self._applied: dict[str, AgentSpec] = {}
        self._readers: Counter[str] = Counter()
        self._exclusions: dict[str, Counter[str]] = {}
        super().__init__(study, *args, **kwargs)

    @property
    def workforce(self) -> mesa.agent.AgentSet:
        """The employees now (a Mesa AgentSet, in the order they joined)."""
        return self.agents_by_type.get(Employee) or mesa.agent.AgentSet([], random=self.random)

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
        """Start the next replicate market afresh: nothing of the last one's workforce stays."""
        for employee in list(self.workforce):
            employee.remove()
        self.replicate += 1
        self.cycle = 0
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
        for i in sorted(rng.sample(range(len(self._pool)), self.market.workforce)):
            Employee(self, self._pool[i], joined=0)
        empty: Counter[str] = Counter()
        staff, tenure = self._staff()
        self.compositions.append(
            CycleComposition(self.replicate, 0, empty, empty, empty, empty, staff, tenure)
        )

    def _open_cycle(self) -> None:
        gc.unfreeze()
        for agent in [a for a in self.agents if not isinstance(a, Employee)]:
            agent.remove()
        self.documents, self.advanced, self.members = {}, {}, {}
        seed, cycle = self.study.seed, self.cycle
        source = self.market.applicants.population
        rng = market_rng(seed, "applicants", cycle, self.replicate)
        drawn = sorted(rng.sample(range(len(self._pool)), self.market.applicants.per_cycle))
        applied = [_in_cycle(self._pool[i], self._tag, self.replicate) for i in drawn]
        self._applied = {spec.agent_id: spec for spec in applied}
        self._readers = Counter()
        for name, pop in populations(self.study).items():
            cls = AGENT_CLASSES[pop.agent]
            if name == source:
                specs = applied
            elif name in self.market.readers:
                specs = self._draw_readers(name, pop.count)
            else:
                specs = [
                    _in_cycle(s, self._tag, self.replicate)
                    for s in population_specs(self.study, name)
                ]
            self.members[name] = [cls(self, spec, self.study) for spec in specs]

    def _draw_readers(self, population: str, count: int) -> list[AgentSpec]:
        """``count`` employees (without replacement while there are enough) as this cycle's
        readers of ``population``: each reader takes the employee's persona."""
        staff = list(self.workforce)
        if not staff:
            # Only when hires failed (every answer of a cycle invalid, under a raised
            # --max-error-rate): the run stops with what it answered, as on too many failures.
            raise RunAborted(
                f"cycle {self.cycle}: the workforce is empty (no hire joined), so no employee "
                f"can read in `{population}`"
            )
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
            self._readers[self._group(persona)] += 1
        return specs

    def _close_cycle(self) -> None:
        """Attrition (the leavers' places are the openings), then the hires join (up to the
        openings, in the order the last reading stage formed its evaluations); the cycle's
        composition is recorded."""
        rule = self.market.attrition
        staff = list(self.workforce)
        rng = market_rng(self.study.seed, "attrition", self.cycle, self.replicate)
        if rule.leavers is not None:
            leaving = rng.sample(range(len(staff)), min(rule.leavers, len(staff)))
        else:
            draws = [rng.random() for _ in staff]
            leaving = [i for i, u in enumerate(draws) if u < (rule.rate or 0.0)]
        left = Counter(self._group(staff[i].spec.persona) for i in leaving)
        for i in leaving:
            staff[i].remove()
        hiring = [p.name for p in self.plans if self.stage_configs[p.name].reads is not None][-1]
        advanced = [a for authors in self.advanced.get(hiring, {}).values() for a in authors]
        hires = [self._applied[a] for a in dict.fromkeys(advanced)][: self.market.openings]
        for spec in hires:
            Employee(self, spec, joined=self.cycle)
        staff_now, tenure_now = self._staff()
        self.compositions.append(
            CycleComposition(
                replicate=self.replicate,
                cycle=self.cycle,
                applicants=Counter(self._group(s.persona) for s in self._applied.values()),
                readers=self._readers,
                hires=Counter(self._group(s.persona) for s in hires),
                left=left,
                workforce=staff_now,
                tenure=tenure_now,
            )
        )

    def _staff(self) -> tuple[Counter[str], Counter[str]]:
        """Per group: employees now, and their cycles worked summed."""
        staff: Counter[str] = Counter()
        tenure: Counter[str] = Counter()
        for employee in self.workforce:
            group = self._group(employee.spec.persona)
            staff[group] += 1
            tenure[group] += employee.tenure
        return staff, tenure

    def _group(self, persona: Any) -> str:
        return dict(persona.attributes).get(self.market.by, "")

    def _pool_label(self, stage: str) -> str:
        # Each cycle's pools are drawn afresh, and their ids (in unit ids) name the cycle.
        return f"{self._tag}/{super()._pool_label(stage)}"

    def _readings(self, plan: Any) -> list[Reading]:
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
        if isinstance(agent, Reading):
            # Pools of different cycles (and replicate markets) are different clusters
            # (analyses cluster on them).
            for column in ("evaluation", "cluster"):
                row[column] = f"{self._tag}/{row[column]}"
        return row

    def write_tables(self, out: Path) -> None:
        """The per-cycle composition table (every closed cycle), one row per replicate market,
        cycle and group."""
        groups = list(self.study.personas.axes[self.market.by])
        rows = [
            [c.replicate, c.cycle, group, *(n[group] for n in c.counts())]
            for c in self.compositions
            for group in groups
        ]
        write_csv(out / MARKET_CSV, pd.DataFrame(rows, columns=list(COMPOSITION_COLUMNS)))


def _in_cycle(spec: AgentSpec, tag: str, replicate: int) -> AgentSpec:
    """``spec`` as an agent of the cycle ``tag`` names (see ``MarketModel._tag``): the cycle
    enters its id after the population, so its units (and call seeds) are its own in every
    cycle and replicate market it is drawn in."""
    population, _, rest = spec.agent_id.partition("/")
    return replace(spec, agent_id=f"{population}/{tag}/{rest}", replicate=replicate)
