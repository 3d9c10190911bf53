"""The study file schema (pydantic v2) and its loading: ``extends:``, overrides, full validation.

A study is validated in three passes, each reporting every problem it finds with file, line and
field: the YAML itself, the schema, then cross-references and a dry render of every template.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from jinja2 import TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError
from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from biasim.personas.namebank import NameBankError, load_name_bank

from .biography_config import BiographiesConfig, read_biography_section
from .columns import CALL_COLUMNS, ID_COLUMNS, PAIRING_COLUMNS, PIPELINE_COLUMNS
from .columns import RESERVED as RESERVED_COLUMNS
from .errors import InputError, Problem
from .fields import LABEL_PATTERN, Identifier, LevelName, Strict
from .hints import nearest, pattern_message, synthetic_hint, undefined_message
from .kinds import DEFAULT_KIND, AnalysisSpec, StudyFacts, UnknownKind, get_kind, kind_names
from .pairing import PairingConfig, check_pairing, draw_trial, pool, read_items
from .persona_config import ABLATION_FACTOR, PersonaConfig
from .persona_writer import collapse_generated, expand_generated
from .populations import PopulationConfig, ReadsConfig, stage_population
from .templating import RENDER_ERRORS, compile_expression, compile_template, render
from .yamlsource import MAX_STUDY_BYTES, FieldPath, SourceMap, deep_merge, load_yaml


class SyntheticField(Strict):
    """How the synthetic responder fills one output field (ground truth, not a language model)."""

    by: str | list[str] | None = Field(
        None,
        description="What selects the probabilities: a persona axis, a design factor (e.g. a "
        "condition or the role) or `model_label`; a list keys them by combination, written "
        "`value|value` (e.g. `by: [race, gender]`, key `Black|female`).",
    )
    probabilities: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Value of `by` -> {choice: probability}. Values not listed use `default`.",
    )
    default: dict[str, float] | None = Field(
        None, description="{choice: probability} for unlisted values; uniform when absent."
    )
    text: str | None = Field(None, description="Literal text for string fields.")
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="For `selected` (pair and pool readers): axis value -> weight of a shown "
        "document whose author has it (1 when unlisted); the k picked are drawn without "
        "replacement with probability proportional to weight.",
    )
    positions: list[float] | None = Field(
        None,
        description="For `selected`: weight multiplier by shown position (1, 2, ...), to "
        "declare a position effect.",
    )
    unit: Literal["persona_name", "persona"] | None = Field(
        None,
        description="Unit-level heterogeneity: each name (`persona_name`) or each persona "
        "(`persona`: one persona and agent index, across conditions) gets its own propensity, "
        "a log-odds shift drawn once from N(0, unit_sd) and kept in every stage and stratum.",
    )
    unit_sd: float = Field(0.0, ge=0, le=10, description="SD of the units' log-odds shifts.")
    shifted: str | None = Field(
        None, description="The choice whose log-odds a unit's shift moves (default: the first)."
    )
    mean: dict[str, float] = Field(
        default_factory=dict,
        description="For `integer` and `number` fields: value of `by` -> mean of a normal draw "
        "(e.g. a 1-100 score per letter strength).",
    )
    default_mean: float | None = Field(None, description="Mean for values `mean` does not list.")
    sd: float = Field(0.0, ge=0, description="SD of the normal draw of a numeric field.")
    bounds: tuple[float, float] | None = Field(
        None, description="Numeric draws are clipped to [low, high] (integers are rounded first)."
    )

    @model_validator(mode="after")
    def _sums_to_one(self) -> SyntheticField:
        if any(w <= 0 for w in [*self.weights.values(), *(self.positions or [])]):
            raise ValueError("weights must be positive")
        if self.weights and not self.by:
            raise ValueError("`by` must name the persona axis the weights are keyed on")
        tables = list(self.probabilities.values()) + ([self.default] if self.default else [])
        for table in tables:
            if any(p < 0 for p in table.values()) or abs(sum(table.values()) - 1.0) > 1e-6:
                raise ValueError("probabilities must be non-negative and sum to 1")
        if self.probabilities and not self.by:
            raise ValueError("`by` must name the persona axis the probabilities are keyed on")
        if isinstance(self.by, list):
            if not self.by or self.weights:
                raise ValueError("a list `by` needs at least one name and keys probabilities only")
            for key in self.probabilities:
                if len(key.split("|")) != len(self.by):
                    joined = "|".join(self.by)
                    raise ValueError(f"key `{key}` needs {len(self.by)} values: `{joined}`")
        if self.unit_sd and self.unit is None:
            raise ValueError("`unit_sd` needs `unit` (persona_name or persona)")
        if self.mean and not self.by:
            raise ValueError("`by` must name what the means are keyed on")
        if self.mean and self.default_mean is None:
            raise ValueError("`mean` needs `default_mean` for the values it does not list")
        if self.bounds is not None and self.bounds[0] > self.bounds[1]:
            raise ValueError("`bounds` must be [low, high]")
        return self

    def design_keys(self) -> tuple[str, ...]:
        """The design keys this table reads besides the answer's own field."""
        by = [self.by] if isinstance(self.by, str) else list(self.by or [])
        return tuple(by) + ((self.unit,) if self.unit and self.unit_sd else ())


#: Sampling parameters, checked alike where a role sets them and where one of its models does.
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
MaxTokens = Annotated[int, Field(ge=1, le=32768)]
#: Seeds seed numpy (non-negative only) and are stored in SQLite (64-bit integers).
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
Stop = Annotated[list[str], Field(min_length=1, max_length=4)]
Endpoint = Literal["chat", "completions"]
#: Variant fields whose explicit null means something (no token cap, no penalty) rather than
#: "keep the role's value".
_NULLABLE = frozenset({"max_tokens", "frequency_penalty", "presence_penalty", "stop"})


class ModelVariant(Strict):
    """One of several models a role is played by; unset fields keep the role's value."""

    label: str | None = Field(
        None,
        pattern=LABEL_PATTERN,
        description="Name in results (`model_label`); the model id when absent.",
    )
    backend: str | None = None
    model: str | None = None
    options: dict[str, Any] | None = None
    structured_output: bool | None = None
    endpoint: Endpoint | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_tokens: MaxTokens | None = Field(
        None, description="This model's cap; an explicit null lifts the role's cap."
    )
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    stop: Stop | None = None
    synthetic: dict[str, SyntheticField] | None = Field(
        None,
        description="Only for backend `synthetic`: this variant's declared answers (e.g. two "
        "'models' with different biases for a power analysis of a model comparison).",
    )

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, options: dict[str, Any] | None) -> dict[str, Any] | None:
        return _check_no_secrets(options) if options is not None else None


