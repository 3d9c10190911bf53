"""Help for writing a study: a commented skeleton to start from (``biasim init``) and every
distinct prompt the study sends, rendered (``biasim validate --show-prompts``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from biasim.simulator.common.errors import InputError, Problem, format_path
from biasim.simulator.common.yamlsource import FieldPath
from biasim.simulator.study.checks import dry_render
from biasim.simulator.study.config import Study
from biasim.simulator.study.fields import IDENTIFIER_PATTERN
from biasim.simulator.study.hints import pattern_message

SKELETON = "study_skeleton.yaml"


def skeleton(name: str) -> str:
    """The commented study skeleton named ``name``.

    Raises:
        InputError: ``name`` is not a valid study name.
    """
    if not re.fullmatch(IDENTIFIER_PATTERN, name):
        raise InputError([Problem("NAME", None, "", pattern_message(name, IDENTIFIER_PATTERN))])
    text = (resources.files("biasim.scenarios") / "data" / SKELETON).read_text(encoding="utf-8")
    return Template(text).substitute(name=name)


def write_skeleton(name: str, path: Path) -> Path:
    """Write the skeleton to ``path``, never over an existing file.

    Raises:
        InputError: Bad name, or ``path`` exists.
    """
    text = skeleton(name)
    if path.exists():
        raise InputError(
            [
                Problem(
                    str(path), None, "", "already exists; not overwritten (another NAME or --out)"
                )
            ]
        )
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise InputError([Problem(str(path), None, "", f"cannot write: {exc}")]) from None
    return path


@dataclass
class RenderedPrompt:
    """One distinct text a template renders to.

    Attributes:
        field: Where the template is, e.g. ``stages[0].prompt``.
        text: The rendered text.
        agents: The agents of the dry render that send this very text (persona and factor
            levels), first one first.
    """

    field: str
    text: str
    agents: list[str]


def _template_name(study: Study, path: FieldPath) -> str:
    """How a template is named: its field, or for a policy's copy of a stage, the policy."""
    if path[:1] == ("stages",) and isinstance(path[1], int):
        stage = study.config.stages[path[1]]
        if stage.policy_of is not None:
            original, policy = stage.policy_of
            rest = format_path(("x", *path[2:]))[1:]
            return f"policies.{policy}.stages.{original}{rest} (stage {stage.name})"
    return format_path(path)


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
            texts[text] = RenderedPrompt(_template_name(study, path), text, [])
        if who not in texts[text].agents:
            texts[text].agents.append(who)

    dry_render(study, keep)
    # Stage by stage, system message before prompt, whichever agent reached a stage first.
    parts = ("system", "prompt", "completion")
    order = sorted(found, key=lambda path: (path[1], parts.index(str(path[2])), path[3:]))
    return [prompt for path in order for prompt in found[path].values()]
