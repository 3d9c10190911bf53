"""The study file schema (pydantic v2) and its loading: ``extends:``, overrides, full validation.

A study is validated in three passes, each reporting every problem it finds with file, line and
field: the YAML itself, the schema, then cross-references and a dry render of every template.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from jinja2 import TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .columns import RESERVED as RESERVED_COLUMNS
from .errors import InputError, Problem
from .templating import compile_template, render
from .yamlsource import FieldPath, SourceMap, deep_merge, load_yaml

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticField(_Strict):
    """How the synthetic responder fills one output field (ground truth, not a language model)."""

    by: str | None = Field(None, description="Persona axis whose value selects the probabilities.")
    probabilities: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Axis value -> {choice: probability}. Values not listed use `default`.",
    )
    default: dict[str, float] | None = Field(
        None, description="{choice: probability} for unlisted values; uniform when absent."
    )
    text: str | None = Field(None, description="Literal text for string fields.")

    @model_validator(mode="after")
    def _sums_to_one(self) -> SyntheticField:
        tables = list(self.probabilities.values()) + ([self.default] if self.default else [])
        for table in tables:
            if any(p < 0 for p in table.values()) or abs(sum(table.values()) - 1.0) > 1e-6:
                raise ValueError("probabilities must be non-negative and sum to 1")
        if self.probabilities and not self.by:
            raise ValueError("`by` must name the persona axis the probabilities are keyed on")
        return self


class RoleConfig(_Strict):
    """Which backend and model play a role, and how they sample."""

    backend: str = Field("local", description="Backend name from the registry.")
    model: str | None = Field(None, description="Model id; the backend's default when absent.")
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1, le=32768)
    seed: int | None = Field(
        None, description="Base seed; each call's seed is derived from it and the unit id."
    )
    max_concurrency: int | None = Field(
        None, ge=1, le=4096, description="Upper bound on calls in flight (adapts below it)."
    )
    max_attempts: int = Field(5, ge=1, le=50, description="Attempts per call, the first included.")
    timeout_s: float = Field(120.0, gt=0, description="Per-attempt timeout.")
    total_timeout_s: float = Field(600.0, gt=0, description="Budget for all attempts of a call.")
    backoff_s: float = Field(
        0.5, ge=0, description="First retry backoff; doubles per attempt, full jitter."
    )
    max_backoff_s: float = Field(30.0, ge=0, description="Cap on one backoff.")
    requests_per_minute: float | None = Field(None, gt=0)
    tokens_per_minute: float | None = Field(None, gt=0)
    reask: bool = Field(True, description="Re-ask once, quoting the error, after invalid output.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific options (model_path, base_url, ...)."
    )
    synthetic: dict[str, SyntheticField] = Field(
        default_factory=dict, description="Only for backend `synthetic`: field -> responder."
    )

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, options: dict[str, Any]) -> dict[str, Any]:
        for key in options:
            if key.lower() in {"api_key", "apikey", "token", "password", "secret"}:
                raise ValueError(
                    f"`{key}` may not be written in a study file; name the environment variable "
                    "that holds it with `api_key_env`"
                )
        return options


class OutputField(_Strict):
    """One field of a structured answer."""

    type: Literal["choice", "string", "integer", "number", "boolean"] = "string"
    choices: list[str] | None = None
    description: str | None = None
    max_length: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _choices_match_type(self) -> OutputField:
        if self.type == "choice" and not self.choices:
            raise ValueError("a `choice` field needs a non-empty `choices` list")
        if self.type != "choice" and self.choices:
            raise ValueError("`choices` is only allowed on fields of type `choice`")
        return self


class StageConfig(_Strict):
    """One model step: every agent sends one request rendered from these templates."""

    name: Identifier
    role: str
    system: str | None = Field(None, description="System message template.")
    prompt: str = Field(description="User message template (Jinja2, sandboxed, strict).")
    output: dict[Identifier, OutputField] | None = Field(
        None, description="Structured answer fields; free text when absent."
    )


class PersonaConfig(_Strict):
    """Persona axes and where each agent's persona comes from."""

    axes: dict[Identifier, list[str]] = Field(min_length=1)
    source: Literal["attribute", "name_bank", "generated"] = "attribute"
    cross: bool = Field(True, description="Cross the axes (intersectional) or vary one at a time.")
    description: str = Field(
        "{% for k, v in attributes.items() %}{{ k }}: {{ v }}{% if not loop.last %}; "
        "{% endif %}{% endfor %}",
        description="Template of the persona text; sees `attributes` and each axis by name.",
    )
    names: dict[str, list[str]] = Field(
        default_factory=dict,
        description="For source `name_bank`: attribute key ('female', or 'White/female' for "
        "crossed axes in axis order) -> names, assigned to agents in turn.",
    )

    @field_validator("axes")
    @classmethod
    def _values(cls, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        for axis, values in axes.items():
            if not values:
                raise ValueError(f"axis `{axis}` has no values")
            if len(set(values)) != len(values):
                raise ValueError(f"axis `{axis}` lists a value twice")
        return axes


class DesignConfig(_Strict):
    """How many agents, replicates and conditions."""

    agents_per_value: int = Field(
        ge=1, description="Agents per persona (per axis value, or per combination when crossed)."
    )
    replicates: int = Field(1, ge=1, description="Times each agent acts in each stage.")
    conditions: dict[Identifier, dict[Identifier, str]] = Field(
        default_factory=lambda: {"default": {}},
        description="Condition name -> literal text variables available to templates.",
        min_length=1,
    )


class AnalysisConfig(_Strict):
    """An analysis the report runs over the results."""

    kind: Literal["demographic_parity"] = "demographic_parity"
    stage: str
    field: str
    target: str = Field(description="The targeted decision whose rate is compared.")
    by: list[str] | str = Field(description="Persona axis (or axes) defining groups.")
    alpha: float = Field(0.05, gt=0, lt=1)
    n_simulations: int = Field(10_000, ge=100)

    @property
    def groups(self) -> list[str]:
        """The grouping axes as a list."""
        return [self.by] if isinstance(self.by, str) else list(self.by)


class StudyConfig(_Strict):
    """A whole study file."""

    name: Identifier
    description: str
    source: str | None = Field(None, description="Citation of the stimuli (seed paper, appendix).")
    seed: int = 0
    vars: dict[Identifier, str] = Field(
        default_factory=dict, description="Literal texts available to every template by name."
    )
    roles: dict[Identifier, RoleConfig] = Field(min_length=1)
    personas: PersonaConfig
    stages: list[StageConfig] = Field(min_length=1)
    design: DesignConfig
    analyses: list[AnalysisConfig] = Field(default_factory=list)


@dataclass(frozen=True)
class Study:
    """A validated study with the provenance of its fields."""

    config: StudyConfig
    resolved: dict[str, Any]
    source_map: SourceMap
    path: str


def study_json_schema() -> dict[str, Any]:
    """The JSON Schema of study files, for editors."""
    schema = StudyConfig.model_json_schema()
    schema["properties"]["extends"] = {
        "type": "string",
        "description": "Built-in study name or path this file overrides.",
    }
    return schema


@dataclass(frozen=True)
class Override:
    """A command-line option that replaces one field of the study.

    Attributes:
        option: The option as typed, e.g. ``--agents``; errors name it instead of a file line.
        path: Field path it sets, e.g. ``("design", "agents_per_value")``; ``"*"`` matches
            every key at that level, e.g. ``("roles", "*", "backend")``.
        value: New value.
        drop: Sibling keys to remove (options of a backend the role no longer uses).
    """

    option: str
    path: FieldPath
    value: Any
    drop: tuple[str, ...] = ()

    def paths(self, data: dict[str, Any]) -> list[FieldPath]:
        """Concrete paths: a ``"*"`` part stands for every key of that mapping (every role)."""
        found: list[FieldPath] = [()]
        for part in self.path[:-1]:
            expanded: list[FieldPath] = []
            for prefix in found:
                node = _get_path(data, prefix)
                if part == "*":
                    keys = list(node) if isinstance(node, dict) else []
                    expanded.extend((*prefix, key) for key in keys)
                else:
                    expanded.append((*prefix, part))
            found = expanded
        return [(*prefix, self.path[-1]) for prefix in found]

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """Return a copy of ``data`` with the override in place at each of its paths."""
        out = copy.deepcopy(data)
        for path in self.paths(data):
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
            node[path[-1]] = self.value
            for key in self.drop:
                node.pop(key, None)
        return out


def _get_path(data: Any, path: FieldPath) -> Any:
    for part in path:
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def load_study(
    ref: str | Path,
    overrides: list[Override] | None = None,
    *,
    check_backends: bool = True,
) -> Study:
    """Load, merge (``extends:``), override and fully validate a study.

    Args:
        ref: A file path or the name of a built-in study.
        overrides: Command-line overrides; problems they cause name the option.
        check_backends: Also check that every role's backend is registered.

    Raises:
        InputError: Listing every problem with file, line and field.
    """
    data, smap, path = _load_with_extends(ref, ())
    return validate_study(data, smap, path, overrides, check_backends=check_backends)


def validate_study(
    data: dict[str, Any],
    smap: SourceMap,
    path: str,
    overrides: list[Override] | None = None,
    *,
    check_backends: bool = True,
) -> Study:
    """Apply command-line overrides to a loaded document and validate it fully.

    Raises:
        InputError: Listing every problem with file, line and field.
    """
    for override in overrides or []:
        paths = override.paths(data)
        data = override.apply(data)
        located = SourceMap({path: (override.option, 0) for path in paths}, smap.default_file)
        smap = smap.overlay(located, data)
    try:
        config = StudyConfig.model_validate(data)
    except ValidationError as exc:
        raise InputError(
            [smap.problem(tuple(e["loc"]), _pydantic_message(e)) for e in exc.errors()]
        ) from None
    problems = check_study(config, smap, check_backends=check_backends)
    if problems:
        raise InputError(problems)
    return Study(config=config, resolved=config.model_dump(mode="json"), source_map=smap, path=path)


def _pydantic_message(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    return str(error["msg"]).removeprefix("Value error, ")


def _load_with_extends(ref: str | Path, chain: tuple[str, ...]) -> tuple[Any, SourceMap, str]:
    from scenarios import builtin_path

    path = Path(ref)
    if not path.exists():
        found = builtin_path(str(ref))
        if found is None:
            raise InputError(f"{ref}: no such file and no built-in study of that name")
        path = found
    label = str(path)
    if label in chain:
        raise InputError(f"{label}: `extends` forms a cycle: {' -> '.join((*chain, label))}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{label}: cannot read study file: {exc}") from None
    data, smap = load_yaml(text, label)
    if not isinstance(data, dict):
        raise InputError([Problem(label, 1, "", "a study file must be a YAML mapping")])
    parent = data.pop("extends", None)
    if parent is None:
        return data, smap, label
    if not isinstance(parent, str):
        raise InputError([smap.problem(("extends",), "must be a study name or a path")])
    parent_ref = parent
    if not Path(parent).is_absolute() and (path.parent / parent).exists():
        parent_ref = str(path.parent / parent)
    try:
        base, base_map, _ = _load_with_extends(parent_ref, (*chain, label))
    except InputError as exc:
        if len(exc.problems) == 1 and exc.problems[0].line is None:
            raise InputError([smap.problem(("extends",), exc.problems[0].message)]) from None
        raise
    merged = deep_merge(base, data)
    return merged, base_map.overlay(smap, merged), label


# --- cross-reference checks and dry render --------------------------------------------------


def check_study(config: StudyConfig, smap: SourceMap, *, check_backends: bool) -> list[Problem]:
    """Check what the schema alone cannot: references between sections, and every template."""
    problems: list[Problem] = []
    add = problems.append
    axes = config.personas.axes
    from .llm.registry import backend_names

    known_backends = backend_names()
    if check_backends:
        for name, role in config.roles.items():
            if role.backend not in known_backends:
                add(
                    smap.problem(
                        ("roles", name, "backend"),
                        f"unknown backend `{role.backend}`; known: {', '.join(known_backends)}",
                    )
                )
    for name, role in config.roles.items():
        if role.synthetic and role.backend != "synthetic" and role.backend in known_backends:
            add(smap.problem(("roles", name, "synthetic"), "only allowed with backend `synthetic`"))
        for fname, spec in role.synthetic.items():
            if spec.by and spec.by not in axes:
                add(
                    smap.problem(
                        ("roles", name, "synthetic", fname, "by"),
                        f"`{spec.by}` is not a persona axis",
                    )
                )
            elif spec.by:
                for value in spec.probabilities:
                    if value not in axes[spec.by]:
                        add(
                            smap.problem(
                                ("roles", name, "synthetic", fname, "probabilities", value),
                                f"`{value}` is not a value of axis `{spec.by}`",
                            )
                        )
    clashes = (set(axes) | set(config.vars)) & RESERVED_COLUMNS
    for clash in sorted(clashes):
        add(
            smap.problem(
                ("personas", "axes", clash) if clash in axes else ("vars", clash),
                f"`{clash}` is a reserved name",
            )
        )
    for var in sorted(set(axes) & set(config.vars)):
        add(smap.problem(("vars", var), f"`{var}` is also a persona axis"))
    for cname, cvars in config.design.conditions.items():
        for var in sorted(set(cvars) & (set(axes) | RESERVED_COLUMNS)):
            add(smap.problem(("design", "conditions", cname, var), f"`{var}` is a reserved name"))

    if config.personas.source == "generated":
        add(
            smap.problem(
                ("personas", "source"),
                "LLM-generated personas are not available in this version; use "
                "`attribute` or `name_bank`",
            )
        )
    if config.personas.source == "name_bank":
        for key in _persona_keys(config):
            if not config.personas.names.get(key):
                add(smap.problem(("personas", "names"), f"no names for `{key}`"))

    stage_names: list[str] = []
    stage_fields: dict[str, dict[str, OutputField]] = {}
    for i, stage in enumerate(config.stages):
        if stage.role not in config.roles:
            add(smap.problem(("stages", i, "role"), f"no role named `{stage.role}`"))
        if stage.name in stage_names:
            add(smap.problem(("stages", i, "name"), f"stage `{stage.name}` is declared twice"))
        for fname in stage.output or {}:
            if fname in RESERVED_COLUMNS or fname in axes:
                add(smap.problem(("stages", i, "output", fname), f"`{fname}` is a reserved name"))
        stage_names.append(stage.name)
        stage_fields[stage.name] = dict(stage.output or {})
        role = config.roles.get(stage.role)
        if role is not None:
            for fname, spec in role.synthetic.items():
                field_spec = (stage.output or {}).get(fname)
                if field_spec is None or not field_spec.choices:
                    continue
                tables = [*spec.probabilities.values(), *([spec.default] if spec.default else [])]
                for table in tables:
                    extra = set(table) - set(field_spec.choices)
                    if extra:
                        add(
                            smap.problem(
                                ("roles", stage.role, "synthetic", fname),
                                f"{sorted(extra)} are not choices of `{fname}`",
                            )
                        )

    for i, analysis in enumerate(config.analyses):
        loc = ("analyses", i)
        fields = stage_fields.get(analysis.stage)
        if fields is None:
            add(smap.problem((*loc, "stage"), f"no stage named `{analysis.stage}`"))
        elif analysis.field not in fields:
            add(
                smap.problem(
                    (*loc, "field"),
                    f"stage `{analysis.stage}` has no output field `{analysis.field}`",
                )
            )
        elif (
            fields[analysis.field].choices and analysis.target not in fields[analysis.field].choices
        ):
            add(
                smap.problem(
                    (*loc, "target"),
                    f"`{analysis.target}` is not one of {fields[analysis.field].choices}",
                )
            )
        for axis in analysis.groups:
            if axis not in axes:
                add(smap.problem((*loc, "by"), f"`{axis}` is not a persona axis"))

    problems.extend(_check_templates(config, smap, stage_fields))
    return problems


def _persona_keys(config: StudyConfig) -> list[str]:
    from personas import persona_keys

    return persona_keys(config.personas.axes, cross=config.personas.cross)


def _check_templates(
    config: StudyConfig, smap: SourceMap, stage_fields: dict[str, dict[str, OutputField]]
) -> list[Problem]:
    """Render every template once per condition, for one persona of each axis value."""
    from personas import build_personas

    problems: list[Problem] = []
    templates: list[tuple[FieldPath, str]] = [
        (("personas", "description"), config.personas.description)
    ]
    for i, stage in enumerate(config.stages):
        if stage.system is not None:
            templates.append((("stages", i, "system"), stage.system))
        templates.append((("stages", i, "prompt"), stage.prompt))
    broken: set[FieldPath] = set()
    for path, source in templates:
        try:
            compile_template(source)
        except TemplateSyntaxError as exc:
            file, line = smap.text_line(path, exc.lineno)
            problems.append(
                Problem(file, line, _fmt(path), f"template syntax error: {exc.message}")
            )
            broken.add(path)
    if broken:
        return problems
    try:
        personas = build_personas(config.personas, 1, render)
    except (UndefinedError, SecurityError, TypeError) as exc:
        problems.append(_render_problem(smap, ("personas", "description"), exc))
        return problems
    from .design import template_context

    seen: set[tuple[FieldPath, str]] = set()
    for cname, cvars in config.design.conditions.items():
        outputs: dict[str, dict[str, Any]] = {}
        for i, stage in enumerate(config.stages):
            for persona in personas:
                ctx = template_context(config, cname, cvars, persona, 0, outputs)
                for part in ("system", "prompt"):
                    source = getattr(stage, part)
                    if source is None:
                        continue
                    try:
                        compile_template(source).render(ctx)
                    except (UndefinedError, SecurityError, TypeError, ValueError) as exc:
                        problem = _render_problem(smap, ("stages", i, part), exc)
                        if ((("stages", i, part)), problem.message) not in seen:
                            seen.add((("stages", i, part), problem.message))
                            problems.append(problem)
            outputs[stage.name] = {
                f: _placeholder(spec) for f, spec in stage_fields[stage.name].items()
            }
            if not stage_fields[stage.name]:
                outputs[stage.name] = {"text": "text"}
    return problems


def _placeholder(spec: OutputField) -> Any:
    return {
        "choice": (spec.choices or [""])[0],
        "string": "text",
        "integer": 0,
        "number": 0.0,
        "boolean": True,
    }[spec.type]


def _render_problem(smap: SourceMap, path: FieldPath, exc: Exception) -> Problem:
    lineno = _template_lineno(exc)
    file, line = smap.text_line(path, lineno) if lineno else smap.locate(path)
    message = str(exc)
    if isinstance(exc, UndefinedError):
        match = re.search(r"'([^']+)' is undefined", message)
        message = f"template variable `{match.group(1)}` does not exist" if match else message
    elif isinstance(exc, SecurityError):
        message = f"template does something the sandbox forbids: {message}"
    return Problem(file, line, _fmt(path), message)


def _template_lineno(exc: Exception) -> int | None:
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


def _fmt(path: FieldPath) -> str:
    from .errors import format_path

    return format_path(path)
