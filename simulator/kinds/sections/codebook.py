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

import difflib
import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from biasim.registry import nearest
from biasim.simulator.common.errors import InputError
from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import KeptFields, ResultTable
from biasim.simulator.common.yamlsource import FieldPath, SourceMap, load_yaml
from biasim.simulator.kinds.sections import columns as shared_columns

#: Fields of a table a codebook may set (``columns`` apart; ``says_nothing`` is code).
_TABLE_FIELDS = {f.name for f in fields(ResultTable)} - {"columns", "says_nothing", "codebook"}
#: Fields a column's fifth item may set.
_COLUMN_EXTRAS = {f.name for f in fields(Column)} - {"key", "label", "spec", "description"}
#: A column's key, header, format and description where its list stops short.
_COLUMN_DEFAULTS = (None, None, "text", "")
#: Fields held as tuples in a table (lists in YAML).
_TUPLES = {"labels_from", "hide", "lifted", "footnote"}


def codebook_path(module: str) -> Path:
    """The codebook of the kind module named ``module``."""
    return Path(sys.modules[module].__file__ or "").with_suffix(".tables.yaml")


class Codebook(dict[str, ResultTable]):
    """A codebook's tables by name; asking for one it does not declare names the file."""

    def __init__(self, path: Path, tables: dict[str, ResultTable]) -> None:
        super().__init__(tables)
        self.path = path

    def __missing__(self, name: str) -> ResultTable:
        raise KeyError(f"{self.path} declares no table {name!r} (it declares {sorted(self)})")


def tables_of(module: str) -> Codebook:
    """The tables declared in the codebook of ``module`` (a module's ``__name__``), by name.

    Raises:
        InputError: Naming the file, line and field of a table or column written wrong, or the
            file missing (a plug-in's package must ship it as package data).
    """
    path = codebook_path(module)
    if not path.is_file():
        raise InputError(
            f"{path}: no codebook beside {module}: write its tables there, and ship it as "
            'package data ([tool.setuptools.package-data] <package> = ["*.tables.yaml"])'
        )
    doc, where = load_yaml(path.read_text(encoding="utf-8"), str(path))
    reader = _Reader(doc, where, path)
    return Codebook(
        path, {name: reader.table(name, entry, ("tables", name)) for name, entry in reader.tables}
    )


class _Reader:
    """Builds tables and columns from one codebook, naming the line of anything wrong."""

    def __init__(self, doc: Any, where: SourceMap, path: Path) -> None:
        self.where = where
        self.path = path
        if not isinstance(doc, dict) or not isinstance(doc.get("tables"), dict):
            raise self.fail((), "a codebook is a mapping with `tables:` (name: table), and "
                            "may have `groups:` (name: list of columns)")  # fmt: skip
        self.groups: Mapping[str, Any] = doc.get("groups") or {}
        if not isinstance(self.groups, dict):
            raise self.fail(("groups",), "`groups:` maps a name to a list of columns")
        self.tables = list(doc["tables"].items())

    def fail(self, path: FieldPath, message: str) -> InputError:
        return InputError([self.where.problem(path, message)])

    def table(self, name: str, entry: Any, path: FieldPath) -> ResultTable:
        if not isinstance(entry, dict):
            raise self.fail(path, "a table is a mapping (title, description, columns, ...)")
        allowed = _TABLE_FIELDS | {"columns"}
        for field in entry:
            if field not in allowed:
                raise self.fail((*path, field), _unknown("table field", field, allowed))
        for field in ("title", "description"):
            if not isinstance(entry.get(field), str):
                raise self.fail(path, f"a table needs `{field}:` (text): {_REQUIRED}")
        settings = {k: tuple(v) if k in _TUPLES else v for k, v in entry.items()}
        settings["columns"] = tuple(
            self.columns(entry.get("columns") or [], (*path, "columns"), {})
        )
        settings.setdefault("key", name)
        return ResultTable(**settings, codebook=str(self.path))

    def columns(self, entries: list[Any], path: FieldPath, fill: Mapping[str, Any]) -> list:
        out: list[Column] = []
        for i, entry in enumerate(entries):
            out += self.entry(entry, (*path, i), fill)
        return out

    def entry(self, entry: Any, path: FieldPath, fill: Mapping[str, Any]) -> list[Column]:
        if isinstance(entry, list) and entry:
            return [self.column(entry, path, fill)]
        if isinstance(entry, dict) and "shared" in entry:
            return self.shared(entry, path, fill)
        if isinstance(entry, dict) and "group" in entry:
            if entry["group"] not in self.groups:
                raise self.fail(path, _unknown("group", entry["group"], self.groups))
            given = {**fill, **{k: v for k, v in entry.items() if k != "group"}}
            return self.columns(self.groups[entry["group"]], path, given)
        raise self.fail(path, f"{_COLUMN_FORMS}; this is {entry!r}")

    def column(self, entry: list[Any], path: FieldPath, fill: Mapping[str, Any]) -> Column:
        extra = entry[-1] if isinstance(entry[-1], dict) else {}
        words = entry[:-1] if extra else entry
        if len(words) > 4:
            raise self.fail(path, f"{len(entry)} items: {_COLUMN_FORMS}")
        for field in extra:
            if field not in _COLUMN_EXTRAS:
                raise self.fail(path, _unknown("column field", field, _COLUMN_EXTRAS))
        key, label, spec, description = (*words, *_COLUMN_DEFAULTS[len(words) :])
        for what, value in (("key", key), ("format", spec), ("description", description)):
            if not isinstance(value, str):
                raise self.fail(path, f"its {what} {value!r} is not text: {_QUOTE}")
        if not isinstance(label, str | None):
            raise self.fail(path, f"its header {label!r} is not text: {_QUOTE}")
        if spec not in _WORD_SPECS and not _NUMBER_SPEC.match(spec):
            raise self.fail(path, f"format {spec!r} is not one of {_SPECS}")
        if spec == "ci" and not extra.get("upper"):
            raise self.fail(path, "format `ci` needs its upper bound's key: {upper: KEY}")
        return Column(
            _filled(key, fill),
            _filled(label, fill),
            spec,
            description=_filled(description, fill),
            **extra,
        )

    def shared(self, entry: dict[str, Any], path: FieldPath, fill: Mapping[str, Any]) -> list:
        name = entry["shared"]
        if name not in SHARED:
            raise self.fail(path, _unknown("shared column", name, SHARED))
        kwargs = {k: _filled(v, fill) for k, v in entry.items() if k != "shared"}
        wrong = _arguments_wrong(name, kwargs)
        if wrong:
            raise self.fail(path, wrong)
        made = SHARED[name](**kwargs)
        return list(made) if isinstance(made, tuple) else [made]


