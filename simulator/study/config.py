"""The study file schema (pydantic v2): only the shape of a study, no checks and no loading.

Loading (``extends:``, overrides, the data files a study names) and full validation are
:mod:`.load`; the checks the schema alone cannot make (cross-references, a dry render of every
template) are :mod:`.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from biasim.analysis.audit.rules import parse_rule
from biasim.simulator.common.yamlsource import SourceMap
from biasim.simulator.study.analysis_spec import AnalysisSpec
from biasim.simulator.study.biographies import BiographiesConfig
from biasim.simulator.study.columns import (
    CALL_COLUMNS,
    COMMITTEE_COLUMNS,
    ID_COLUMNS,
    PAIRING_COLUMNS,
    PIPELINE_COLUMNS,
)
from biasim.simulator.study.committees import CommitteeConfig, SelectionConfig
from biasim.simulator.study.counterfactual import CounterfactualConfig
from biasim.simulator.study.fields import LABEL_PATTERN, Identifier, LevelName, Strict
from biasim.simulator.study.market import MAX_CYCLES, MarketConfig
from biasim.simulator.study.pairing import PairingConfig
from biasim.simulator.study.personas import PersonaConfig
from biasim.simulator.study.policies import PolicyConfig
from biasim.simulator.study.populations import PopulationConfig, ReadsConfig


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
    in_group: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="For `selected`: weight multiplier of a shown document whose author shares "
        "the reader's own value of `by` (declared in-group preference: a reader drawn from a "
        "workforce favours its own group, so hiring can feed back on itself).",
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
        if self.in_group is not None and not isinstance(self.by, str):
            raise ValueError("`in_group` needs `by`: the persona axis reader and author share")
        tables = list(self.probabilities.values()) + ([self.default] if self.default else [])
        for table in tables:
            if any(p < 0 for p in table.values()) or abs(sum(table.values()) - 1.0) > 1e-6:
                raise ValueError("probabilities must be non-negative and sum to 1")
        if self.probabilities and not self.by:
            raise ValueError("`by` must name the persona axis the probabilities are keyed on")
        if isinstance(self.by, list):
            if not self.by or self.weights or self.in_group is not None:
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
        # Unit effects are a draw of the world the study simulates: `world` (the run's seed)
        # redraws them with each seed, as an independent simulated study would.
        return tuple(by) + ((self.unit, "world") if self.unit and self.unit_sd else ())


#: Sampling parameters, checked alike where a role sets them and where one of its models does.
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
MaxTokens = Annotated[int, Field(ge=1, le=32768)]
#: Seeds seed numpy (non-negative only) and are stored in SQLite (64-bit integers).
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
Stop = Annotated[list[str], Field(min_length=1, max_length=4)]
Endpoint = Literal["chat", "completions"]
#: Longest text a string answer field may allow (``max_length``): a million characters is
#: far more than any model writes in one answer.
MAX_ANSWER_LENGTH = 1_000_000
#: Most stages a study may run, policy copies included: validation checks every pair of
#: stages, so 5,000 stages would take minutes. The built-in studies have at most 25.
MAX_STAGES = 100
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
    batch: bool = Field(
        False,
        description="Send each stage's calls through the provider's batch API (openai, "
        "anthropic): about half the price, answers within hours. The run directory records "
        "the batch ids, so a stopped run resumes the same batches; requests a batch could not "
        "answer are sent again live. Also `--batch`.",
    )
    batch_poll_s: float = Field(
        30.0, gt=0, le=3600, description="Seconds between two looks at a pending batch."
    )
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

    @field_validator("max_length")
    @classmethod
    def _length_bounded(cls, length: int | None) -> int | None:
        # The answer's JSON schema holds it as a machine integer: 10**30 would overflow there.
        if length is not None and length > MAX_ANSWER_LENGTH:
            raise ValueError(
                f"{length:,} characters is more than the limit of {MAX_ANSWER_LENGTH:,} (the "
                "longest answer a field may ask for)"
            )
        return length

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
    readers: CommitteeConfig | None = Field(
        None,
        description="Reading stages: a committee of `count` readers per evaluation (each its "
        "own call and row, stage `<stage>.reader<j>`) whose answers `aggregate` combines into "
        "the stage's decision (its own row per evaluation, `members` naming the calls).",
    )
    selection: SelectionConfig | None = Field(
        None,
        description="Reading stages: who advances, decided across all the stage's pools after "
        "they are read (`global_top_k`, `four_fifths`); the rows keep the pools' own decision "
        "in `pool_advanced`.",
    )
    pairing: PairingConfig | None = Field(
        None,
        description="A word-pairing stage (free text): each call shows two targets in random "
        "order and the items shuffled; templates see `targets` and `items`.",
    )
    counterfactual: CounterfactualConfig | None = Field(
        None,
        description="Ask every call again once per other value of a persona axis, with only "
        "that value (`swap: gender`) or only the name (`swap: name, within: race`) swapped: "
        "same agent, seed and prompt. Rows record the set (`cf_set`), the value (`cf_swap`) "
        "and the writer (`cf_writer`); the `counterfactual_text` analysis compares them.",
    )
    answer: Literal["sampled", "logprobs"] = Field(
        "sampled",
        description="`logprobs`: besides the sampled answer, each option of the stage's choice "
        "field gets a probability from the log-probabilities of the answer's first token "
        "(column `probabilities`); the decision analyses then compare expected decisions.",
    )
    policy_of: tuple[str, str] | None = Field(
        None,
        exclude=True,
        description="Set by `policies:` on the copies it makes, never written: (the stage "
        "copied, the policy). A copy draws its pools as the stage it copies.",
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


RESULT_COLUMNS = frozenset(
    (*ID_COLUMNS, *CALL_COLUMNS, *PIPELINE_COLUMNS, *COMMITTEE_COLUMNS, *PAIRING_COLUMNS)
)


class PriceConfig(Strict):
    """A model's price in US dollars per million tokens (overrides the shipped table)."""

    input: float = Field(ge=0, description="USD per million prompt tokens.")
    output: float = Field(ge=0, description="USD per million generated tokens.")
    batch_input: float | None = Field(
        None, ge=0, description="USD per million prompt tokens through a batch API."
    )
    batch_output: float | None = Field(
        None, ge=0, description="USD per million generated tokens through a batch API."
    )

    @model_validator(mode="after")
    def _batch_in_pairs(self) -> PriceConfig:
        if (self.batch_input is None) != (self.batch_output is None):
            raise ValueError("give both `batch_input` and `batch_output`, or neither")
        return self


