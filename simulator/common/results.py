"""A kind's typed result: a dataclass whose scalar fields are typed and whose tables are lists of
records, each declared with its :class:`~biasim.simulator.common.result_tables.ResultTable`.
From that one declaration come the summary (:func:`summary_of`), its JSON Schema
(:func:`result_schema`) and the console and HTML renderings (:func:`print_result`,
:func:`html_result`), so what is shown, written and validated cannot drift apart.

Fields are declared as ``field(metadata=about("what it is"))`` (a scalar, list or mapping, or
a nested dataclass) and ``field(metadata=tabled(SPEC))`` (a list of records; ``by_key``: a
mapping of such lists, one table per key). A field whose type admits None is left out of the
summary when None and is not required.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from rich.text import Text

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import Key, Records, ResultTable

if TYPE_CHECKING:
    from rich.console import Console

    from biasim.simulator.common.html import HtmlSection


def about(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metadata of a value field (``field(metadata=about(...))``): what it is (the
    schema's description), and schema keywords beyond its type (``minItems``...)."""
    return {"description": description, "schema": schema}


def tabled(spec: ResultTable, by_key: str | None = None) -> dict[str, Any]:
    """The metadata of a table field (``field(metadata=tabled(SPEC))``): ``spec`` describes
    its records. ``by_key``: the field maps a key (what the groups are, ``first_named``) to a
    table, and says what the keys are; ``{key}`` in the title names each."""
    return {"table": spec, "by_key": by_key, "description": by_key or spec.description}


def summary_of(result: Any) -> dict[str, Any]:
    """The summary of a result: its fields (nested dataclasses as objects), None left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        item = getattr(result, f.name)
        if item is None:
            continue
        out[f.name] = dataclasses.asdict(item) if dataclasses.is_dataclass(item) else item
    return out


def result_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a result's summary: each field's type and description, the fields
    that are never None required, and each table's columns from its description."""
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        kind, optional = _without_none(hints[f.name])
        spec: ResultTable | None = f.metadata.get("table")
        if spec is not None and f.metadata["by_key"]:
            part = {"type": "object", "additionalProperties": spec.schema("rows")}
        elif spec is not None:
            part = spec.schema()
        else:
            part = {**_type_schema(kind), **(f.metadata.get("schema") or {})}
        if spec is None or f.metadata["by_key"]:
            part["description"] = f.metadata.get("description", "")
        properties[f.name] = part
        if not optional:
            required.append(f.name)
    return {"type": "object", "required": required, "properties": properties}


def tables_of(cls: type, summary: dict[str, Any]) -> Iterator[tuple[ResultTable, Records, Key]]:
    """Each table of the summary with rows, in the order the result declares them: its
    description (the title naming its key, for a table per key; the label columns its
    ``labels_from`` names declared first), records and path."""
    for f in dataclasses.fields(cls):
        spec: ResultTable | None = f.metadata.get("table")
        held = summary.get(f.name)
        if spec is None or not held:
            continue
        if spec.labels_from:
            named = [summary[k] for k in spec.labels_from if isinstance(summary.get(k), str)]
            spec = dataclasses.replace(spec, columns=(*map(Column, named), *spec.columns))
        if f.metadata["by_key"]:
            for key, records in held.items():
                if records:
                    titled = dataclasses.replace(
                        spec,
                        title=spec.title.format(key=key),
                        file=spec.file and spec.file.format(key=key),
                    )
                    yield titled, records, (f.name, key)
        else:
            yield spec, held, (f.name,)


def print_result(
    cls: type, summary: dict[str, Any], console: Console, head: str, lines: Sequence[str]
) -> None:
    """The console's rendering: the analysis's name and ``head``, the kind's sentences, then
    each table with rows."""
    name = str(summary.get("name"))
    console.print(Text(name, style="bold") + f" {head}", highlight=False)
    for line in lines:
        console.print(f"  {line}", highlight=False)
    for spec, records, _ in tables_of(cls, summary):
        spec.print(console, records, name)


def html_result(
    cls: type,
    summary: dict[str, Any],
    section: HtmlSection,
    lines: Sequence[str],
    figures: Sequence[tuple[str, str]] = (),
) -> None:
    """The page's rendering: the same sentences as the console, each table with rows, then
    the figures (name, caption)."""
    for line in lines:
        section.paragraph(line)
    for spec, records, key in tables_of(cls, summary):
        spec.html(section, records, key)
    for name, caption in figures:
        section.figure(name, caption)


def _without_none(kind: Any) -> tuple[Any, bool]:
    """The type without None, and whether None was admitted."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        rest = args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
        return rest, len(args) < len(typing.get_args(kind))
    return kind, False


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(kind: Any) -> dict[str, Any]:
    """The JSON Schema of a field's type (Any: any value)."""
    if kind in _SCALARS:
        return {"type": _SCALARS[kind]}
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if dataclasses.is_dataclass(kind):
        return {**result_schema(kind), "type": "object"}
    return {}