def _check_no_secrets(options: dict[str, Any]) -> dict[str, Any]:
    for key in options:
        if key.lower() in {"api_key", "apikey", "token", "password", "secret"}:
            raise ValueError(
                f"`{key}` may not be written in a study file; name the environment variable "
                "that holds it with `api_key_env`"
            )
    return options


class RoleConfig(Strict):
    """Which backend and model play a role, and how they sample."""

    backend: str = Field("local", description="Backend name from the registry.")
    model: str | None = Field(None, description="Model id; the backend's default when absent.")
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: MaxTokens | None = Field(
        256,
        description="Cap on generated tokens; null for none (the server's or model's own limit, "
        "e.g. a paper that sets no cap for chat models). Answers cut at the cap are flagged "
        "`truncated`.",
    )
    frequency_penalty: Penalty | None = Field(
        None, description="OpenAI-style frequency penalty; sent only when set."
    )
    presence_penalty: Penalty | None = Field(
        None, description="OpenAI-style presence penalty; sent only when set."
    )
    stop: Stop | None = Field(None, description="Up to four stop sequences; sent only when set.")
    endpoint: Endpoint = Field(
        "chat",
        description="`completions` for base models (GPT-3, a base GGUF, a vLLM or llama.cpp "
        "server's /v1/completions): one prompt string instead of chat messages.",
    )
    seed: Seed | None = Field(
        None, description="Base seed; each call's seed is derived from it and the unit id."
    )
    max_concurrency: int | None = Field(
        None, ge=1, le=4096, description="Upper bound on calls in flight (adapts below it)."
    )
    max_attempts: int = Field(5, ge=1, le=50, description="Attempts per call, the first included.")
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="Per-attempt timeout of a server (a model in this process has none: see "
        "the local backend's `stall_timeout_s`).",
    )
    timeout_per_token_s: float | None = Field(
        None,
        ge=0,
        description="Seconds each requested token (`max_tokens`) adds to the per-attempt "
        "timeout; default 0.5 for a server on this machine (localhost), 0 otherwise.",
    )
    total_timeout_s: float = Field(600.0, gt=0, description="Budget for all attempts of a call.")
    probe_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Per-attempt timeout until the server has answered once (server backends "
        "only): a server that accepts connections but never answers stops the run within a "
        "minute. Raise it for a server that loads its model on the first call.",
    )
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
        default_factory=dict,
        description="Field -> how the synthetic responder answers it: the declared truth when "
        "the role runs on backend `synthetic` (e.g. `--backend synthetic`); real backends "
        "ignore it, so one study file can both run on a model and test its own analysis.",
    )
    structured_output: bool = Field(
        True,
        description="False for completion models that cannot return JSON: stages then use their "
        "`completion` prompt and a formatter role extracts the answer.",
    )
    models: list[str | ModelVariant] | None = Field(
        None,
        min_length=1,
        description="Run the study once per model: model ids on this backend, or variants that "
        "also change backend/options. Roles listing models must list the same labels; the "
        "roles that feed them (persona writers, formatters) then run per model too.",
    )
    shared: bool = Field(
        False,
        description="In a study comparing models: this role keeps its own model for every "
        "model label (one persona writer or formatter for all) instead of each model playing it.",
    )

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, options: dict[str, Any]) -> dict[str, Any]:
        return _check_no_secrets(options)

    @model_validator(mode="after")
    def _shared_has_one_model(self) -> RoleConfig:
        if self.shared and self.models:
            raise ValueError("a role listing `models` cannot be `shared`")
        return self

    def variants(self) -> dict[str, RoleConfig]:
        """Label -> the role as played by that model (one unlabeled entry without ``models``)."""
        if not self.models:
            return {"": self}
        out: dict[str, RoleConfig] = {}
        for entry in self.models:
            variant = ModelVariant(model=entry) if isinstance(entry, str) else entry
            # Attributes, not a dump: nested sections keep their types in the copied role.
            changes = {
                k: getattr(variant, k)
                for k in type(variant).model_fields
                if k != "label"
                and (getattr(variant, k) is not None or k in _NULLABLE & variant.model_fields_set)
            }
            if "backend" in changes and "options" not in changes:
                changes["options"] = {}  # options belong to the backend they were written for
            label = variant.label or variant.model or ""
            out[label] = self.model_copy(update={**changes, "models": None})
        return out


class OutputField(Strict):
    """One field of a structured answer."""

    type: Literal["choice", "string", "integer", "number", "boolean"] = "string"
    choices: list[str] | None = None
    choices_from: Identifier | None = Field(
        None,
        description="Template variable holding the choices separated by `|` (e.g. a factor "
        "variable, so each scenario constrains the answer to its own two options).",
    )
    description: str | None = None
    max_length: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _choices_match_type(self) -> OutputField:
        if self.type == "choice" and not self.choices and not self.choices_from:
            raise ValueError("a `choice` field needs a non-empty `choices` list or `choices_from`")
        if self.type == "choice" and self.choices and self.choices_from:
            raise ValueError("give `choices` or `choices_from`, not both")
        if self.type != "choice" and (self.choices or self.choices_from):
            raise ValueError("`choices` is only allowed on fields of type `choice`")
        return self


class CompletionConfig(Strict):
    """A stage for completion models: a free-text prompt, then a formatter extracts the answer."""

    prompt: str = Field(description="Free-text prompt template (e.g. ending in 'Answer: ...').")
    formatter: str = Field(description="Role that extracts the structured answer.")
    extract: str = Field(
        description="Extraction prompt template; sees the completion as `text` besides the "
        "stage's usual variables."
    )


