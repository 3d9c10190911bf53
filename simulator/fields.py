"""Field types shared by the study schema and the analysis kinds' specs (pydantic, boundary)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

#: A name usable as a results column and a template variable.
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
#: A factor level name (part of unit ids).
LevelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]


class Strict(BaseModel):
    """A study-file section: unknown fields are errors, values never change after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)
