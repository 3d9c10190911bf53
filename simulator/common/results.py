"""A kind's typed result: a dataclass whose scalar fields are typed and whose tables are lists of
records, each declared with its :class:`~biasim.simulator.common.result_tables.ResultTable`.
From that one declaration come the summary (:func:`summary_of`), its JSON Schema
(:func:`result_schema`) and the console and HTML renderings (:func:`print_result`,
:func:`html_result`), so what is shown, written and validated cannot drift apart.

Fields are declared as ``field(metadata=about("what it is"))`` (a scalar, list or mapping, or
a nested dataclass) and ``field(metadata=tabled(SPEC))`` (a list of records; ``by_key``: a
mapping of such lists, one table per key; ``depth`` 2: a mapping of such mappings). A field
whose type is a nested dataclass, or a mapping of them (``dict[str, Part]``), holds tables of
its own, each found at its path. A field whose type admits None is left out of the summary
when None and is not required.
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


def tabled(spec: ResultTable, by_key: str | None = None, depth: int = 1) -> dict[str, Any]:
    """The metadata of a table field (``field(metadata=tabled(SPEC))``): ``spec`` describes
    its records. ``by_key``: the field maps a key (what the groups are, ``first_named``) to a
    table, and says what the keys are; ``{key}`` in the title names each. ``depth`` 2: it maps
    a key (``{outer}``) to such a mapping (``{key}``)."""
    return {
        "table": spec,
        "by_key": by_key,
        "depth": depth,
        "description": by_key or spec.description,
    }


def summary_of(result: Any) -> dict[str, Any]:
    """The summary of a result: its fields (nested dataclasses as objects), None left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        item = getattr(result, f.name)
        if item is None:
            continue
        out[f.name] = _plain(item)
    return out


def _plain(item: Any) -> Any:
    """A field's value as the summary holds it: dataclasses (also as a mapping's values) as
    objects."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.asdict(item)
    if isinstance(item, dict):
        return {k: _plain(v) for k, v in item.items()}
    return item


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
            part = spec.schema("rows")
            for _ in range(f.metadata.get("depth", 1)):
                part = {"type": "object", "additionalProperties": part}
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


def older_summary(missing: KeyError) -> str:
    """What the console and the page say of an analysis whose summary an older biasim wrote
    (it lacks the field ``missing`` names), instead of failing the whole report."""
    return (
        f"This analysis's summary was written by an older version of biasim (it has no "
        f"{missing}); run `biasim analyze run RUN_DIR` to compute it again and redraw it."
    )


def tables_of(cls: type, summary: dict[str, Any]) -> Iterator[tuple[ResultTable, Records, Key]]:
    """Each table of the summary with rows, in the order the result declares them (a nested
    part's where the part is declared): its description (``{key}`` and the text fields of the
    parts holding it filled in; the label columns its ``labels_from`` names declared first),
    records and path.

    Raises:
        KeyError: The summary lacks a field the result always holds (an older version wrote
            it).
    """
    yield from _tables(cls, summary, (), {})


def _tables(
    cls: type, summary: dict[str, Any], path: Key, named: dict[str, Any]
) -> Iterator[tuple[ResultTable, Records, Key]]:
    named = {**named, **{k: v for k, v in summary.items() if isinstance(v, str)}}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        spec: ResultTable | None = f.metadata.get("table")
        if f.name not in summary and not _without_none(hints[f.name])[1]:
            # A summary an older version wrote: the report says so (:func:`older_summary`).
            raise KeyError(f.name)
        held = summary.get(f.name)
        if not held:
            continue
        if spec is None:
            part, by_key = _part(hints[f.name])
            if part is None:
                continue
            for key, value in held.items() if by_key else [(None, held)]:
                where = (*path, f.name) if key is None else (*path, f.name, key)
                keyed = named if key is None else {**named, "key": key}
                yield from _tables(part, value, where, keyed)
            continue
        if spec.labels_from:
            labels = [summary[k] for k in spec.labels_from if isinstance(summary.get(k), str)]
            spec = dataclasses.replace(spec, columns=(*map(Column, labels), *spec.columns))
        if not f.metadata["by_key"]:
            yield spec.named(**named), held, (*path, f.name)
            continue
        for keys, records in _leaves(held, f.metadata.get("depth", 1)):
            if records:
                titled = spec.named(**named, key=keys[-1], outer=keys[0])
                yield titled, records, (*path, f.name, *keys)


def _part(kind: Any) -> tuple[type | None, bool]:
    """The dataclass a field holds (itself, or as a mapping's values, then True), or None."""
    kind, _ = _without_none(kind)
    if typing.get_origin(kind) is dict:
        kind = typing.get_args(kind)[1]
        return (kind, True) if dataclasses.is_dataclass(kind) else (None, True)
    return (kind, False) if dataclasses.is_dataclass(kind) else (None, False)


def _leaves(held: dict[str, Any], depth: int) -> Iterator[tuple[tuple[str, ...], Records]]:
    """The tables of a mapping ``depth`` keys deep, each with its keys."""
    for key, value in held.items():
        if depth > 1:
            for keys, records in _leaves(value, depth - 1):
                yield (key, *keys), records
        else:
            yield (key,), value


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