class StageConfig(Strict):
    """One model step: every agent sends one request rendered from these templates."""

    name: Identifier
    role: str
    system: str | None = Field(None, description="System message template.")
    prompt: str = Field(description="User message template (Jinja2, sandboxed, strict).")
    output: dict[Identifier, OutputField] | None = Field(
        None, description="Structured answer fields; free text when absent."
    )
    when: str | None = Field(
        None,
        description="Jinja expression over the template variables; agents for which it is "
        "false skip the stage (e.g. `persona_condition != 'no_persona'`).",
    )
    shared_across: list[Identifier] = Field(
        default_factory=list,
        description="Design factors this stage's answer does not depend on: agents that differ "
        "only in them send one identical call and share its answer (e.g. a persona written "
        "without scenario context, reused in every scenario).",
    )
    completion: CompletionConfig | None = Field(
        None, description="How completion models (structured_output: false) answer this stage."
    )
    forced_choice: bool = Field(
        True,
        description="False: choice fields accept any answer, and one outside the choices (e.g. "
        "'undecided') is kept in its column, marked invalid with the reason and not re-asked, "
        "so analyses count it as excluded.",
    )
    population: Identifier | None = Field(
        None, description="The population acting in this stage (the first one when absent)."
    )
    reads: ReadsConfig | None = Field(
        None,
        description="A reading stage: the documents another population wrote, and how they "
        "are matched (templates see `documents`, each with `label`, `name` and `text`).",
    )
    select: int | None = Field(
        None,
        ge=1,
        description="Pair and pool readings: how many documents the reader picks (the answer "
        "field `selected` lists their labels); the picked advance.",
    )
    advance: str | None = Field(
        None,
        description="Single readings: expression over the answer fields deciding whether the "
        "document advances (e.g. `decision == 'Interview'`).",
    )
    pairing: PairingConfig | None = Field(
        None,
        description="A word-pairing stage (free text): each call shows two targets in random "
        "order and the items shuffled; templates see `targets` and `items`.",
    )


class DesignConfig(Strict):
    """How many agents, replicates and conditions."""

    agents_per_value: int = Field(
        ge=1, description="Agents per persona (per axis value, or per combination when crossed)."
    )
    replicates: int = Field(1, ge=1, description="Times each agent acts in each stage.")
    replicate_seeds: list[Seed] | None = Field(
        None,
        min_length=1,
        description="Literal sampling seed of each replicate (as papers report them, e.g. "
        "[11, 42, 50]); sets `replicates`. Without it each call's seed is a hash of its unit.",
    )
    factors: dict[Identifier, dict[LevelName, dict[Identifier, str]]] = Field(
        default_factory=dict,
        description="Crossed design factors: factor -> level -> template variables, or a CSV "
        "path (first column = level, other columns = variables). Each factor is a results "
        "column; every agent is repeated in every combination of levels.",
    )
    record: list[Identifier] = Field(
        default_factory=list,
        description="Factor variables copied into the results as columns (for breakdowns).",
    )
    only: dict[Identifier, dict[Identifier, str]] = Field(
        default_factory=dict,
        description="Factor -> {variable: value}: keep only the levels whose variables have "
        "these values (e.g. `job: {subset7: 'true'}`, the 7 roles of seed 001's reduced runs).",
    )
    batch_size: int = Field(
        20_000,
        ge=1,
        description="Agents held in memory at once; a larger design runs in waves of this size "
        "and streams its results to disk.",
    )

    @model_validator(mode="after")
    def _seeds_set_replicates(self) -> DesignConfig:
        if self.replicate_seeds is not None:
            object.__setattr__(self, "replicates", len(self.replicate_seeds))
        return self


RESULT_COLUMNS = frozenset((*ID_COLUMNS, *CALL_COLUMNS, *PIPELINE_COLUMNS, *PAIRING_COLUMNS))


class StudyConfig(Strict):
    """A whole study file."""

    name: Identifier
    description: str
    source: str | None = Field(None, description="Citation of the stimuli (seed paper, appendix).")
    seed: Seed = 0
    vars: dict[Identifier, str] = Field(
        default_factory=dict, description="Literal texts available to every template by name."
    )
    roles: dict[Identifier, RoleConfig] = Field(min_length=1)
    personas: PersonaConfig
    populations: dict[Identifier, PopulationConfig] | None = Field(
        None,
        min_length=1,
        description="Several populations whose agents read each other's work (applicants, "
        "screeners, managers); each stage names its population.",
    )
    stages: list[StageConfig] = Field(min_length=1)
    design: DesignConfig
    biographies: BiographiesConfig | None = Field(
        None,
        description="Letters from biographies (seed 002's CBG): a CSV augmented at load into "
        "one row per gender of each seed biography; templates see the row as `biography`.",
    )
    analyses: list[SerializeAsAny[AnalysisSpec]] = Field(
        default_factory=list,
        description="Analyses of the results; each entry's `kind` selects its fields.",
    )


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
    kinds = []
    for name in kind_names():
        spec = get_kind(name).spec.model_json_schema(ref_template="#/$defs/{model}")
        schema.setdefault("$defs", {}).update(spec.pop("$defs", {}))
        schema["$defs"][spec["title"]] = spec
        kinds.append({"$ref": f"#/$defs/{spec['title']}"})
    schema["properties"]["analyses"]["items"] = {"anyOf": kinds}
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
        match: For a ``"*"`` over a list: only the entries that are mappings with these
            items, e.g. ``(("kind", "prism"),)`` for the PRISM analyses.
        requires: A section the study must have for the option to mean anything, e.g.
            ``("biographies",)``; without it the option is an input error.
    """

    option: str
    path: FieldPath
    value: Any
    drop: tuple[str, ...] = ()
    match: tuple[tuple[str, Any], ...] = ()
    requires: FieldPath = ()

    def paths(self, data: dict[str, Any]) -> list[FieldPath]:
        """Concrete paths: a ``"*"`` part stands for every key of that mapping (every role),
        or every entry of that list that has the ``match`` items (``analyses``)."""
        found: list[FieldPath] = [()]
        for part in self.path[:-1]:
            expanded: list[FieldPath] = []
            for prefix in found:
                node = _get_path(data, prefix)
                if part == "*" and isinstance(node, list):
                    expanded.extend(
                        (*prefix, i)
                        for i, item in enumerate(node)
                        if isinstance(item, dict) and all(item.get(k) == v for k, v in self.match)
                    )
                elif part == "*":
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
        if isinstance(data, list) and isinstance(part, int):
            data = data[part]
        else:
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
        if override.requires and not isinstance(
            _get_path(data, override.requires[:-1]).get(override.requires[-1]), dict
        ):
            section = ".".join(map(str, override.requires))
            raise InputError(
                [
                    Problem(
                        override.option, None, "", f"the study has no `{section}` section to use it"
                    )
                ]
            )
        paths = override.paths(data)
        data = override.apply(data)
        located = SourceMap({path: (override.option, 0) for path in paths}, smap.default_file)
        smap = smap.overlay(located, data)
    data = _read_data_files(data, smap)
    data, smap = expand_generated(data, smap)
    # Each analysis is validated against its own kind's spec, so the kinds (plug-ins) are
    # found at load time and their errors keep their full field path.
    raw_analyses = data.get("analyses") if isinstance(data, dict) else None
    specs, problems = _parse_analyses(raw_analyses, smap)
    try:
        config = StudyConfig.model_validate({**data, "analyses": []})
    except ValidationError as exc:
        problems = [
            smap.problem(tuple(e["loc"]), _pydantic_message(e)) for e in exc.errors()
        ] + problems
    if problems:
        raise InputError(problems)
    config = config.model_copy(update={"analyses": specs})
    problems = check_study(config, smap, check_backends=check_backends)
    if problems:
        raise InputError(problems)
    resolved = collapse_generated(config.model_dump(mode="json"))
    return Study(config=config, resolved=resolved, source_map=smap, path=path)


def _parse_analyses(raw: Any, smap: SourceMap) -> tuple[list[AnalysisSpec], list[Problem]]:
    """Each entry of ``analyses:`` as its kind's spec, with every problem located."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [smap.problem(("analyses",), "must be a list of analyses")]
    specs: list[AnalysisSpec] = []
    problems: list[Problem] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            problems.append(smap.problem(("analyses", i), "an analysis must be a mapping"))
            continue
        name = entry.get("kind") or DEFAULT_KIND
        try:
            kind = get_kind(str(name))
        except UnknownKind:
            problems.append(
                smap.problem(
                    ("analyses", i, "kind"),
                    f"unknown analysis kind `{name}`; known: {', '.join(kind_names())}",
                )
            )
            continue
        try:
            specs.append(kind.spec.model_validate({**entry, "kind": kind.name}))
        except ValidationError as exc:
            problems.extend(
                smap.problem(("analyses", i, *e["loc"]), _pydantic_message(e)) for e in exc.errors()
            )
    return specs, problems


