"""The common base of persona-endowed agents that act through language-model calls."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mesa

from biasim.personas import Persona
from biasim.simulator.llm.structured import OutputSchema, output_schema
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from biasim.simulator.study.design import AgentSpec, call_seed, template_context, unit_id
from biasim.simulator.study.pairing import PairingConfig, Trial, draw_trial
from biasim.simulator.study.templating import compile_expression, compile_template

if TYPE_CHECKING:
    from biasim.simulator.study.config import StudyConfig


@dataclass(frozen=True)
class StagePlan:
    """What agents need to act in one stage: templates, output contract, sampling parameters.

    Attributes:
        when: Expression deciding which agents take part (all when ``None``).
        shared: Design coordinates the answer does not depend on (see ``seed_id``).
        completion_prompt: Free-text prompt for completion models.
        extract: Extraction prompt a formatter answers for completion models (sees ``text``).
        formatter_role: Role of the formatter.
        replicate_seeds: Literal seed per replicate, instead of per-unit hashed seeds.
    """

    name: str
    role: str
    system: str | None
    prompt: str
    schema: OutputSchema | None
    #: Model label -> the request's sampling fields (``LLMRequest`` names) as that model of
    #: the stage's role samples; "" for a role one model plays (see ``sampling_for``).
    sampling: Mapping[str, Mapping[str, Any]]
    base_seed: int
    when: str | None = None
    shared: frozenset[str] = frozenset()
    completion_prompt: str | None = None
    extract: str | None = None
    formatter_role: str | None = None
    replicate_seeds: tuple[int, ...] | None = None
    #: Reading stages: documents each reader picks (pairs and pools) and the expression that
    #: decides whether a single reading advances its document.
    select: int | None = None
    advance: str | None = None
    #: Output fields (for choices that depend on template variables, see ``choices_from``).
    output: Mapping[str, Any] | None = None
    #: Whether choice fields are held to their choices (see ``StageConfig.forced_choice``).
    forced_choice: bool = True
    #: A word-pairing stage: what each call draws (targets and item order) from its seed.
    pairing: PairingConfig | None = None
    #: Model label -> design keys besides the persona axes that the role's synthetic truth
    #: reads (a factor, ``model_label``, ``persona_name``, ``persona``); empty for real models.
    synthetic_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Rendered messages and ``when`` results by template context. Templates are pure functions
    #: of their variables (the sandbox has no random filter), and agents sharing a persona and
    #: condition share a prompt.
    rendered: dict[tuple[Any, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    def sampling_for(self, label: str) -> Mapping[str, Any]:
        """The sampling of the model labelled ``label`` (the role's own when it has no models)."""
        return self.sampling.get(label) or self.sampling[""]


class LLMAgent(mesa.Agent):
    """An agent whose actions are answers from a language model.

    It composes one request per stage from its persona, its design levels and what it answered
    before, and keeps each stage's structured answer in ``outputs`` for later stages' templates.
    It never talks to a backend: the model collects every agent's request and dispatches them
    together.
    """

    def __init__(self, model: mesa.Model, spec: AgentSpec, study: StudyConfig) -> None:
        super().__init__(model)
        self.spec = spec
        self.study = study
        self.outputs: dict[str, dict[str, Any]] = {}
        self.failed_stage: str | None = None
        #: Template variables the model gives beyond the design (a market applicant's
        #: ``applicant`` and ``referrer``), and a hashable key of them for the render cache.
        self.extra_context: dict[str, Any] = {}
        self.extra_key: tuple[Any, ...] = ()

    @property
    def persona(self) -> Persona:
        """The agent's persona."""
        return self.spec.persona

    def unit(self, stage: StagePlan) -> str:
        """Stable id of this agent's work in ``stage``."""
        return unit_id(self.spec.agent_id, stage.name)

    def _key(self) -> tuple[Any, ...]:
        spec = self.spec
        return (
            spec.condition,
            spec.model_label,
            spec.persona,
            spec.replicate,
            _freeze(self.outputs),
            self.extra_key,
        )

    def _context(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        context = template_context(self.study, self.spec, self.outputs)
        if self.extra_context:
            context = {**context, **self.extra_context}
        return {**context, **extra} if extra else context

    def takes_part(self, stage: StagePlan) -> bool:
        """Whether the stage's ``when`` expression holds for this agent."""
        if stage.when is None:
            return True
        key = ("when", *self._key())
        hit = stage.rendered.get(key)
        if hit is None:
            hit = bool(compile_expression(stage.when)(self._context()))
            stage.rendered[key] = hit
        return hit

    def schema(self, stage: StagePlan) -> OutputSchema | None:
        """The stage's output contract for this agent (choices may come from its variables)."""
        if stage.schema is not None or not stage.output:
            return stage.schema  # fixed choices: one schema for every agent, built once
        dynamic = {n: f for n, f in stage.output.items() if f.choices_from}
        context = self._context()
        choices = tuple(
            tuple(c.strip() for c in str(context[f.choices_from]).split("|") if c.strip())
            for f in dynamic.values()
        )
        key = ("schema", choices)
        hit = stage.rendered.get(key)
        if hit is None:
            fields = dict(stage.output or {})
            for (name, spec), options in zip(dynamic.items(), choices, strict=True):
                fields[name] = spec.model_copy(update={"choices": list(options)})
            hit = output_schema(fields, forced=stage.forced_choice)
            stage.rendered[key] = hit
        return hit

    def compose(
        self,
        stage: StagePlan,
        *,
        part: str = "prompt",
        text: str | None = None,
    ) -> LLMRequest | None:
        """The request for ``stage``, or ``None`` when an earlier stage left nothing to build on.

        Args:
            stage: The stage.
            part: ``prompt`` (structured answer), ``completion`` (free text, for completion
                models) or ``extract`` (the formatter's request, with the completion as ``text``).
            text: The completion, for ``extract``.
        """
        if self.failed_stage is not None:
            return None
        spec = self.spec
        if stage.replicate_seeds is not None:
            seed = stage.replicate_seeds[spec.replicate]
        else:
            seed = call_seed(stage.base_seed, unit_id(spec.seed_id(stage.shared), stage.name))
        trial = self.trial(stage)
        shown: tuple[tuple[tuple[str, str], ...], ...] = ()
        if trial is not None:
            axis = stage.pairing.targets.axis  # type: ignore[union-attr]
            shown = tuple(((axis, value), ("name", name)) for name, value in trial.targets)
            # Every call shows its own draw: the prompt is not shared with other agents.
            messages = render_messages(stage, part, self._context(trial.context()), text)
        else:
            key = (part, text, *self._key())
            messages = stage.rendered.get(key)
            if messages is None:
                messages = render_messages(stage, part, self._context(), text)
                stage.rendered[key] = messages
        schema = self.schema(stage) if part != "completion" else None
        return LLMRequest(
            messages=messages,
            seed=seed,
            json_schema=schema.json_schema if schema is not None else None,
            replicate=spec.replicate,
            attributes=spec.persona.attributes + self._design_keys(stage),
            shown=shown,
            items=trial.items if trial is not None else (),
            picks=stage.pairing.picks if stage.pairing is not None else 1,
            **stage.sampling_for(spec.model_label),
        )

    def trial(self, stage: StagePlan) -> Trial | None:
        """What this agent's call in a pairing ``stage`` shows (``None`` in other stages): drawn
        from a seed of the unit alone, so the prompt, not the sampling seed, carries it."""
        if stage.pairing is None:
            return None
        return draw_trial(
            stage.pairing,
            self._context(),
            call_seed(
                stage.base_seed, "trial/" + unit_id(self.spec.seed_id(stage.shared), stage.name)
            ),
        )

    def _design_keys(self, stage: StagePlan) -> tuple[tuple[str, str], ...]:
        """The design values a synthetic truth is keyed on besides the persona's attributes
        (none for real models, so their requests and cache keys stay as they were)."""
        keys = stage.synthetic_keys.get(self.spec.model_label, ())
        if not keys:
            return ()
        spec = self.spec
        known = {
            **dict(spec.levels),
            "model_label": spec.model_label,
            "persona_name": spec.persona.name or "",
            "persona": f"{spec.persona.key}/{spec.index}",
            "world": str(stage.base_seed),
        }
        return tuple((key, str(known.get(key, ""))) for key in keys)

    def observe(self, stage: StagePlan, response: LLMResponse | None) -> None:
        """Take in the answer to ``stage`` (``None`` when the stage was skipped)."""
        if response is None or response.status != "answered":
            self.failed_stage = self.failed_stage or stage.name
            return
        self.outputs[stage.name] = (
            response.parsed if response.parsed is not None else {"text": response.text}
        )


def render_messages(
    stage: StagePlan, part: str, context: dict[str, Any], text: str | None = None
) -> tuple[dict[str, str], ...]:
    """The chat messages of ``stage``'s ``part`` (see :meth:`LLMAgent.compose`) in ``context``."""
    if part == "extract":
        context = {**context, "text": text}
    source = {
        "prompt": stage.prompt,
        "completion": stage.completion_prompt,
        "extract": stage.extract,
    }[part]
    parts = [("system", stage.system if part != "extract" else None), ("user", source)]
    return tuple(
        {"role": role, "content": compile_template(src).render(context)}
        for role, src in parts
        if src is not None
    )


def _freeze(outputs: dict[str, dict[str, Any]]) -> tuple[Any, ...]:
    return tuple((stage, tuple(sorted(answer.items()))) for stage, answer in outputs.items())
