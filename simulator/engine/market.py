"""A pipeline study over cycles: a labour market whose workforce persists between rounds.

Each cycle the model draws applicants from their population, draws the reading stages' agents
from the current workforce (so the decision-makers' personas change as hiring does), runs the
pipeline's stages (one model step each, as in a single round), lets the last reading stage's
hires (up to the openings) join the workforce, and applies attrition.

Every draw of the market (the initial workforce, each cycle's applicants, readers and
leavers) comes from a generator seeded by the study seed, what is drawn and the cycle only:
two studies that differ in their readers' behaviour (a policy run as its own study) draw the
same applicants and the same attrition numbers with the same seed (common random numbers).
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
from biasim.simulator.study.market import MarketConfig
from biasim.simulator.study.stage_graph import populations

#: The per-cycle composition table a market run writes beside its results.
MARKET_CSV = "market.csv"
#: Its columns: per cycle and group, who applied, who decided (the cycle's readers, drawn from
#: the workforce at its start), who was hired, who left, and who works there at the end of the
#: cycle (after attrition and hiring), with its total tenure (cycles worked, summed).
COMPOSITION_COLUMNS = (
    "cycle",
    "group",
    "applicants",
    "readers",
    "hires",
    "left",
    "workforce",
    "tenure",
)


def market_rng(seed: int, what: str, cycle: int) -> random.Random:
    """The generator of one kind of market draw in one cycle (0: the initial workforce)."""
    digest = hashlib.blake2b(f"{seed}:market:{what}:{cycle}".encode(), digest_size=8).digest()
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

    cycle: int
    applicants: Counter[str]
    readers: Counter[str]
    hires: Counter[str]
    left: Counter[str]
    workforce: Counter[str]
    tenure: Counter[str]

    def counts(self) -> tuple[Counter[str], ...]:
        """The counts in the order of :data:`COMPOSITION_COLUMNS` (after cycle and group)."""
        return (self.applicants, self.readers, self.hires, self.left, self.workforce, self.tenure)


class MarketModel(StudyModel):
    """:class:`StudyModel` over ``study.cycles`` cycles; a cycle's stages are its steps."""

    def __init__(self, study: StudyConfig, *args: Any, **kwargs: Any) -> None:
        assert study.market is not None and study.cycles is not None
        self.market: MarketConfig = study.market
        self.cycle = 0
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
            self.running = False
            return
        self.cycle += 1
        self.wave = self.cycle
        self._open_cycle()

    def _hire_initial(self) -> None:
        rng = market_rng(self.study.seed, "workforce", 0)
        for i in sorted(rng.sample(range(len(self._pool)), self.market.workforce)):
            Employee(self, self._pool[i], joined=0)
        empty: Counter[str] = Counter()
        staff, tenure = self._staff()
        self.compositions.append(CycleComposition(0, empty, empty, empty, empty, staff, tenure))

    def _open_cycle(self) -> None:
        gc.unfreeze()
        for agent in [a for a in self.agents if not isinstance(a, Employee)]:
            agent.remove()
        self.documents, self.advanced, self.members = {}, {}, {}
        seed, cycle = self.study.seed, self.cycle
        source = self.market.applicants.population
        rng = market_rng(seed, "applicants", cycle)
        drawn = sorted(rng.sample(range(len(self._pool)), self.market.applicants.per_cycle))
        applied = [_in_cycle(self._pool[i], cycle) for i in drawn]
        self._applied = {spec.agent_id: spec for spec in applied}
        self._readers = Counter()
        for name, pop in populations(self.study).items():
            cls = AGENT_CLASSES[pop.agent]
            if name == source:
                specs = applied
            elif name in self.market.readers:
                specs = self._draw_readers(name, pop.count)
            else:
                specs = [_in_cycle(s, cycle) for s in population_specs(self.study, name)]
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
        rng = market_rng(self.study.seed, f"readers/{population}", self.cycle)
        if count <= len(staff):
            chosen = rng.sample(range(len(staff)), count)
        else:
            chosen = [rng.randrange(len(staff)) for _ in range(count)]
        specs = []
        for j, i in enumerate(chosen):
            persona = staff[i].spec.persona
            prefix = f"{population}/c{self.cycle:03d}"
            specs.append(population_member(population, persona, j, 3, prefix))
            self._readers[self._group(persona)] += 1
        return specs

    def _close_cycle(self) -> None:
        """Attrition (the leavers' places are the openings), then the hires join (up to the
        openings, in the order the last reading stage formed its evaluations); the cycle's
        composition is recorded."""
        rule = self.market.attrition
        staff = list(self.workforce)
        rng = market_rng(self.study.seed, "attrition", self.cycle)
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
        return f"c{self.cycle:03d}/{super()._pool_label(stage)}"

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
        if isinstance(agent, Reading):
            # Pools of different cycles are different clusters (analyses cluster on them).
            for column in ("evaluation", "cluster"):
                row[column] = f"c{self.cycle:03d}/{row[column]}"
        return row

    def write_tables(self, out: Path) -> None:
        """The per-cycle composition table (every closed cycle), one row per cycle and group."""
        groups = list(self.study.personas.axes[self.market.by])
        rows = [
            [c.cycle, group, *(n[group] for n in c.counts())]
            for c in self.compositions
            for group in groups
        ]
        write_csv(out / MARKET_CSV, pd.DataFrame(rows, columns=list(COMPOSITION_COLUMNS)))


def _in_cycle(spec: AgentSpec, cycle: int) -> AgentSpec:
    """``spec`` as an agent of ``cycle``: the cycle enters its id after the population, so
    its units (and call seeds) are its own in every cycle it is drawn."""
    population, _, rest = spec.agent_id.partition("/")
    return replace(spec, agent_id=f"{population}/c{cycle:03d}/{rest}")