class StudyConfig(Strict):
    """A whole study file."""

    name: Identifier
    description: str
    source: str | None = Field(None, description="Citation of the stimuli (seed paper, appendix).")
    # Left out of the dump when absent, so the record of a study without one is unchanged.
    family: Identifier | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The study family whose kinds, prompts and command this study uses; "
        "loaded with the study (docs/extending/families.md).",
    )
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
    policies: dict[Identifier, PolicyConfig] | None = Field(
        None,
        description="Pipeline policies: name -> the reading-stage settings it changes. Every "
        "policy reads the same documents in the same pools (the study's stages are policy "
        "`base`).",
    )
    # Left out of the dump when absent, so a single-round study's record is unchanged.
    cycles: int | None = Field(
        None,
        ge=1,
        le=MAX_CYCLES,
        exclude_if=lambda value: value is None,
        description="A labour market: the pipeline runs this many cycles (with `market:`).",
    )
    market: MarketConfig | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="The market the cycles run in: applicants, openings, workforce, readers "
        "drawn from it, attrition (docs/guides/labor-market.md).",
    )
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
    prices: dict[str, PriceConfig] = Field(
        default_factory=dict,
        description="Model id -> its price, over the table shipped with biasim (`biasim "
        "estimate` and the cost ledger use it).",
    )
    cost_limit: float | None = Field(
        None,
        gt=0,
        description="US dollars: stop sending new calls once the run's cost, with the calls in "
        "flight, would pass this (an interrupted run that `--resume` continues).",
    )
    gates: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Rules `biasim gate RUN` checks on the run's audit, e.g. "
        "`impact_ratio.ci_high >= 0.8` (field, comparison, number; see docs/audit/gate.md).",
    )

    @field_validator("stages", mode="before")
    @classmethod
    def _stages_counted_first(cls, stages: Any) -> Any:
        # Counted on the file's list, before a stage is validated (or its errors listed).
        if isinstance(stages, list) and len(stages) > MAX_STAGES:
            raise ValueError(_too_many_stages(len(stages)))
        return stages

    @field_validator("gates")
    @classmethod
    def _gates_parse(cls, gates: list[str]) -> list[str]:
        for rule in gates:
            parse_rule(rule)  # a RuleError is a ValueError: pydantic places it on the field
        return gates

    @model_validator(mode="after")
    def _policy_copies_counted(self) -> StudyConfig:
        readers = sum(stage.reads is not None for stage in self.stages)
        copies = len(self.policies or {}) * readers
        if len(self.stages) + copies > MAX_STAGES:
            raise ValueError(_too_many_stages(len(self.stages) + copies, copies))
        return self


def _too_many_stages(count: int, copies: int = 0) -> str:
    policies = f", {copies:,} of them copies the policies make" if copies else ""
    return f"the study has {count:,} stages{policies}, more than the limit of {MAX_STAGES}"


@dataclass(frozen=True)
class Study:
    """A validated study with the provenance of its fields."""

    config: StudyConfig
    resolved: dict[str, Any]
    source_map: SourceMap
    path: str
    #: Every text validation's dry render produced, as ``(field path, text)``, so the estimate
    #: reads them instead of rendering every template a second time; None: not rendered.
    rendered: tuple[tuple[tuple[str | int, ...], str], ...] | None = None
    #: One line per older form the file uses that loading rewrote (``biasim validate`` shows
    #: them): where it is and what to write instead.
    deprecations: tuple[str, ...] = ()


def analysis_name(spec: AnalysisSpec, index: int) -> str:
    """The name an analysis's tables and figures carry: its ``name``, else ``analysisN``."""
    return spec.name or f"analysis{index + 1}"