#: The shared columns a codebook may name: the public functions of sections/columns.py.
SHARED = {
    name: make
    for name, make in vars(shared_columns).items()
    if inspect.isfunction(make) and make.__module__ == shared_columns.__name__
    and not name.startswith("_")
}  # fmt: skip
#: What a column entry may be.
_COLUMN_FORMS = (
    "a column is [key, header, format, description] (then, if needed, a mapping of "
    f"{sorted(_COLUMN_EXTRAS)}), {{shared: NAME, ...}} or {{group: NAME, ...}}"
)
#: What a table must say.
_REQUIRED = "title and description are required; columns, note and the rest are optional"
#: Why a value YAML read was not text.
_QUOTE = 'YAML reads no, yes, on, off, null and numbers as other than text; quote it ("no")'
#: Formats named by a word, and a number's format spec (``.3f``, ``+.3f``, ``.1%``).
_WORD_SPECS = ("text", "int", "bool", "p", "ci")
_NUMBER_SPEC = re.compile(r"^\+?\.\d+[efg%]$")
_SPECS = f"{', '.join(_WORD_SPECS)} or a number's format such as .3f, +.3f, .1%"


def shared_arguments(name: str) -> tuple[list[str], list[str]]:
    """The arguments a codebook's ``{shared: name}`` entry must give, and those it may give."""
    params = inspect.signature(SHARED[name]).parameters.values()
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    return required, [p.name for p in params if p.default is not inspect.Parameter.empty]


def _arguments_wrong(name: str, given: Mapping[str, Any]) -> str:
    """What is wrong with the arguments ``given`` to the shared column ``name``, said in the
    codebook's words (``needs `how:` ``) rather than as Python's TypeError; empty if nothing."""
    required, optional = shared_arguments(name)
    said = [
        f"{', '.join(f'`{a}:`' for a in names)} ({what})"
        for names, what in ((required, "required"), (optional, "optional"))
        if names
    ]
    takes = f"it takes {' and '.join(said)}" if said else "it takes no arguments"
    for argument in given:
        if argument not in (*required, *optional):
            hint = nearest(argument, [*required, *optional])
            return f"shared column `{name}` takes no `{argument}:`{hint} ({takes})"
    missing = [f"`{a}:`" for a in required if a not in given]
    if missing:
        return f"shared column `{name}` needs {' and '.join(missing)} ({takes})"
    return ""


def _unknown(what: str, name: Any, known: Any) -> str:
    """``name`` is no ``what``: the closest of ``known``, then all of them."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"no {what} {name!r}: {hint}the {what}s are {sorted(map(str, known))}"


def _filled(text: Any, fill: Mapping[str, Any]) -> Any:
    """``text`` with a group entry's ``{field}`` replaced; others kept for ``named``."""
    if not isinstance(text, str) or not fill:
        return text
    return text.format_map(KeptFields(fill))
