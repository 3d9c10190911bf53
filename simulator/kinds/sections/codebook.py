"""A kind's codebook: the tables its result holds, declared as data beside its code.

``<module>.tables.yaml`` beside a kind's module names each table of its summary: its title,
what it holds, its columns (key, header, format, what the value is) and the note under it. It
is the codebook of the kind's CSV files and summary records, read by a reviewer without
reading code; :func:`tables_of` builds the :class:`ResultTable` objects every route renders
from (console, page, CSV, the summary's JSON Schema). What cannot be data (which rows say
nothing) the module adds to the table it loads::

    TABLES = tables_of(__name__)
    POSITION = replace(TABLES["position"], says_nothing=lambda r: missing(r.get("effect")))

A column is ``[key, header, format, description]`` (header null: the key), with a mapping of
the other :class:`Column` fields as a fifth item where needed (``{upper: ci_high}``). Two
entries stand for several columns, so that each is written once:

- ``{shared: NAME, ...}``: a column the kinds share, from
  :mod:`~biasim.simulator.kinds.sections.columns` (``{shared: p_value, how: Welch test.}``);
- ``{group: NAME, ...}``: a group of this codebook's ``groups:``, its text with ``{field}``
  replaced by the entry's other fields (``{group: units, what: pair}``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from biasim.simulator.common.errors import InputError
from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import KeptFields, ResultTable
from biasim.simulator.common.yamlsource import FieldPath, SourceMap, load_yaml
from biasim.simulator.kinds.sections import columns as shared_columns

#: Fields of a table a codebook may set (``columns`` apart; ``says_nothing`` is code).
_TABLE_FIELDS = {f.name for f in fields(ResultTable)} - {"columns", "says_nothing"}
#: Fields a column's fifth item may set.
_COLUMN_EXTRAS = {f.name for f in fields(Column)} - {"key", "label", "spec", "description"}
#: A column's key, header, format and description where its list stops short.
_COLUMN_DEFAULTS = (None, None, "text", "")
#: Fields held as tuples in a table (lists in YAML).
_TUPLES = {"labels_from", "hide", "lifted", "footnote"}


def codebook_path(module: str) -> Path:
    """The codebook of the kind module named ``module``."""
    return Path(sys.modules[module].__file__ or "").with_suffix(".tables.yaml")


def tables_of(module: str) -> dict[str, ResultTable]:
    """The tables declared in the codebook of ``module`` (a module's ``__name__``), by name.

    Raises:
        InputError: Naming the file, line and field of a table or column written wrong.
    """
    path = codebook_path(module)
    doc, where = load_yaml(path.read_text(encoding="utf-8"), str(path))
    reader = _Reader(doc.get("groups") or {}, where)
    return {
        name: reader.table(name, entry, ("tables", name))
        for name, entry in (doc.get("tables") or {}).items()
    }


class _Reader:
    """Builds tables and columns from one codebook, naming the line of anything wrong."""

    def __init__(self, groups: Mapping[str, Any], where: SourceMap) -> None:
        self.groups = groups
        self.where = where

    def fail(self, path: FieldPath, message: str) -> InputError:
        return InputError([self.where.problem(path, message)])

    def table(self, name: str, entry: Any, path: FieldPath) -> ResultTable:
        if not isinstance(entry, dict):
            raise self.fail(path, "a table is a mapping (title, description, columns, ...)")
        unknown = set(entry) - _TABLE_FIELDS - {"columns"}
        if unknown:
            raise self.fail((*path, sorted(unknown)[0]), f"not a table field: {sorted(unknown)}")
        settings = {k: tuple(v) if k in _TUPLES else v for k, v in entry.items()}
        settings["columns"] = tuple(
            self.columns(entry.get("columns") or [], (*path, "columns"), {})
        )
        settings.setdefault("key", name)
        try:
            return ResultTable(**settings)
        except TypeError as error:
            raise self.fail(path, f"{error}") from None

    def columns(self, entries: list[Any], path: FieldPath, fill: Mapping[str, Any]) -> list:
        out: list[Column] = []
        for i, entry in enumerate(entries):
            out += self.entry(entry, (*path, i), fill)
        return out

    def entry(self, entry: Any, path: FieldPath, fill: Mapping[str, Any]) -> list[Column]:
        if isinstance(entry, list) and 1 <= len(entry) <= 5:
            return [self.column(entry, path, fill)]
        if isinstance(entry, dict) and "shared" in entry:
            return self.shared(entry, path, fill)
        if isinstance(entry, dict) and entry.get("group") in self.groups:
            given = {**fill, **{k: v for k, v in entry.items() if k != "group"}}
            return self.columns(self.groups[entry["group"]], path, given)
        raise self.fail(
            path,
            "a column is [key, header, format, description] or {shared: ...} or "
            f"{{group: ...}} naming one of this codebook's groups {sorted(self.groups)}",
        )

    def column(self, entry: list[Any], path: FieldPath, fill: Mapping[str, Any]) -> Column:
        extra = entry[-1] if isinstance(entry[-1], dict) else {}
        words = entry[:-1] if extra else entry
        if len(words) > 4 or set(extra) - _COLUMN_EXTRAS:
            raise self.fail(
                path,
                "a column is [key, header, format, description], then a "
                f"mapping of {sorted(_COLUMN_EXTRAS)}",
            )
        key, label, spec, description = (*words, *_COLUMN_DEFAULTS[len(words) :])
        if not all(isinstance(w, str) for w in (key, spec, description)) or not isinstance(
            label, str | None
        ):
            # YAML reads `no`, `on`, `1.5` or a bare `null` as other than text: quote it.
            raise self.fail(path, "a column's key, header, format and description are text")
        return Column(
            _filled(key, fill),
            _filled(label, fill),
            spec,
            description=_filled(description, fill),
            **extra,
        )

    def shared(self, entry: dict[str, Any], path: FieldPath, fill: Mapping[str, Any]) -> list:
        name = entry["shared"]
        make = getattr(shared_columns, name, None)
        if not callable(make) or name.startswith("_"):
            raise self.fail(path, f"no shared column {name!r} in kinds/sections/columns.py")
        kwargs = {k: _filled(v, fill) for k, v in entry.items() if k != "shared"}
        try:
            made = make(**kwargs)
        except TypeError as error:
            raise self.fail(path, f"shared column {name}: {error}") from None
        return list(made) if isinstance(made, tuple) else [made]


def _filled(text: Any, fill: Mapping[str, Any]) -> Any:
    """``text`` with a group entry's ``{field}`` replaced; others kept for ``named``."""
    if not isinstance(text, str) or not fill:
        return text
    return text.format_map(KeptFields(fill))
