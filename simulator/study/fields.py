"""Field types shared by the study schema and the analysis kinds' specs (pydantic, boundary)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
LEVEL_PATTERN = r"^[A-Za-z0-9_.-]+$"
LABEL_PATTERN = r"^[A-Za-z0-9_.:-]+$"
#: Each name pattern in words, for the error a study author reads.
PATTERN_WORDS = {
    IDENTIFIER_PATTERN: "a name may use only letters, digits and `_`, and must not start with "
    "a digit (no spaces, `-` or `.`)",
    LEVEL_PATTERN: "a level name may use only letters, digits, `_`, `.` and `-` (no spaces)",
    LABEL_PATTERN: "a model label may use only letters, digits, `_`, `.`, `:` and `-` (no spaces)",
}

#: A name usable as a results column and a template variable.
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
#: A factor level name (part of unit ids).
LevelName = Annotated[str, Field(pattern=LEVEL_PATTERN)]


class Strict(BaseModel):
    """A study-file section: unknown fields are errors, values never change after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)
