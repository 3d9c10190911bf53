"""The Mesa model: persona-endowed agents from the design matrix, one stage per step.

A design larger than ``design.batch_size`` agents runs in waves: the model holds one wave of
agents, runs every stage for it, streams its rows to the results table and moves on, so memory
does not grow with the design.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import mesa
import orjson

from biasim.agents import AGENT_CLASSES, SELECTED, LLMAgent, Reading, ScenarioAgent, StagePlan
from biasim.agents.documents import Document
from biasim.agents.twins import CounterfactualTwin
from biasim.simulator.engine.calls import Call
from biasim.simulator.engine.committees import advanced_labels, apply_selection, decide
from biasim.simulator.engine.dispatch import Dispatcher, RunInterrupted
from biasim.simulator.engine.matching import form_evaluations, stage_rng
from biasim.simulator.engine.results import ResultsWriter
from biasim.simulator.llm.logprobs import TOP_LOGPROBS
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import output_schema
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from biasim.simulator.study import counterfactual as cf_columns
from biasim.simulator.study.config import RoleConfig, StageConfig, StudyConfig
from biasim.simulator.study.counterfactual import twins
from biasim.simulator.study.design import (
    MODEL_LABEL,
    biography_view,
    expected_units,
    iter_design,
    iter_populations,
    when_counts,
)
from biasim.simulator.study.logprob_checks import decision_field
from biasim.simulator.study.persona_writer import persona_name
from biasim.simulator.study.stage_graph import stage_personas
from biasim.simulator.study.templating import reads_answers
from biasim.simulator.study.views import StudyViews, study_views

#: Runtimes by (role, model label); the label is "" for roles played by one model.
Runtimes = dict[tuple[str, str], BackendRuntime]


class StudyModel(mesa.Model):
    """Runs a study: each ``step()`` is one stage in which every agent of the wave acts once.

    All agents' requests of a stage go to the dispatcher together, so calls run concurrently;
    answers are applied to agents in creation order, so results never depend on which call
    finished first.

    Args:
        study: The validated study.
        runtimes: ``(role, model label)`` -> backend runtime.
        dispatcher: Executes the calls of a stage.
        loop: Event loop the dispatcher runs on (backend clients stay bound to it).
        writer: Where result rows go.
        views: The study's derived views (computed from ``study`` when not given).
    """

    def __init__(
        self,
        study: StudyConfig,
        runtimes: Runtimes,
        dispatcher: Dispatcher,
        loop: asyncio.AbstractEventLoop,
        writer: ResultsWriter,
        views: StudyViews | None = None,
    ) -> None:
        super().__init__(rng=study.seed)
        #: Casting, labels, populations, stage order and sizes, derived once.
        self.views = views or study_views(study)
        self.study = study
        self.runtimes = runtimes
        self.dispatcher = dispatcher
        self.writer = writer
        self._loop = loop
        #: Role -> model label -> who plays it ("" for a role one model plays for every label).
        self._variants = self.views.casting
        multi = len(self.views.model_labels) > 1
        self.stage_configs = {stage.name: stage for stage in study.stages}
        #: Stages answered with log-probabilities -> the decision field and its options.
        self._decisions = {
            stage.name: (found[0], tuple(found[1]))
            for stage in study.stages
            if stage.answer == "logprobs" and (found := decision_field(stage)) is not None
        }
        self.plans = [self._plan(self.stage_configs[n], multi) for n in self.views.stage_order]
        #: A study with populations: agents read each other's work, so every agent of every
        #: population is held at once (one wave) and stages run in pipeline order.
        self.pipeline = self.views.pipeline
        self.members: dict[str, list[LLMAgent]] = {}
        #: Writing stage -> its answered documents, in design order.
        self.documents: dict[str, list[Document]] = {}
        #: Reading stage -> evaluation cluster -> authors advanced (in label order).
        self.advanced: dict[str, dict[str, list[str]]] = {}
        #: Writing stage -> the answer field its readers read.
        self._document_fields = {
            s.reads.stage: s.reads.field for s in study.stages if s.reads is not None
        }
        #: Stage -> documents left out of its evaluations, by reason.
        self.exclusions: dict[str, dict[str, int]] = {}
        self._expected: int | None = None
        self.agents_total = self.views.agents_total
        if self.pipeline:
            self._design = iter_populations(study)
        else:
            self._design = iter_design(study)
        self.stage_index = 0
        self.wave = 0
        self.units_done = 0
        #: Units of the stage a stop interrupted that need nothing more (see units_settled).
        self.units_partial = 0
        #: Units whose answer came from the call store this session (a resume's replay).
        self.units_from_cache = 0
        self.wave_seconds = 0.0
        #: Stage index -> agents of the current wave whose `when` is false (see skipped_ahead).
        self._known_skips: dict[int, int] = {}
        #: Stage -> agents of the waves not yet built that its `when` on the design skips.
        self._later_skips = (
            {}
            if self.pipeline
            else {name: self.agents_total - n for name, n in when_counts(study).agents.items()}
        )
        self._next_wave()

    @property
    def total_units(self) -> int:
        """Units of work in the whole run (agents x stages; stages an agent skips count).

        With populations, a reading stage's units are its evaluations: their number is known
        once the stages before it have answered, so this is the count if every answer is
        valid (an estimate the progress bar uses)."""
        if self.pipeline:
            if self._expected is None:
                self._expected = expected_units(self.study)
            return self._expected
        return self.agents_total * len(self.plans)

    @property
    def units_settled(self) -> int:
        """Units (as :attr:`total_units` counts them) that need nothing more: answered (or
        failed), skipped, or known ahead to be skipped. The one count of progress: the
        progress bar, the stop message, the summary and the manifest all read it."""
        return self.units_done + self.units_partial + self.skipped_ahead

    @property
    def skipped_ahead(self) -> int:
        """Units of the current wave's stages still to run whose ``when`` is already known to
        be false: progress counts them done at once, so the ETA is the time of the calls
        left, not of every unit (a study whose stages each take a third of the agents would
        otherwise show three times the time until the end). Those of waves not yet built are
        counted from the design (:func:`when_counts`) where it could count them."""
        ahead = sum(n for index, n in self._known_skips.items() if index >= self.stage_index)
        return ahead + sum(max(n, 0) for n in self._later_skips.values())

    def _count_known_skips(self) -> None:
        """:attr:`skipped_ahead` for a new wave: every stage whose ``when`` reads no answer."""
        self._known_skips = {}
        if self.pipeline:
            return
        agents = list(self.agents_by_type[ScenarioAgent])
        written = self.study.personas.writer is not None
        for index, plan in enumerate(self.plans):
            if plan.when is not None and not reads_answers(plan.when, written):
                try:
                    self._known_skips[index] = sum(not a.takes_part(plan) for a in agents)
                except Exception:
                    # A `when` failing for an agent stops the run in its stage, where the
                    # run records the failure (validation meets it in most designs).
                    self._later_skips.pop(plan.name, None)
                    continue
                if plan.name in self._later_skips:
                    self._later_skips[plan.name] -= self._known_skips[index]

    def _plan(self, stage: StageConfig, multi_model: bool) -> StagePlan:
        role = self.study.roles[stage.role]
        shared = set(stage.shared_across)
        if multi_model and "" in self._variants[stage.role]:
            shared.add(MODEL_LABEL)  # one model plays this role for every variant: share it
        completion = stage.completion
        seeds = self.study.design.replicate_seeds
        return StagePlan(
            name=stage.name,
            role=stage.role,
            system=stage.system,
            prompt=stage.prompt,
            schema=output_schema(stage.output, forced=stage.forced_choice)
            if stage.output and not any(f.choices_from for f in stage.output.values())
            else None,
            output=stage.output,
            forced_choice=stage.forced_choice,
            sampling={label: sampling(v) for label, v in self._variants[stage.role].items()},
            synthetic_keys={
                label: keys
                for label, variant in self._variants[stage.role].items()
                if (keys := _synthetic_keys(variant, self.study.personas.axes))
            },
            base_seed=self.study.seed if role.seed is None else role.seed,
            when=stage.when,
            shared=frozenset(shared),
            completion_prompt=completion.prompt if completion else None,
            extract=completion.extract if completion else None,
            formatter_role=completion.formatter if completion else None,
            replicate_seeds=tuple(seeds) if seeds else None,
            select=stage.select
            if stage.select is not None or stage.reads is None or stage.reads.matching != "pair"
            else 1,
            advance=stage.advance,
            pairing=stage.pairing,
        )

    def _next_wave(self) -> None:
        start = time.perf_counter()
        # A wave's agents live until the next wave; the cyclic collector would rescan all of
        # them in every full collection during the stages (a quarter of the engine's time at
        # 30,000 agents). Frozen objects are skipped; unfreezing first lets the previous
        # wave's objects be collected.
        held = gc.get_freeze_count()
        gc.unfreeze()
        size = None if self.pipeline else self.study.design.batch_size
        with collector_paused():
            batch = list(itertools.islice(self._design, size))
        if not batch:
            # The last wave's agents stay: removing them one by one costs time and frees
            # nothing that the end of the run does not free anyway.
            self.running = False
            self._known_skips, self._later_skips = {}, {}
            return
        for agent in list(self.agents):
            agent.remove()
        if held:
            # What the previous wave (or run) left may hold cycles: collected once here, since
            # the building below pauses the collector and the freeze after it would keep them.
            gc.collect()
        # Listing the specs and building the agents add objects the collector would rescan in
        # full collections that find nothing (half the time of building 100,000 agents).
        with collector_paused():
            self._build_agents(batch)
        gc.freeze()
        self._count_known_skips()
        self.wave += 1
        self.wave_seconds += time.perf_counter() - start

    def _build_agents(self, batch: list[Any]) -> None:
        # Built directly, not with `Agent.create_agents`: its per-agent argument lists and the
        # AgentSet it returns cost a third of the time at 100,000 agents.
        if self.pipeline:
            for name, pop in self.views.populations.items():
                cls = AGENT_CLASSES[pop.agent]
                self.members[name] = [
                    cls(self, spec, self.study) for spec in batch if spec.population == name
                ]
        else:
            for spec in batch:
                ScenarioAgent(self, spec, self.study)

    def _answered_in_process(self, plan: StagePlan) -> bool:
        """Whether every call of ``plan`` is answered at once in this process (the synthetic
        responder without latency): nothing waits, so the stage is all computing."""
        roles = [plan.role, *([plan.formatter_role] if plan.formatter_role else [])]
        return all(
            self.runtimes[(role, label)].in_place
            for role in roles
            for label in self._variants[role]
        )

    def _role(self, role: str, label: str) -> tuple[RoleConfig, BackendRuntime]:
        variants = self._variants[role]
        key = label if label in variants else ""
        return variants[key], self.runtimes[(role, key)]

    def step(self) -> None:
        """Run the next stage for every agent of the current wave."""
        plan = self.plans[self.stage_index]
        in_process = self._answered_in_process(plan)
        # A stage answered in this process builds its rows and documents in seconds and
        # leaves no cyclic garbage; full collections rescanning what it has built took a
        # tenth of a 100,000-applicant pipeline. What it keeps (documents, who advanced) is
        # frozen with the wave's agents. A stage that waits on a server keeps the collector.
        with collector_paused(in_process):
            self._run_stage(plan)
        if in_process:
            gc.freeze()
        if self.stage_index == len(self.plans):
            self.stage_index = 0
            self._next_wave()

    def _run_stage(self, plan: StagePlan) -> None:
        config = self.stage_configs[plan.name]
        if not self.pipeline:
            agents: list[Any] = list(self.agents_by_type[ScenarioAgent])
        elif config.reads is not None:
            agents = self._readings(plan)
        else:
            agents = self.members[self.views.stage_population[config.name]]
        acting = [a for a in agents if isinstance(a, Reading) or a.takes_part(plan)]
        if config.counterfactual is not None:
            acting = self._with_twins(acting, config)
        stopped: RunInterrupted | None = None
        try:
            responses = self._loop.run_until_complete(self._answer(plan, acting))
        except RunInterrupted as exc:
            # The answers that came back before the stop are results like any other.
            stopped = exc
            kept = [i for i, done in enumerate(exc.finished) if done]
            # Settled in this stage: the kept answers and the agents it skips, less those
            # skipped_ahead counts already.
            skipped = len(agents) - len(acting) - self._known_skips.get(self.stage_index, 0)
            self.units_partial = len(kept) + skipped
            acting = [acting[i] for i in kept]
            responses = [exc.answers[i] for i in kept]
        # A twin's call is part of its agent's unit: the set counts once, by its agent's call.
        self.units_from_cache += sum(
            r is not None and r.cached and not isinstance(a, CounterfactualTwin)
            for a, r in zip(acting, responses, strict=True)
        )
        decided = config.reads is not None and (config.readers or config.selection) is not None
        rows = []
        for agent, response in zip(acting, responses, strict=True):
            agent.observe(plan, response)
            row = self._row(agent, plan, response)
            if decided:
                # Who advances is decided below, from every reading of the stage.
                row["advanced"] = _joined(advanced_labels(plan, response))
            elif self.pipeline and not isinstance(agent, CounterfactualTwin):
                # Readers read the agents' documents; a twin's is a result only.
                self._record(agent, plan, response, row)
            if config.counterfactual is not None:
                _mark_set(row, agent, plan, config.counterfactual.axis)
            rows.append(row)
        if decided and stopped is None:
            rows = self._decide(plan, config, acting, responses, rows)
        self.writer.write(rows)
        if stopped is not None:
            raise stopped
        self.units_done += len(agents)
        self.stage_index += 1

    def _with_twins(self, acting: list[Any], stage: StageConfig) -> list[Any]:
        """Each acting agent followed by its counterfactual twins (see :mod:`agents.twins`)."""
        from biasim.simulator.study.templating import render

        cf, personas = stage.counterfactual, stage_personas(self.study, stage)
        assert cf is not None and personas is not None  # validation refuses a stage without
        out: list[Any] = []
        for agent in acting:
            out.append(agent)
            for value, persona in twins(agent.spec.persona, agent.spec.index, cf, personas, render):
                out.append(CounterfactualTwin(agent, persona, value))
        return out

    async def _answer(self, plan: StagePlan, agents: list[Any]) -> list[LLMResponse | None]:
        """Answers for ``agents`` (``None`` where an earlier stage failed)."""
        completion = [
            a.failed_stage is None
            and not self._role(plan.role, a.spec.model_label)[0].structured_output
            for a in agents
        ]
        requests = [
            a.compose(plan, part="completion" if c else "prompt")
            for a, c in zip(agents, completion, strict=True)
        ]
        answers = await self._dispatch(plan, plan.role, agents, requests, suffix="")
        # Completion models answered in free text: a formatter role extracts the structure.
        positions = [
            i for i, c in enumerate(completion) if c and answers[i] is not None and answers[i].valid
        ]
        if positions:
            try:
                await self._extract(plan, agents, answers, positions)
            except RunInterrupted as exc:
                # A free-text answer whose structure was not extracted is not finished.
                finished = [True] * len(agents)
                for i, done in zip(positions, exc.finished, strict=True):
                    finished[i] = done
                raise RunInterrupted(answers, finished) from None
        return answers

    async def _extract(
        self,
        plan: StagePlan,
        agents: list[Any],
        answers: list[LLMResponse | None],
        positions: list[int],
    ) -> None:
        """Have the formatter role extract the structure of the free-text answers at
        ``positions`` (in place).

        Raises:
            RunInterrupted: Per position, whether its extraction finished (those that did are
                merged).
        """
        extract_agents = [agents[i] for i in positions]
        extract_requests = []
        for i in positions:
            fmt_role, _ = self._role(plan.formatter_role or "", agents[i].spec.model_label)
            request = agents[i].compose(plan, part="extract", text=answers[i].text)
            extract_requests.append(
                replace(request, **sampling(fmt_role)) if request is not None else None
            )
        stopped: RunInterrupted | None = None
        try:
            extracted = await self._dispatch(
                plan, plan.formatter_role or "", extract_agents, extract_requests, suffix="/format"
            )
            finished = [True] * len(positions)
        except RunInterrupted as exc:
            stopped, extracted, finished = exc, exc.answers, exc.finished
        for i, answer, done in zip(positions, extracted, finished, strict=True):
            if done:
                answers[i] = _merge(answers[i], answer)
        if stopped is not None:
            raise stopped

    async def _dispatch(
        self,
        plan: StagePlan,
        role: str,
        agents: list[Any],
        requests: list[LLMRequest | None],
        suffix: str,
    ) -> list[LLMResponse | None]:
        calls: list[Call] = []
        slots: list[int | None] = []
        seen: dict[tuple[Any, ...], int] = {}
        for agent, request in zip(agents, requests, strict=True):
            if request is None:
                slots.append(None)
                continue
            role_config, runtime = self._role(role, agent.spec.model_label)
            if plan.shared:
                # Agents that differ only in shared coordinates send the same request: ask once.
                key = (
                    id(runtime),
                    orjson.dumps(request.messages),
                    request.seed,
                    *(getattr(request, name) for name in SAMPLING_FIELDS),
                )
                if key in seen:
                    slots.append(seen[key])
                    calls[seen[key]].units += 0 if suffix else 1
                    continue
                seen[key] = len(calls)
            slots.append(len(calls))
            decision = self._decisions.get(plan.name) if not suffix else None
            if decision is not None:
                request = replace(request, top_logprobs=TOP_LOGPROBS)
            calls.append(
                Call(
                    unit_id=agent.unit(plan) + suffix,
                    stage=plan.name,
                    role=role,
                    request=request,
                    schema=agent.schema(plan) if request.json_schema is not None else None,
                    runtime=runtime,
                    reask=role_config.reask and runtime.reasks,
                    decision=decision,
                    # A twin's call is part of its agent's unit of work, not a unit of its own.
                    units=0 if suffix or isinstance(agent, CounterfactualTwin) else 1,
                )
            )
        try:
            answers = await self.dispatcher.run(calls)
        except RunInterrupted as exc:
            # Per agent: one without a request is final; the others wait for their call.
            raise RunInterrupted(
                [None if slot is None else exc.answers[slot] for slot in slots],
                [slot is None or exc.finished[slot] for slot in slots],
            ) from None
        return [None if slot is None else answers[slot] for slot in slots]

    def _readings(self, plan: StagePlan) -> list[Reading]:
        """The evaluations of a reading stage, dealt to its readers in turn."""
        config = self.stage_configs[plan.name]
        reads = config.reads
        assert reads is not None
        documents = self._documents_read(plan.name, reads.stage)
        carried = None
        if reads.after is not None:
            advanced = self.advanced.get(reads.after, {})
            carried = advanced if reads.draw == "carry" else None
            passed = {author for authors in advanced.values() for author in authors}
            documents = [d for d in documents if d.author.agent_id in passed]
        matching = form_evaluations(
            reads,
            self._pool_label(plan.name),
            documents,
            k=plan.select or 0,
            seed=self.study.seed,
            axes=self.study.personas.axes,
            carried=carried,
            names=self._names() if reads.counterfactual else None,
        )
        self.exclusions[plan.name] = dict(matching.excluded)
        readers = self.members[self.views.stage_population[config.name]]
        if config.readers is None:
            return [
                readers[i % len(readers)].read(evaluation)  # type: ignore[attr-defined]
                for i, evaluation in enumerate(matching.evaluations)
            ]
        # A committee's members are dealt in turn as single readers are: other readers of
        # the population whenever it has at least `count`.
        n = config.readers.count
        return [
            readers[(i * n + j) % len(readers)].read(evaluation, j + 1)  # type: ignore[attr-defined]
            for i, evaluation in enumerate(matching.evaluations)
            for j in range(n)
        ]

    def _documents_read(self, stage: str, written: str) -> list[Document]:
        """The documents of the writing stage ``written`` that reading ``stage`` reads: all of
        them (in a market, a trajectory's stages read its own applicants')."""
        return self.documents.get(written, [])

    def write_tables(self, out: Path) -> None:
        """The tables the model keeps besides the results, into run directory ``out`` (none
        for a single round; a market writes its per-cycle composition)."""

    def notes(self) -> list[str]:
        """Lines the run prints when it ends about what its tables record that a reader must
        not miss (none for a single round; a market's missing applicants and unfilled
        openings)."""
        return []

    def _pool_label(self, stage: str) -> str:
        """What seeds ``stage``'s pools and prefixes their ids."""
        config = self.stage_configs[stage]
        # A policy's copy of a stage draws the same pools as the stage: common random numbers.
        return config.policy_of[0] if config.policy_of else stage

    def _names(self) -> Any:
        from biasim.personas import build_personas
        from biasim.simulator.study.templating import render

        personas = build_personas(self.study.personas, self.study.design.agents_per_value, render)
        counters: dict[str, int] = {}
        names: dict[tuple[Any, ...], str | None] = {}
        for persona in personas:
            index = counters.get(persona.key, 0)
            counters[persona.key] = index + 1
            names[(persona.attributes, index)] = persona.name
        return lambda attributes, index: names.get((attributes, index))

    def _record(
        self, actor: Any, plan: StagePlan, response: LLMResponse | None, row: dict[str, Any]
    ) -> None:
        """Keep a written document, or who a reading advanced, for the stages after it."""
        valid = response is not None and response.status == "answered"
        if not isinstance(actor, Reading):
            if valid:
                text = row.get(self._document_fields.get(plan.name, "text"))
                self.documents.setdefault(plan.name, []).append(
                    Document(actor.spec, row["unit_id"], "" if text is None else str(text))
                )
            return
        labels = advanced_labels(plan, response) if valid else []
        self._advance(plan.name, actor.evaluation, labels)
        row["advanced"] = _joined(labels) if valid else None

    def _advance(self, stage: str, evaluation: Any, labels: Any) -> None:
        """Who ``evaluation`` advances in ``stage``, for the stages after it."""
        cluster = self.advanced.setdefault(stage, {}).setdefault(evaluation.cluster, [])
        for label in labels:
            cluster.append(evaluation.shown[label - 1].document.author.agent_id)

    def _decide(
        self,
        plan: StagePlan,
        config: StageConfig,
        readings: list[Any],
        responses: list[LLMResponse | None],
        rows: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The rows of a stage with a committee or a selection rule: each member's own row
        (stage ``<stage>.reader<j>``) and one decided row per evaluation, its advanced as the
        committee and then the selection rule decide (see :mod:`.committees`)."""
        rng = stage_rng(self.study.seed, self._pool_label(plan.name), "committee")
        decisions, out = decide(plan, config, readings, responses, rows, rng)
        if config.selection is not None:
            by = config.selection.by or ""
            apply_selection(
                config.selection,
                [d for d, _ in decisions],
                lambda ev, label: dict(ev.shown[label - 1].document.author.persona.attributes).get(
                    by, ""
                ),
                stage_rng(self.study.seed, self._pool_label(plan.name), "selection"),
            )
        for decision, row in decisions:
            self._advance(plan.name, decision.evaluation, decision.labels or ())
            row["advanced"] = None if decision.labels is None else _joined(decision.labels)
            if config.selection is not None:
                row["pool_advanced"] = None if decision.pooled is None else _joined(decision.pooled)
            out.append(row)
        return out

    def _row(self, agent: Any, plan: StagePlan, response: LLMResponse | None) -> dict[str, Any]:
        spec = agent.spec
        runtime = self._role(plan.role, spec.model_label)[1]
        levels = dict(spec.levels)
        row: dict[str, Any] = {
            "unit_id": agent.unit(plan),
            "agent_id": spec.agent_id,
            "stage": plan.name,
            "role": plan.role,
            "backend": runtime.backend.name,
            "model": runtime.model,
            MODEL_LABEL: spec.model_label or f"{runtime.backend.name}:{runtime.model}",
            "synthetic": runtime.backend.synthetic,
            "condition": spec.condition,
            "replicate": spec.replicate,
            "agent_index": spec.index,
            # A written persona's name once the writer has answered (its own row included).
            "persona_name": persona_name(
                self.study.personas, levels, getattr(agent, "outputs", {}), spec.persona
            ),
            **levels,
            **{v: dict(spec.variables).get(v) for v in self.study.design.record},
            **dict(spec.persona.attributes),
        }
        bios = self.study.biographies
        if bios is not None and bios.factor in row:
            # The letter is about the biography's person: results name them.
            row["persona_name"] = biography_view(bios, spec)["name"]
        if self.pipeline:
            row["population"] = spec.population
            if isinstance(agent, Reading):
                shown = agent.evaluation.shown
                # A reading can be filtered and broken down like the documents it read.
                row.update(agent.evaluation.shared("levels"))
                row.update(
                    evaluation=agent.evaluation.id,
                    cluster=agent.evaluation.cluster,
                    reads="|".join(s.document.unit_id for s in shown),
                    shown="|".join(s.name or "" for s in shown),
                    variant=shown[0].variant or None,
                )
        trial = agent.trial(plan) if plan.pairing is not None else None
        if trial is not None:
            row.update(trial.columns())
        if response is None:
            # Not an error of this stage: reporting it as one would inflate the error rate of
            # groups whose earlier answers failed (a separate bias signal, counted there).
            row.update(
                status="skipped",
                valid=False,
                error=f"skipped: stage `{agent.failed_stage}` gave no valid answer",
            )
            return row
        if response.parsed is not None:
            row.update(response.parsed)
            if isinstance(row.get(SELECTED), list):
                row[SELECTED] = "|".join(str(label) for label in row[SELECTED])
        elif plan.schema is None and response.status != "error":
            row["text"] = response.text
        row.update(
            status=response.status,
            valid=response.status == "answered",
            raw_text=response.text,
            error=response.error,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            latency_s=response.latency_s,
            attempts=response.attempts,
            reasks=response.reasks,
            truncated=response.truncated,
            cached=response.from_store,
        )
        if plan.name in self._decisions:
            probabilities = response.probabilities
            row["probabilities"] = orjson.dumps(probabilities).decode() if probabilities else None
        return row


def _mark_set(row: dict[str, Any], agent: Any, plan: StagePlan, axis: str) -> None:
    """A counterfactual stage's row: its set (the agent's unit), the value it carries and the
    writer (the role and the model playing it)."""
    twin = isinstance(agent, CounterfactualTwin)
    row[cf_columns.SET] = (agent.original if twin else agent).unit(plan)
    # With `swap: name` a twin keeps the attributes: the value is the one its name stands for.
    row[cf_columns.SWAP] = agent.swap_value if twin else dict(agent.spec.persona.attributes)[axis]
    row[cf_columns.WRITER] = f"{plan.role}:{row[MODEL_LABEL]}"


@contextmanager
def collector_paused(paused: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off inside the block (when ``paused``), as it was after:
    reference counting still frees everything that is not in a cycle."""
    enabled = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused and enabled:
            gc.enable()