def _data_path(smap: SourceMap, path: FieldPath, value: str) -> Path:
    """A data file named in a study: relative to the file that names it."""
    file, _ = smap.locate(path)
    candidate = Path(value)
    if not candidate.is_absolute() and file and Path(file).is_file():
        candidate = Path(file).parent / candidate
    return candidate


def _read_data_files(data: Any, smap: SourceMap) -> Any:
    """Replace references to data files (a name bank, factor levels in a CSV) by their content,
    so the validated study, and the manifest that records it, is self-contained."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    personas = data.get("personas")
    if (
        isinstance(personas, dict)
        and isinstance(personas.get("name_bank"), str)
        and not personas.get("names")
    ):
        try:
            personas["names"] = _bank_names(personas, smap)
        except NameBankError as exc:
            located = exc.line is not None
            problems.append(
                Problem(str(exc.path), exc.line, exc.column or "", exc.reason)
                if located
                else smap.problem(("personas", "name_bank"), exc.reason)
            )
    problems.extend(read_biography_section(data, smap, _data_path))
    design = data.get("design")
    factors = design.get("factors") if isinstance(design, dict) else None
    if isinstance(factors, dict):
        for name, levels in list(factors.items()):
            if isinstance(levels, str):
                path = ("design", "factors", name)
                csv_path = _data_path(smap, path, levels)
                try:
                    factors[name] = _levels_from_csv(csv_path)
                except InputError as exc:
                    problems.extend(exc.problems)
        if not problems:
            problems.extend(_keep_only(design, smap))
    stages = data.get("stages")
    for i, stage in enumerate(stages if isinstance(stages, list) else []):
        pairing = stage.get("pairing") if isinstance(stage, dict) else None
        if isinstance(pairing, dict):
            problems.extend(_read_pairing(pairing, ("stages", i, "pairing"), smap))
    if problems:
        raise InputError(problems)
    return data


def _read_pairing(pairing: dict[str, Any], at: FieldPath, smap: SourceMap) -> list[Problem]:
    """Read a pairing stage's items CSV into ``rows`` and its name bank into ``names``."""
    problems: list[Problem] = []
    if isinstance(pairing.get("items"), str) and not pairing.get("rows"):
        try:
            pairing["rows"] = read_items(
                _data_path(smap, (*at, "items"), pairing["items"]), pairing
            )
        except InputError as exc:
            problems.extend(exc.problems)
    targets = pairing.get("targets")
    if (
        isinstance(targets, dict)
        and isinstance(targets.get("name_bank"), str)
        and not targets.get("names")
    ):
        ref = targets["name_bank"]
        local = _data_path(smap, (*at, "targets", "name_bank"), ref)
        try:
            bank = load_name_bank(local if local.exists() else ref)
            axis = str(targets.get("axis", ""))
            targets["names"] = {
                str(v): bank.names_for({axis: str(v)}) for v in targets.get("values") or []
            }
        except NameBankError as exc:
            problems.append(smap.problem((*at, "targets", "name_bank"), exc.reason))
    return problems


def _keep_only(design: dict[str, Any], smap: SourceMap) -> list[Problem]:
    """Apply ``design.only`` to the factor levels in place (inline or read from a CSV), so a
    study that extends another can keep a subset of levels the CSV marks."""
    only = design.get("only")
    if not isinstance(only, dict):
        return []  # absent, or the schema reports its type
    factors = design["factors"]
    problems: list[Problem] = []
    for name, wanted in only.items():
        at = ("design", "only", name)
        levels = factors.get(name)
        if not isinstance(levels, dict):
            problems.append(smap.problem(at, f"`{name}` is not a design factor"))
            continue
        if not isinstance(wanted, dict):
            continue
        for var, value in wanted.items():
            if not isinstance(value, str):
                problems.append(
                    smap.problem((*at, var), f'must be text, e.g. "{str(value).lower()}"')
                )
            elif not any(isinstance(v, dict) and var in v for v in levels.values()):
                problems.append(smap.problem((*at, var), f"no level of `{name}` defines `{var}`"))
        kept = {
            level: v
            for level, v in levels.items()
            if isinstance(v, dict) and all(v.get(k) == value for k, value in wanted.items())
        }
        if not kept and not problems:
            problems.append(smap.problem(at, f"no level of `{name}` has these values"))
        factors[name] = kept
    return problems


