"""The ``personas`` section of a study file: who the agents of a population are."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .fields import Identifier, Strict


class PersonaConfig(Strict):
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

    @field_validator("axes")
    @classmethod
    def _values(cls, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        for axis, values in axes.items():
            if not values:
                raise ValueError(f"axis `{axis}` has no values")
            if len(set(values)) != len(values):
                raise ValueError(f"axis `{axis}` lists a value twice")
        return axes
