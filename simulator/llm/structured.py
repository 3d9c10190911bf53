"""Structured answers: the JSON Schema sent to the model and the pydantic check of what returns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

import orjson
from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationError

# pydantic reads a TypedDict's fields only from typing_extensions' on Python < 3.12.
from typing_extensions import TypedDict


class FieldSpec(Protocol):
    """An output field as the study declares it."""

    type: str
    choices: list[str] | None
    description: str | None
    max_length: int | None


@dataclass(frozen=True)
class Selection:
    """The answer of a pair or pool reader: the labels (1..``of``) of the ``count`` picked."""

    count: int
    of: int
    type: str = "selection"
    choices: list[str] | None = None
    description: str | None = None
    max_length: int | None = None


def _distinct(labels: list[int]) -> list[int]:
    if len(set(labels)) != len(labels):
        raise ValueError("list each picked label once")
    return labels


_PY_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True)
class OutputSchema:
    """A structured-answer contract.

    Attributes:
        json_schema: What backends pass to constrained decoding / ``response_format``.
        validator: Strict pydantic validator of the answer text, to a plain dict.
    """

    json_schema: dict[str, Any]
    validator: TypeAdapter[Any]
    #: Choice fields whose choices are not enforced (``forced_choice: false``): their choices.
    open_choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def parse(self, text: str) -> tuple[dict[str, Any] | None, str | None]:
        """Validate ``text`` against the schema.

        Only an exact JSON object is accepted (a Markdown code fence around it is removed, since
        it carries no content); nothing is coerced, so ``"evacuate"`` never becomes
        ``"Evacuate"``.

        Returns:
            ``(parsed, None)`` when valid, else ``(None, reason)``.
        """
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        try:
            return self.validator.validate_json(body), None
        except ValidationError as exc:
            return None, _describe(exc)

    def outside_choices(self, parsed: Mapping[str, Any]) -> str | None:
        """Why a well-formed answer is excluded: the open choice fields it answered with
        something else (e.g. "undecided"), or ``None`` when it chose."""
        off = [
            f"`{name}` is {parsed[name]!r}, not one of {list(choices)}"
            for name, choices in self.open_choices.items()
            if parsed.get(name) not in choices
        ]
        return f"{OUTSIDE_CHOICES}: {'; '.join(off)}" if off else None


#: Opens the reason of an answer kept but excluded because it chose none of the choices.
OUTSIDE_CHOICES = "outside the choices (kept, not re-asked: forced_choice is off)"


#: The answer field of a reading that picks documents: the labels of those it picks.
SELECTED = "selected"


def reading_schema(
    fields: Mapping[str, FieldSpec], picks: int, shown: int, *, forced: bool = True
) -> OutputSchema:
    """The schema a reading is asked to answer: the stage's fields, plus :data:`SELECTED`
    (``picks`` labels of the ``shown`` documents) when it picks any. ``estimate`` counts the
    same schema the agents send."""
    chosen: dict[str, FieldSpec] = dict(fields)
    if picks:
        chosen[SELECTED] = Selection(count=picks, of=shown)
    return output_schema(chosen, forced=forced)


def output_schema(fields: Mapping[str, FieldSpec], *, forced: bool = True) -> OutputSchema:
    """Build the JSON Schema and validator for a stage's output fields.

    Args:
        fields: The output fields.
        forced: Whether choice fields must answer one of their choices (an enum the model is
            held to). When false they are strings whose description lists the choices, and
            :meth:`OutputSchema.outside_choices` tells an answer outside them.
    """
    properties: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    open_choices: dict[str, tuple[str, ...]] = {}
    for name, spec in fields.items():
        prop: dict[str, Any]
        annotation: Any
        if isinstance(spec, Selection):
            prop = {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": spec.of},
                "minItems": spec.count,
                "maxItems": spec.count,
                "uniqueItems": True,
            }
            label = Annotated[int, Field(ge=1, le=spec.of)]
            annotation = Annotated[
                list[label],  # type: ignore[valid-type]
                Field(min_length=spec.count, max_length=spec.count),
                AfterValidator(_distinct),
            ]
        elif spec.type == "choice" and not forced:
            open_choices[name] = tuple(spec.choices or ())
            listed = ", ".join(open_choices[name])
            prop = {"type": "string", "description": f"One of: {listed}."}
            annotation = str
        elif spec.type == "choice":
            choices = tuple(spec.choices or ())
            prop = {"type": "string", "enum": list(choices)}
            annotation = Literal[choices]  # type: ignore[valid-type]
        else:
            prop = {"type": spec.type}
            annotation = _PY_TYPES[spec.type]
            if spec.type == "string" and spec.max_length:
                prop["maxLength"] = spec.max_length
                annotation = Annotated[str, Field(max_length=spec.max_length)]
        if spec.description:
            prop["description"] = " ".join(
                filter(None, (spec.description, prop.get("description")))
            )
        properties[name] = prop
        definitions[name] = annotation
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(fields),
        "additionalProperties": False,
    }
    # A TypedDict, not a model: the answer validates straight to a dict (a third of the time
    # of building a model instance and dumping it, on every call of a run).
    answer: Any = TypedDict("Answer", definitions)  # type: ignore[misc]
    answer.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)
    return OutputSchema(
        json_schema=schema, validator=TypeAdapter(answer), open_choices=open_choices
    )


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "answer"
        if err["type"] == "json_invalid":
            parts.append(
                f"the answer is not valid JSON ({err['msg'].removeprefix('Invalid JSON: ')})"
            )
        elif err["type"] == "missing":
            parts.append(f"`{loc}` is missing")
        elif err["type"] == "extra_forbidden":
            parts.append(f"`{loc}` is not an allowed field")
        else:
            parts.append(f"`{loc}`: {err['msg']}")
    return "; ".join(parts)


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces, UTF-8) for hashing and storage."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