def _bank_names(personas: dict[str, Any], smap: SourceMap) -> dict[str, list[str]]:
    from biasim.personas import attribute_combinations

    ref = personas["name_bank"]
    local = _data_path(smap, ("personas", "name_bank"), ref)
    bank = load_name_bank(local if local.exists() else ref)
    axes = personas.get("axes") or {}
    if not isinstance(axes, dict):
        return {}
    for axis in axes:
        if axis not in bank.columns:
            raise NameBankError(
                f"the bank has no column for axis `{axis}`; columns: {', '.join(bank.columns)}",
                path=bank.path,
            )
    cross = personas.get("cross", True)
    return {
        "/".join(combo.values()): bank.names_for(combo)
        for combo in attribute_combinations(axes, cross=bool(cross))
    }


def _levels_from_csv(path: Path) -> dict[str, dict[str, str]]:
    import csv

    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"{path}: cannot read factor levels: {exc.strerror or exc}") from None
    levels: dict[str, dict[str, str]] = {}
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or not header[0].strip():
            raise InputError([Problem(str(path), 1, "", "needs a header: level, variables...")])
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(
                    [Problem(str(path), line, "", f"{len(row)} fields, header has {len(header)}")]
                )
            level = row[0].strip()
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", level):
                raise InputError(
                    [Problem(str(path), line, header[0], f"`{level}` is not a valid level name")]
                )
            if level in levels:
                raise InputError([Problem(str(path), line, header[0], f"`{level}` repeats")])
            levels[level] = dict(zip(header[1:], row[1:], strict=True))
    return levels


def _pydantic_message(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "string_pattern_mismatch":
        return pattern_message(error["input"], error["ctx"]["pattern"])
    return str(error["msg"]).removeprefix("Value error, ")


def read_study_text(path: Path, limit: int = MAX_STUDY_BYTES) -> str:
    """The text of a study (or other input) file: a regular file of at most ``limit`` bytes.

    A FIFO would block forever and ``/dev/zero`` never ends, so only regular files are opened,
    and never more than ``limit`` bytes are read.

    Raises:
        InputError: Not a regular file, too large, or not UTF-8 text (naming the file).
    """
    label = str(path)
    try:
        if not path.is_file():
            raise InputError(f"{label}: not a regular file")
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"{label}: larger than the limit of {limit:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})") from None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a NUL byte, a name too long for the file system
        return False