def _joined(labels: Any) -> str:
    return "|".join(str(label) for label in labels)


#: The request fields a role (or one of its models) sets: sampling parameters and endpoint.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "endpoint",
)


def sampling(role: RoleConfig) -> dict[str, Any]:
    """``role``'s values of :data:`SAMPLING_FIELDS`, as ``LLMRequest`` takes them."""
    values = {name: getattr(role, name) for name in SAMPLING_FIELDS}
    values["stop"] = tuple(role.stop) if role.stop else None
    return values


def _merge(completion: LLMResponse, extracted: LLMResponse | None) -> LLMResponse:
    """One answer from a completion and its extraction: the structure of the second, the raw
    text of the first (what the model wrote), the costs of both."""
    if extracted is None:
        return completion
    return replace(
        extracted,
        text=completion.text,
        prompt_tokens=completion.prompt_tokens + extracted.prompt_tokens,
        completion_tokens=completion.completion_tokens + extracted.completion_tokens,
        latency_s=completion.latency_s + extracted.latency_s,
        attempts=completion.attempts + extracted.attempts,
        reasks=completion.reasks + extracted.reasks,
        # A completion cut at its cap is what the formatter read: report it.
        truncated=completion.truncated or extracted.truncated,
        cached=completion.cached and extracted.cached,
        first_cached=completion.from_store and extracted.from_store,
    )


def _synthetic_keys(role: RoleConfig, axes: Mapping[str, Any]) -> tuple[str, ...]:
    """Design keys the role's synthetic truth reads beyond the persona axes (none on a real
    backend, which never sees them)."""
    if role.backend != "synthetic":
        return ()
    keys = (key for spec in role.synthetic.values() for key in spec.design_keys())
    # `item` is a word-pairing answer's own key, set per item shown (see SyntheticBackend).
    return tuple(dict.fromkeys(k for k in keys if k not in axes and k != "item"))
