"""Every distinct prompt a study sends, rendered as validation renders its templates: what
``biasim validate --show-prompts`` prints and what ``report.html`` shows per stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from biasim.simulator.common.errors import format_path
from biasim.simulator.common.yamlsource import FieldPath
from biasim.simulator.study.checks import dry_render
from biasim.simulator.study.config import Study


@dataclass
class RenderedPrompt:
    """One distinct text a template renders to.

    Attributes:
        stage: The stage it is sent in (``personas`` for the persona description).
        field: Where the template is, e.g. ``stages[0].prompt``.
        text: The rendered text.
        agents: The agents of the dry render that send this very text (persona and factor
            levels), first one first.
    """

    stage: str
    field: str
    text: str
    agents: list[str]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, for the run manifest (the report shows the prompts from there)."""
        return {"stage": self.stage, "field": self.field, "text": self.text, "agents": self.agents}


def _template_name(study: Study, path: FieldPath) -> str:
    """How a template is named: its field as the study file numbers it, for a policy's copy
    of a stage the policy, and for a stage loading adds (the persona writer's) what adds it."""
    if path[:1] == ("stages",) and isinstance(path[1], int):
        stage = study.config.stages[path[1]]
        rest = format_path(("x", *path[2:]))[1:]
        if stage.policy_of is not None:
            original, policy = stage.policy_of
            return f"policies.{policy}.stages.{original}{rest} (stage {stage.name})"
        writer = study.config.personas.writer
        if writer is not None and stage.name == writer.stage and path[1] == 0:
            return f"personas.writer{rest} (the persona writer's stage `{stage.name}`)"
    return study.source_map.field(path)


def distinct_prompts(study: Study) -> list[RenderedPrompt]:
    """Every distinct rendered text of every template, template by template in study order,
    for one persona of each axis value under each factor level (varied one at a time), as
    validation renders them."""
    found: dict[FieldPath, dict[str, RenderedPrompt]] = {}

    def keep(path: FieldPath, text: str, agent: Any) -> None:
        levels = ", ".join(f"{f}={lv}" for f, lv in agent.levels)
        who = (agent.persona.key or "no persona") + (f"; {levels}" if levels else "")
        texts = found.setdefault(path, {})
        if text not in texts:
            stage = study.config.stages[path[1]].name if path[0] == "stages" else str(path[0])
            texts[text] = RenderedPrompt(stage, _template_name(study, path), text, [])
        if who not in texts[text].agents:
            texts[text].agents.append(who)

    dry_render(study, keep)
    # Stage by stage, system message before prompt, whichever agent reached a stage first.
    parts = ("system", "prompt", "completion")
    order = sorted(found, key=lambda path: (path[1], parts.index(str(path[2])), path[3:]))
    return [prompt for path in order for prompt in found[path].values()]


#: Distinct texts of one template kept for the report (``validate --show-prompts`` has all).
PROMPTS_PER_FIELD = 3


def prompt_samples(study: Study) -> list[dict[str, Any]]:
    """The first :data:`PROMPTS_PER_FIELD` distinct texts of each template, each with how many
    distinct texts that template has (``of``), for the run manifest."""
    prompts = distinct_prompts(study)
    counts: dict[str, int] = {}
    for prompt in prompts:
        counts[prompt.field] = counts.get(prompt.field, 0) + 1
    kept: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for prompt in prompts:
        seen[prompt.field] = seen.get(prompt.field, 0) + 1
        if seen[prompt.field] <= PROMPTS_PER_FIELD:
            kept.append({**prompt.as_dict(), "of": counts[prompt.field]})
    return kept