def _load_with_extends(ref: str | Path, chain: tuple[str, ...]) -> tuple[Any, SourceMap, str]:
    from biasim.scenarios import builtin_path

    path = Path(ref)
    if not _exists(path):
        found = builtin_path(str(ref))
        if found is None:
            raise InputError(f"{ref}: no such file and no built-in study of that name")
        path = found
    label = str(path)
    if label in chain:
        raise InputError(f"{label}: `extends` forms a cycle: {' -> '.join((*chain, label))}")
    text = read_study_text(path)
    data, smap = load_yaml(text, label)
    if not isinstance(data, dict):
        raise InputError([Problem(label, 1, "", "a study file must be a YAML mapping")])
    parent = data.pop("extends", None)
    if parent is None:
        return data, smap, label
    if not isinstance(parent, str):
        raise InputError([smap.problem(("extends",), "must be a study name or a path")])
    parent_ref = parent
    if not Path(parent).is_absolute() and _exists(path.parent / parent):
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
        for at, tables, _ in _synthetic_tables(name, role):
            for fname, spec in tables.items():
                for problem in _synthetic_keys(config, spec, (*at, fname), smap):
                    add(problem)
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
    factors = config.design.factors
    for fname in factors:
        if fname in RESERVED_COLUMNS or fname in axes or fname in config.vars:
            add(smap.problem(("design", "factors", fname), f"`{fname}` is a reserved name"))
    for fname, levels in factors.items():
        if not levels:
            add(smap.problem(("design", "factors", fname), "a factor needs at least one level"))
        for level, fvars in levels.items():
            for var in sorted(set(fvars) & (set(axes) | RESERVED_COLUMNS | set(factors))):
                add(
                    smap.problem(
                        ("design", "factors", fname, level, var), f"`{var}` is a reserved name"
                    )
                )
    factor_vars = {v for levels in factors.values() for fv in levels.values() for v in fv}
    for i, var in enumerate(config.design.record):
        if var not in factor_vars:
            add(smap.problem(("design", "record", i), f"no factor level defines `{var}`"))
    labels: tuple[str, ...] | None = None
    for name, role in config.roles.items():
        if not role.models:
            continue
        mine = tuple(role.variants())
        if len(set(mine)) != len(role.models):
            add(smap.problem(("roles", name, "models"), "two models have the same label"))
        if labels is None:
            labels = mine
        elif set(mine) != set(labels):
            add(
                smap.problem(
                    ("roles", name, "models"),
                    f"roles listing models must list the same labels; another role has "
                    f"{list(labels)}",
                )
            )
        if check_backends:
            for j, variant in enumerate(role.variants().values()):
                if variant.backend not in known_backends:
                    add(
                        smap.problem(
                            ("roles", name, "models", j, "backend"),
                            f"unknown backend `{variant.backend}`; known: "
                            f"{', '.join(known_backends)}",
                        )
                    )

    ablation = config.personas.ablation
    if ablation and list(factors.get(ABLATION_FACTOR, {})) != ablation:
        add(
            smap.problem(
                ("design", "factors", ABLATION_FACTOR),
                f"`{ABLATION_FACTOR}` is the factor `personas.ablation` adds; name yours otherwise",
            )
        )
    if config.personas.source == "name_bank":
        for key in _persona_keys(config):
            if not config.personas.names.get(key):
                where = "name_bank" if config.personas.name_bank else "names"
                add(smap.problem(("personas", where), f"no names for `{key}`"))
        problem = _names_run_out(config, smap)
        if problem is not None:
            add(problem)

    from .casting import cast

    players = cast(config)
    stage_names: list[str] = []
    stage_fields: dict[str, dict[str, OutputField]] = {}
    for i, stage in enumerate(config.stages):
        if stage.role not in config.roles:
            add(smap.problem(("stages", i, "role"), f"no role named `{stage.role}`"))
        if stage.name in stage_names:
            add(smap.problem(("stages", i, "name"), f"stage `{stage.name}` is declared twice"))
        for fname in stage.output or {}:
            # Output fields become results columns: only result column names clash.
            if fname in RESULT_COLUMNS or fname in axes or fname in factors:
                add(smap.problem(("stages", i, "output", fname), f"`{fname}` is a reserved name"))
        for j, shared in enumerate(stage.shared_across):
            if shared not in factors and shared != "model_label":
                add(
                    smap.problem(
                        ("stages", i, "shared_across", j), f"`{shared}` is not a design factor"
                    )
                )
        completion_models = any(
            not v.structured_output for v in players.get(stage.role, {}).values()
        )
        if completion_models and stage.completion is None:
            add(
                smap.problem(
                    ("stages", i, "role"),
                    f"role `{stage.role}` has completion models (structured_output: false): "
                    "the stage needs a `completion` section with a formatter",
                )
            )
        if completion_models and not stage.output:
            add(smap.problem(("stages", i, "output"), "a formatter needs output fields to extract"))
        if not stage.forced_choice and not any(
            f.type == "choice" for f in (stage.output or {}).values()
        ):
            add(
                smap.problem(
                    ("stages", i, "forced_choice"), "the stage has no `choice` field to relax"
                )
            )
        if stage.completion is not None and stage.completion.formatter not in config.roles:
            add(
                smap.problem(
                    ("stages", i, "completion", "formatter"),
                    f"no role named `{stage.completion.formatter}`",
                )
            )
        elif stage.completion is not None:
            formatter = stage.completion.formatter
            unable = [k for k, v in players[formatter].items() if not v.structured_output]
            if unable:
                per_model = any(unable)  # labels: each model would format its own answers
                add(
                    smap.problem(
                        ("stages", i, "completion", "formatter"),
                        f"role `{formatter}` would be played by completion models "
                        f"({', '.join(unable)}), which cannot return the structure; give it "
                        "`shared: true` so its own model formats every model's answers"
                        if per_model
                        else f"role `{formatter}` is a completion model (structured_output: "
                        "false) and cannot return the structure",
                    )
                )
        stage_names.append(stage.name)
        stage_fields[stage.name] = dict(stage.output or {})
        role = config.roles.get(stage.role)
        for at, declared, _ in _synthetic_tables(stage.role, role) if role else []:
            for fname, spec in declared.items():
                field_spec = (stage.output or {}).get(fname)
                if field_spec is None or not field_spec.choices:
                    continue
                tables = [*spec.probabilities.values(), *([spec.default] if spec.default else [])]
                for table in tables:
                    extra = set(table) - set(field_spec.choices)
                    if extra:
                        add(
                            smap.problem(
                                (*at, fname),
                                f"{sorted(extra)} are not choices of `{fname}`"
                                + synthetic_hint(smap.field(at[:-1])),
                            )
                        )

    for i, stage in enumerate(config.stages):
        if stage.pairing is not None:
            problems.extend(check_pairing(config, stage, ("stages", i), smap))

    names: dict[str, int] = {}
    for i, analysis in enumerate(config.analyses):
        facts = StudyFacts(config, smap, ("analyses", i))
        get_kind(analysis.kind).check(analysis, facts)
        problems.extend(facts.problems)
        name = analysis_name(analysis, i)
        if name in names:
            add(
                smap.problem(
                    ("analyses", i, "name"),
                    f"analyses[{names[name]}] already writes tables named `{name}`",
                )
            )
        names.setdefault(name, i)

    from .populations import check_pipeline

    # Every design count builds the personas: a description that cannot render stops here.
    described = _description_problem(config, smap)
    if described is not None:
        return [*problems, described]
    pipeline_problems = check_pipeline(config, smap)
    problems.extend(pipeline_problems)
    if not pipeline_problems:
        too_large = _design_too_large(config, smap)
        problems.extend([too_large] if too_large else _check_templates(config, smap, stage_fields))
    return problems


