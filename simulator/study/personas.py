"""The ``personas`` section of a study file: who the agents of a population are."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from biasim.simulator.study.fields import Identifier, Strict

#: The design factor a persona ablation adds: which persona the agent is given.
ABLATION_FACTOR = "persona_source"
#: Persona ablation conditions: the attribute term only, the writer's name only, or the
#: writer's generated persona.
AblationLevel = Literal["attribute", "name", "generated"]
#: Most persona attribute combinations a study may have (the crossed axes' product, or their
#: sum when not crossed), counted from the axes before any persona is built: 60 crossed axes
#: of 10 values would otherwise build 10**60 personas. The built-in studies have at most 90.
MAX_PERSONA_COMBINATIONS = 10_000

#: The persona writer's default prompt: Li, Shirado & Das 2025 (seed 004), appendix B.1, for
#: chat models. `persona.description` is the demographic (the `description` template); the
#: scenario context sentence is added when the agent's design gives a `context` variable (the
#: paper's contextualized persona), and left out otherwise (its non-contextualized persona).
SEED004_PERSONA_PROMPT = (
    "You are skilled at creating names and personas that represent different people "
    "authentically. Your task is to craft a detailed persona for someone with the following "
    "demographic: {{ persona.description }}. Include specific and relevant details about this "
    "person's background, personality, and preferences.{% if context is defined %} "
    "Additionally, describe in the persona {{ context }}.{% endif %} Please follow this json "
    "format in your response:\n\n{\n"
    '  "name": "<a string representing the person\'s name>",\n'
    '  "persona": "<a detailed string describing the person\'s persona>"\n}'
)


class PersonaWriterConfig(Strict):
    """Who writes generated personas, and with which prompt (``personas.source: generated``)."""

    role: Identifier = Field(
        description="Role that writes each agent's {name, persona}; in a study comparing "
        "models it runs per model (each model writes its own agents' personas) unless the "
        "role is `shared: true`."
    )
    prompt: str = Field(
        SEED004_PERSONA_PROMPT,
        description="Prompt template of the writer (default: seed 004, appendix B.1); sees "
        "`persona.description` (the attribute text), each axis and the design variables.",
    )
    stage: Identifier = Field(
        "persona",
        description="Name of the writer's stage: its answers are results rows (fields `name` "
        "and `persona`) and later templates can read them as `outputs.<stage>`.",
    )


class PersonaConfig(Strict):
    """Persona axes and where each agent's persona comes from."""

    axes: dict[Identifier, list[str]] = Field(min_length=1)
    source: Literal["attribute", "name_bank", "generated"] = "attribute"
    cross: bool = Field(True, description="Cross the axes (intersectional) or vary one at a time.")
    description: str = Field(
        "{% for k, v in attributes.items() %}{{ k }}: {{ v }}{% if not loop.last %}; "
        "{% endif %}{% endfor %}",
        description="Template of the persona text from the attribute terms; sees `attributes`, "
        "each axis by name and `name` (the agent's name from a name bank, else none).",
    )
    writer: PersonaWriterConfig | None = Field(
        None, description="For source `generated`: the role and prompt writing each persona."
    )
    ablation: list[AblationLevel] | None = Field(
        None,
        min_length=2,
        description="For source `generated`: persona conditions compared side by side, as "
        f"levels of a design factor `{ABLATION_FACTOR}`: `attribute` (the attribute text "
        "only), `name` (the writer's name only), `generated` (the writer's persona).",
    )
    names: dict[str, list[str]] = Field(
        default_factory=dict,
        description="For source `name_bank`: attribute key ('female', or 'White/female' for "
        "crossed axes in axis order) -> names, assigned to agents in turn.",
    )
    name_bank: str | None = Field(
        None,
        description="For source `name_bank`: a CSV (column `name` plus one column per axis) or a "
        "built-in bank (`an2024`, `bias_transmission`); read into `names` when loading.",
    )
    repeat_names: bool = Field(
        False,
        description="For source `name_bank`: allow more agents per value than a group has names "
        "(names are reused in turn); otherwise that is an input error.",
    )

    @model_validator(mode="after")
    def _writer_for_generated(self) -> PersonaConfig:
        if (self.source == "generated") != (self.writer is not None):
            raise ValueError("source `generated` and `writer` go together: give both or neither")
        if self.ablation is not None:
            if self.source != "generated":
                raise ValueError("`ablation` needs source `generated` (the writer gives the names)")
            if len(set(self.ablation)) != len(self.ablation):
                raise ValueError("`ablation` lists a condition twice")
        return self

    @field_validator("axes")
    @classmethod
    def _values(cls, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        for axis, values in axes.items():
            if not values:
                raise ValueError(f"axis `{axis}` has no values")
            if len(set(values)) != len(values):
                raise ValueError(f"axis `{axis}` lists a value twice")
        return axes

    @model_validator(mode="after")
    def _combinations_bounded(self) -> PersonaConfig:
        sizes = [len(values) for values in self.axes.values()]
        count = math.prod(sizes) if self.cross else sum(sizes)
        if count > MAX_PERSONA_COMBINATIONS:
            how = "crossing" if self.cross else "listing"
            raise ValueError(
                f"{how} the {len(sizes)} axes gives {_scale(count)} persona combinations, more "
                f"than the limit of {MAX_PERSONA_COMBINATIONS:,}"
            )
        return self


def _scale(count: int) -> str:
    """A count as digits, or as a power of ten when it is too long to read."""
    return f"{count:,}" if count < 10**15 else f"about 10^{len(str(count)) - 1}"
