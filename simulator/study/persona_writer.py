"""Generated personas (``personas.source: generated``) and persona ablations.

A persona writer is an ordinary stage: the study file names the role and, optionally, the prompt
(``personas.writer``), and loading puts that stage first. Its answers, ``{name, persona}``, are
then stored, cached, resumed and cast per model like every other call, and later stages see
them as the agent's ``persona.name`` and ``persona.description``. The stage is shared across
every design factor its prompt does not read, so one persona per agent meets every scenario
and every ablation condition (the paper's non-contextualized persona reused across scenarios).

An ablation (``personas.ablation: [attribute, name, generated]``) is a design factor,
``persona_source``: each agent acts once under each condition, with the persona made of the
attribute text only, of the written name only, or of the written persona.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateSyntaxError

from biasim.personas import Persona
from biasim.simulator.common.yamlsource import FieldPath, SourceMap
from biasim.simulator.study.personas import ABLATION_FACTOR, SEED004_PERSONA_PROMPT, PersonaConfig
from biasim.simulator.study.templating import template_variables

#: What the writer answers.
WRITER_OUTPUT = {"name": {"type": "string"}, "persona": {"type": "string"}}


def _writer(data: Any) -> dict[str, Any] | None:
    """The raw ``personas.writer`` of a generated-persona study (None otherwise)."""
    personas = data.get("personas") if isinstance(data, dict) else None
    if not isinstance(personas, dict) or personas.get("source") != "generated":
        return None
    writer = personas.get("writer")
    if not isinstance(writer, dict) or not isinstance(writer.get("role"), str):
        return None  # the schema reports what is missing
    return writer


def _shared_factors(prompt: str, factors: dict[str, Any]) -> list[str]:
    """Factors the writer's prompt reads neither by name nor through a level's variables."""
    try:
        read = template_variables(prompt)
    except TemplateSyntaxError:
        return []  # validation reports the syntax error; share nothing meanwhile
    if "condition" in read:
        return []
    shared = []
    for name, levels in factors.items():
        variables = {v for lv in (levels or {}).values() if isinstance(lv, dict) for v in lv}
        if name not in read and not variables & read:
            shared.append(name)
    return shared


def expand_generated(data: Any, smap: SourceMap) -> tuple[Any, SourceMap]:
    """Add the persona writer's stage (first) and the ablation factor to a loaded study.

    Returns the document and a source map whose paths still name what the user wrote: the
    writer's stage is located at ``personas.writer``, the user's stages keep their indices.
    """
    writer = _writer(data)
    if writer is None:
        return data, smap
    data = copy.deepcopy(data)
    ablation = data["personas"].get("ablation")
    design = data.get("design")
    factors = design.get("factors", {}) if isinstance(design, dict) else None
    if isinstance(factors, dict) and isinstance(ablation, list) and ABLATION_FACTOR not in factors:
        design["factors"] = {**factors, ABLATION_FACTOR: {str(level): {} for level in ablation}}
        factors = design["factors"]
    stage_name = writer.get("stage", "persona")
    prompt = writer.get("prompt")
    if not isinstance(prompt, str):
        prompt = SEED004_PERSONA_PROMPT
    stage: dict[str, Any] = {
        "name": stage_name,
        "role": writer["role"],
        "prompt": prompt,
        "output": copy.deepcopy(WRITER_OUTPUT),
        "shared_across": _shared_factors(prompt, factors if isinstance(factors, dict) else {}),
    }
    if isinstance(ablation, list) and "attribute" in ablation:
        stage["when"] = f"{ABLATION_FACTOR} != 'attribute'"
    if isinstance(data.get("stages"), list):  # otherwise the schema reports the stages
        data["stages"] = [stage, *data["stages"]]
    return data, WriterSourceMap(smap.locations, smap.default_file, smap.text_lines)


def collapse_generated(resolved: dict[str, Any]) -> dict[str, Any]:
    """The resolved study as the user declared it: without the writer's stage and the
    ablation factor that loading adds (loading the result adds them again)."""
    writer = _writer(resolved)
    if writer is None:
        return resolved
    out = copy.deepcopy(resolved)
    out["stages"] = out["stages"][1:]
    if out["personas"].get("ablation"):
        out["design"]["factors"].pop(ABLATION_FACTOR, None)
    return out


@dataclass
class WriterSourceMap(SourceMap):
    """Source map of a study whose first stage is the persona writer's: ``stages[0]`` is
    ``personas.writer`` and ``stages[i]`` is the user's ``stages[i - 1]``, in locations and
    in the field names of problems."""

    def _plain(self) -> SourceMap:
        return SourceMap(self.locations, self.default_file, self.text_lines)

    def field(self, path: FieldPath) -> str:
        return super().field(_translate(path))

    def locate(self, path: FieldPath) -> tuple[str, int | None]:
        return self._plain().locate(_translate(path))

    def text_line(self, path: FieldPath, line_in_text: int) -> tuple[str, int | None]:
        return self._plain().text_line(_translate(path), line_in_text)


def _translate(path: FieldPath) -> FieldPath:
    if len(path) < 2 or path[0] != "stages" or not isinstance(path[1], int):
        return path
    if path[1] == 0:
        rest = path[2:3] if path[2:3] in (("prompt",), ("role",)) else ()
        return ("personas", "writer", *rest)
    return ("stages", path[1] - 1, *path[2:])


def persona_view(
    personas: PersonaConfig,
    levels: dict[str, str],
    outputs: dict[str, dict[str, Any]],
    persona: Persona,
) -> dict[str, Any]:
    """The ``persona`` templates see: the written persona once the writer has answered, under
    the agent's ablation condition (the attribute text alone before that, and under
    ``attribute``)."""
    view = persona.context()
    written = _written(personas, levels, outputs)
    if written is None:
        return view
    name = written.get("name")
    source = levels.get(ABLATION_FACTOR, "generated")
    return {**view, "name": name, "description": name if source == "name" else written["persona"]}


def persona_name(
    personas: PersonaConfig,
    levels: dict[str, str],
    outputs: dict[str, dict[str, Any]],
    persona: Persona,
) -> str | None:
    """``persona_view(...)["name"]`` without building the view (every results row names it)."""
    written = _written(personas, levels, outputs)
    return persona.name if written is None else written.get("name")


def _written(
    personas: PersonaConfig, levels: dict[str, str], outputs: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The writer's answer the agent's persona is read from (``None`` before it answered, with
    no writer, and under the ``attribute`` condition)."""
    writer = personas.writer
    written = outputs.get(writer.stage) if writer is not None else None
    if written is None or levels.get(ABLATION_FACTOR, "generated") == "attribute":
        return None
    return written


def writes_no_persona(config: Any, stage: Any) -> bool:
    """Whether ``stage`` is the persona writer's, skipped by the ``when`` loading gives it
    under the ablation's ``attribute`` condition (no `when` the user wrote)."""
    writer = config.personas.writer
    return writer is not None and stage.name == writer.stage and stage.when is not None


#: How an ablation's implicit skip is named wherever skipped units are counted.
ABLATION_SKIP = "the persona writer does not run under the ablation's `attribute` condition"


def skip_causes(config: Any) -> str:
    """What leaves units of ``config`` without a call, in words: validate, the stop message
    and the report name the same causes (an ablation's implicit skip as what it is)."""
    causes = []
    if any(s.when is not None and not writes_no_persona(config, s) for s in config.stages):
        causes.append("a `when` was false")
    if any(writes_no_persona(config, s) for s in config.stages):
        causes.append(ABLATION_SKIP)
    if config.populations:
        causes.append("nothing to read")
    return " or ".join(causes) or "an earlier stage failed"