def _description_problem(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """Why the persona description does not render, with the variables it could use."""
    from biasim.personas import build_personas

    described: dict[str, Any] = {}

    def describe(source: str, context: dict[str, Any]) -> str:
        described.clear()
        described.update(context)  # what the description could use, should it fail
        return render(source, context)

    path = ("personas", "description")
    try:
        build_personas(config.personas, 1, describe)
    except TemplateSyntaxError as exc:
        file, line = smap.text_line(path, exc.lineno)
        return Problem(file, line, smap.field(path), f"template syntax error: {exc.message}")
    except (UndefinedError, SecurityError, TypeError) as exc:
        return _render_problem(smap, path, exc, config.personas.description, described)
    return None


def _design_too_large(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """More agents than the design-size limit, counted without building any."""
    from .design import MAX_AGENTS_ENV, design_size, max_agents, population_sizes

    limit = max_agents()
    total = sum(population_sizes(config).values()) if config.populations else design_size(config)
    if total <= limit:
        return None
    return smap.problem(
        ("design", "agents_per_value"),
        f"the design has {total:,} agents, more than the limit of {limit:,}; set "
        f"{MAX_AGENTS_ENV} to allow more",
    )


def _names_run_out(config: StudyConfig, smap: SourceMap) -> Problem | None:
    """More agents per persona than a group has names (``--agents`` or the file): names would
    repeat, which a name-swap design must declare (``repeat_names``), never do silently."""
    personas = config.personas
    per = config.design.agents_per_value
    sizes = [(len(personas.names.get(k, [])), k) for k in _persona_keys(config)]
    fewest, key = min(sizes, key=lambda size: size[0], default=(0, ""))
    if personas.repeat_names or not 0 < fewest < per:
        return None
    bank = f"name bank `{personas.name_bank}`" if personas.name_bank else "`personas.names`"
    return smap.problem(
        ("design", "agents_per_value"),
        f"{per} agents per persona value, but {bank} has {fewest} names for `{key}`: names "
        f"would repeat; use at most {fewest}, or set `personas.repeat_names: true`",
    )


def _synthetic_keys(
    config: StudyConfig, spec: SyntheticField, at: FieldPath, smap: SourceMap
) -> list[Problem]:
    """Problems with what a synthetic table is keyed on: each `by` name must be a persona
    axis, a design factor or `model_label`, and each key's values must exist where the
    values are listed in the study (persona axes, inline factor levels)."""
    axes = config.personas.axes
    factors = config.design.factors
    by = [spec.by] if isinstance(spec.by, str) else list(spec.by or [])
    problems = []
    known: list[list[str] | None] = []
    for j, name in enumerate(by):
        if name in axes:
            known.append(list(axes[name]))
        elif name in factors:
            levels = factors[name]
            known.append(list(levels) if isinstance(levels, dict) else None)
        elif name in ("model_label", "item"):
            known.append(None)
        else:
            where = (*at, "by", j) if isinstance(spec.by, list) else (*at, "by")
            problems.append(
                smap.problem(
                    where,
                    f"`{name}` is not a persona axis, a design factor, `model_label` or `item` "
                    "(a pairing stage's items)"
                    + nearest(name, [*axes, *factors, "model_label", "item"])
                    + synthetic_hint(smap.field(at[:-2])),
                )
            )
            return problems
    for key in [*spec.probabilities, *spec.weights, *spec.mean]:
        for name, values, value in zip(by, known, key.split("|"), strict=False):
            if values is not None and value not in values:
                problems.append(
                    smap.problem(
                        (*at, "probabilities", key),
                        f"`{value}` is not a value of `{name}`"
                        + nearest(value, values)
                        + synthetic_hint(smap.field(at[:-2])),
                    )
                )
    return problems


def _synthetic_tables(
    name: str, role: RoleConfig
) -> list[tuple[FieldPath, dict[str, SyntheticField], str]]:
    """Where a role declares synthetic answers: ``(path, tables, backend)`` for the role and
    for each model variant that declares its own."""
    found = [(("roles", name, "synthetic"), dict(role.synthetic), role.backend)]
    for j, entry in enumerate(role.models or []):
        if isinstance(entry, ModelVariant) and entry.synthetic is not None:
            at = ("roles", name, "models", j, "synthetic")
            found.append((at, dict(entry.synthetic), entry.backend or role.backend))
    return found


def analysis_name(spec: AnalysisSpec, index: int) -> str:
    """The name an analysis's tables and figures carry: its ``name``, else ``analysisN``."""
    return spec.name or f"analysis{index + 1}"


def _persona_keys(config: StudyConfig) -> list[str]:
    from biasim.personas import persona_keys

    return persona_keys(config.personas.axes, cross=config.personas.cross)


#: ``on_render(field_path, text, agent)``: a template rendered for one agent of the dry render.
RenderHook = Callable[[FieldPath, str, Any], None]


def dry_render(study: Study, on_render: RenderHook) -> None:
    """Render every template as validation does, handing each rendered text to ``on_render``
    (``biasim validate --show-prompts``)."""
    stage_fields = {stage.name: dict(stage.output or {}) for stage in study.config.stages}
    _check_templates(study.config, study.source_map, stage_fields, on_render)


def _check_templates(
    config: StudyConfig,
    smap: SourceMap,
    stage_fields: dict[str, dict[str, OutputField]],
    on_render: RenderHook | None = None,
) -> list[Problem]:
    """Render every template for one persona of each axis value under every factor level
    (one factor varied at a time), following each stage's ``when``."""
    from biasim.personas import build_personas

    problems: list[Problem] = []
    templates: list[tuple[FieldPath, str]] = [
        (("personas", "description"), config.personas.description)
    ]
    for i, stage in enumerate(config.stages):
        for part in ("system", "prompt"):
            if getattr(stage, part) is not None:
                templates.append((("stages", i, part), getattr(stage, part)))
        if stage.completion is not None:
            templates.append((("stages", i, "completion", "prompt"), stage.completion.prompt))
            templates.append((("stages", i, "completion", "extract"), stage.completion.extract))
    broken: set[FieldPath] = set()
    for path, source in templates:
        try:
            compile_template(source)
        except TemplateSyntaxError as exc:
            file, line = smap.text_line(path, exc.lineno)
            problems.append(
                Problem(file, line, smap.field(path), f"template syntax error: {exc.message}")
            )
            broken.add(path)
    for i, stage in enumerate(config.stages):
        if stage.when is not None:
            try:
                compile_expression(stage.when)
            except TemplateSyntaxError as exc:
                problems.append(
                    smap.problem(("stages", i, "when"), f"expression syntax error: {exc.message}")
                )
                broken.add(("stages", i, "when"))
    if broken:
        return problems
    personas = build_personas(config.personas, 1, render)  # _description_problem passed
    from .design import AgentSpec, model_labels, template_context

    seen: set[tuple[FieldPath, str]] = set()

    def report(
        path: FieldPath,
        exc: Exception,
        source: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        problem = _render_problem(smap, path, exc, source, context)
        if (path, problem.message) not in seen:
            seen.add((path, problem.message))
            problems.append(problem)

    factors = config.design.factors
    first = {f: next(iter(levels)) for f, levels in factors.items() if levels}
    variations = [dict(first)] + [
        {**first, f: level} for f, levels in factors.items() for level in list(levels)[1:]
    ]
    label = model_labels(config)[0]
    render_errors = RENDER_ERRORS
    readers = _reader_specs(config)
    # Every answer a later template can branch on: the first choice of every field, then each
    # other choice of one field at a time (a template that breaks only after "Stay" is found
    # before any call, not after half a run).
    branches: list[tuple[str, str, int] | None] = [None]
    for stage in config.stages:
        for fname, fspec in (stage.output or {}).items():
            count = _choice_count(config, fspec)
            branches += [(stage.name, fname, k) for k in range(1, count)]
    for branch, chosen, persona in itertools.product(branches, variations, personas):
        levels = tuple(chosen.items())
        variables = tuple(item for f, lv in levels for item in factors[f][lv].items())
        spec = AgentSpec("", "check", levels, variables, label, persona, 0, 0, "")
        outputs: dict[str, dict[str, Any]] = {}
        own: dict[str, tuple[AgentSpec, dict[str, dict[str, Any]]]] = {}
        for i, stage in enumerate(config.stages):
            ctx = template_context(config, spec, outputs)
            if config.populations:
                # Each population's agents see their own persona and earlier answers;
                # readers also see the documents of one evaluation.
                reader, answers = (
                    own.setdefault(stage_population(config, stage), (readers[stage.name], {}))
                    if stage.name in readers
                    else (spec, outputs)
                )
                ctx = template_context(config, reader, answers)
                if stage.reads is not None:
                    ctx = {**dict(spec.variables), **dict(spec.levels), **ctx}
                    ctx.update(_reading_placeholders(stage, persona))
            if stage.when is not None:
                try:
                    if not compile_expression(stage.when)(ctx):
                        continue
                except render_errors as exc:
                    # The expression is one line: locate the field, not a template line.
                    at = ("stages", i, "when")
                    message = _render_problem(smap, at, exc, stage.when, ctx).message
                    if (("stages", i, "when"), message) not in seen:
                        seen.add((("stages", i, "when"), message))
                        problems.append(smap.problem(("stages", i, "when"), message))
                    continue
            if stage.pairing is not None:
                ctx = {**ctx, **draw_trial(stage.pairing, ctx, 0).context()}
                if not pool(stage.pairing, ctx):
                    report(("stages", i, "pairing"), ValueError("no items for this level"))
            parts: list[tuple[FieldPath, str | None, dict[str, Any]]] = [
                (("stages", i, "system"), stage.system, ctx),
                (("stages", i, "prompt"), stage.prompt, ctx),
            ]
            if stage.completion is not None:
                parts += [
                    (("stages", i, "completion", "prompt"), stage.completion.prompt, ctx),
                    (
                        ("stages", i, "completion", "extract"),
                        stage.completion.extract,
                        {**ctx, "text": "text"},
                    ),
                ]
            for fname, fspec in (stage.output or {}).items():
                if fspec.choices_from and not str(ctx.get(fspec.choices_from) or "").strip():
                    report(
                        ("stages", i, "output", fname, "choices_from"),
                        ValueError(f"no template variable `{fspec.choices_from}` here"),
                    )
            for path, source, context in parts:
                if source is None:
                    continue
                try:
                    text = compile_template(source).render(context)
                except render_errors as exc:
                    report(path, exc, source, context)
                else:
                    if on_render is not None:
                        on_render(path, text, spec)
            answer = {
                f: _placeholder(spec_, ctx, branch[2] if branch[:2] == (stage.name, f) else 0)
                if branch is not None
                else _placeholder(spec_, ctx)
                for f, spec_ in stage_fields[stage.name].items()
            } or {"text": "text"}
            if stage.name in readers:
                own[stage_population(config, stage)][1][stage.name] = answer
            else:
                outputs[stage.name] = answer
            if stage.advance is not None:
                try:
                    compile_expression(stage.advance)(answer)
                except render_errors as exc:
                    message = _render_problem(smap, ("stages", i, "advance"), exc).message
                    report(("stages", i, "advance"), ValueError(message))
    return problems


def _reader_specs(config: StudyConfig) -> dict[str, Any]:
    """Stage -> the first agent of its population, for stages whose population has personas
    of its own (or none): their templates see that agent, not an applicant."""
    from .design import population_specs

    if not config.populations:
        return {}
    first = {
        name: population_specs(config, name)[0]
        for name, pop in config.populations.items()
        if pop.personas != "study"
    }
    return {
        stage.name: first[stage_population(config, stage)]
        for stage in config.stages
        if stage_population(config, stage) in first
    }


def _reading_placeholders(stage: StageConfig, persona: Any) -> dict[str, Any]:
    """What a reading's templates see, filled with stand-ins (see ``agents.Reading``)."""
    reads = stage.reads
    assert reads is not None
    size = {"single": 1, "pair": 2}.get(reads.matching) or reads.size or (stage.select or 1) + 1
    documents = [
        {
            "label": i + 1,
            "name": persona.name,
            "text": "text",
            "attributes": dict(persona.attributes),
            "variant": "",
        }
        for i in range(size)
    ]
    return {
        "documents": documents,
        "document": documents[0],
        "select": stage.select or (1 if reads.matching == "pair" else 0),
        "pool_size": size,
    }


def _choice_count(config: StudyConfig, spec: OutputField) -> int:
    """How many answers a field can give that a template could tell apart (its branches)."""
    if spec.type == "boolean":
        return 2
    if spec.type != "choice":
        return 1
    if spec.choices:
        return len(spec.choices)
    sources = [
        config.vars,
        *(lv for levels in config.design.factors.values() for lv in levels.values()),
    ]
    counts = [
        len([c for c in str(source[spec.choices_from]).split("|") if c.strip()])
        for source in sources
        if spec.choices_from in source
    ]
    return max(counts, default=1)


def _placeholder(spec: OutputField, context: dict[str, Any] | None = None, k: int = 0) -> Any:
    """A stand-in answer for the dry render: the ``k``-th choice (or ``False`` for k = 1 of a
    boolean), else a value of the field's type."""
    if spec.type == "choice":
        choices = spec.choices
        if choices is None and spec.choices_from and context is not None:
            raw = str(context.get(spec.choices_from) or "")
            choices = [c.strip() for c in raw.split("|") if c.strip()]
        choices = choices or ["choice"]
        return choices[min(k, len(choices) - 1)]
    if spec.type == "boolean":
        return k == 0
    return {"string": "text", "integer": 0, "number": 0.0}[spec.type]


def _render_problem(
    smap: SourceMap,
    path: FieldPath,
    exc: Exception,
    source: str | None = None,
    context: dict[str, Any] | None = None,
) -> Problem:
    """The failed render as a located problem; an undefined name lists what ``context`` (the
    variables at that place) offers and the nearest one."""
    lineno = _template_lineno(exc)
    file, line = smap.text_line(path, lineno) if lineno else smap.locate(path)
    message = str(exc)
    if isinstance(exc, UndefinedError):
        message = undefined_message(message, source, context)
    elif isinstance(exc, SecurityError):
        message = f"template does something the sandbox forbids: {message}"
    return Problem(file, line, smap.field(path), message)


def _template_lineno(exc: Exception) -> int | None:
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno
