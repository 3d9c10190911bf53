"""One description of a table of a result, and every rendering of it drawn from that one object:
the console table (through :func:`~biasim.simulator.common.tables.print_table`, so it fits the
terminal), the HTML table (through :meth:`HtmlSection.table`, each number with its
``data-path``), the JSON Schema of the summary list, and the column order of the CSV file.

A table's columns are its labels (the text columns before the first declared one: the groups a
kind splits by, which depend on the study, e.g. ``experiment`` or ``model_label``) then the
declared columns the records hold. A declared key ending in ``*`` is a family of columns named
after the study's values (``share_*``: ``share_exp1``, ``share_exp2``). Columns neither labels
nor declared (an item's descriptors, a count named after the target value) stay in the CSV file
and the summary only.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt
from biasim.simulator.common.tables import Hidden, print_table

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

#: A table in a summary: one record (column -> value) per row.
Records = list[dict[str, Any]]
#: A path into the summary below a kind's entry: keys and list indices.
Key = tuple[str | int, ...]

#: The JSON type of a column's values, by its format (a label may be any scalar).
_TYPES: dict[str, list[str]] = {"int": ["integer", "null"], "bool": ["boolean", "null"], "text": []}
_NUMBER = ["number", "null"]
#: The most of a frame's columns a missing column's message names (a per-item table has many).
_MAX_NAMED = 40


@dataclass(frozen=True)
class ResultTable:
    """A table of a result: where it is in the summary, its columns and what it says.

    Attributes:
        key: Its key in the kind's summary (a list of records).
        title: The heading, after the analysis's name on the console.
        columns: The declared columns, in the order shown and written to the CSV file.
        description: What the table holds, one line (the summary's JSON Schema says it).
        note: A line under the table, explaining its columns.
        says_nothing: Whether a row says nothing (e.g. a test that could not run); such rows
            are left out of the console and the page and named in one note with ``why``.
        why: Why those rows say nothing.
        console: Whether the console shows it (a long per-item table is named in one line
            instead, and read in the page and the CSV file).
        labels_from: Fields of the summary naming label columns the records hold wherever
            (``by``: the experiment, last in a table of model fits): shown first.
        file: Its CSV file's name after the analysis's (``<name>_<file>.csv``; default the
            key; ``{key}`` names a table of a mapping); None: the summary holds it alone (a
            count or two per level, which the CSV files of the rows it counts hold too).
        hide: Columns never shown (a label the title already names, e.g. the group column
            of a table per group); they stay in the CSV file and the summary.
        lifted: Declared columns said once under the table, not in every row, when every row
            that has a value has the same one (the two values a table of differences
            compares; the one model).
        footnote: (note key, column key): each distinct note the rows hold is numbered, its
            number shown after the row's cell in that column and the note under the table
            (notes too long for a cell, shared by many rows).
        console_rows: The most rows the console shows (None: any); a longer table is named
            in one line, as one with ``console`` False (rates per group: a few in a study of
            one case, hundreds across cases).
        codebook: The codebook file that declares it (None: declared in code), named when
            its data lacks a declared column; not part of what the table is (equality).
    """

    key: str
    title: str
    columns: tuple[Column, ...]
    description: str
    note: str | None = None
    says_nothing: Callable[[dict[str, Any]], bool] | None = None
    why: str = ""
    console: bool = True
    labels_from: tuple[str, ...] = ()
    file: str | None = ""
    hide: tuple[str, ...] = ()
    lifted: tuple[str, ...] = ()
    footnote: tuple[str, str] | None = None
    console_rows: int | None = None
    codebook: str | None = field(default=None, compare=False, repr=False)

    def named(self, **fields: Any) -> ResultTable:
        """The table with ``{field}`` in its title, note, file and column labels replaced by
        ``fields`` (a table per key: ``{key}``; text fields of the result holding it); a field
        not given stays as written."""
        names = KeptFields(fields)
        return replace(
            self,
            title=self.title.format_map(names),
            note=self.note and self.note.format_map(names),
            file=self.file and self.file.format_map(names),
            columns=tuple(
                replace(c, label=c.label.format_map(names)) if c.label else c for c in self.columns
            ),
        )

    def file_name(self, analysis: str) -> str | None:
        """The stem of its CSV file, for the analysis named ``analysis`` (None: not written)."""
        return None if self.file is None else slug(analysis, self.file or self.key)

    def declared(self, keys: Sequence[str]) -> list[Column]:
        """The declared columns among ``keys`` (a record's or a frame's), a family expanded to
        its members in their order there."""
        out = []
        for column in self.columns:
            if column.key.endswith("*"):
                stem = column.key[:-1]
                out += [replace(column, key=k, label=k) for k in keys if k.startswith(stem)]
            elif column.key in keys:
                out.append(column)
        return out

    def shown(self, records: Sequence[dict[str, Any]]) -> list[Column]:
        """The columns shown: the records' leading labels, then the declared ones they hold."""
        first = records[0] if records else {}
        declared = self.declared(list(first))
        keys = {c.key for c in declared}
        labels = []
        for key, item in first.items():
            if key in self.hide:
                continue
            if key in keys or (isinstance(item, int | float) and not isinstance(item, bool)):
                break
            labels.append(Column(key))
        return labels + declared

    def hidden(self, records: Sequence[dict[str, Any]]) -> tuple[list[int], Hidden | None]:
        """Indices of the rows shown, and the rows left out as saying nothing (or None)."""
        if self.says_nothing is None:
            return list(range(len(records))), None
        quiet = [i for i, r in enumerate(records) if self.says_nothing(r)]
        if not quiet:
            return list(range(len(records))), None
        names = _name_columns(self.shown(records))
        named = [[_named(c, record.get(c.key)) for c in names] for record in records]
        # Leading names every row of the table shares (the model's label, the persona axis)
        # are said once, so the hidden rows' own names (which fit, which contrast) are listed.
        common = 0
        while len(quiet) > 1 and common < len(names) - 1 and len({r[common] for r in named}) == 1:
            common += 1
        rows = tuple(" ".join(named[i][common:]) or "all" for i in quiet)
        shown = [i for i in range(len(records)) if i not in set(quiet)]
        return shown, Hidden(rows, self.why, of=" ".join(named[0][:common]))

    def parts(self, records: Sequence[dict[str, Any]]) -> list[tuple[list[int], list[Column]]]:
        """The rows shown (not hidden), split where their columns differ (a table joined from
        experiments that compare their own groups: ``mean_strong`` then ``mean_female``), each
        part as (indices, columns)."""
        shown, _ = self.hidden(records)
        lifted = {c.key for c, _ in self.lifted_values([records[i] for i in shown])}
        out: dict[tuple[str, ...], list[int]] = {}
        for i in shown:
            out.setdefault(tuple(records[i]), []).append(i)
        return [
            (rows, [c for c in self.shown([records[rows[0]]]) if c.key not in lifted])
            for rows in out.values()
        ]

    def lifted_values(self, records: Sequence[dict[str, Any]]) -> list[tuple[Column, Any]]:
        """The :attr:`lifted` columns with one value in every row that has one, with it."""
        out = []
        for column in self.declared(list(records[0]) if records else []):
            if column.key not in self.lifted:
                continue
            values = {fmt(r.get(column.key), column.spec) for r in records} - {"-", ""}
            if len(values) == 1:
                out.append((column, values.pop()))
        return out

    def footnoted(self, records: Sequence[dict[str, Any]]) -> tuple[Records, list[str], list[str]]:
        """The records as shown (each row's note number after its :attr:`footnote` cell), the
        lines said under the table (the lifted values, the note) and the numbered notes."""
        shown, _ = self.hidden(records)
        lifted = self.lifted_values([records[i] for i in shown])
        said = "; ".join(f"{c.label or c.key} {value}" for c, value in lifted)
        lines = [f"every row that has them: {said}"] if said else []
        lines += [self.note] if self.note else []
        if self.footnote is None:
            return list(records), lines, []
        key, at = self.footnote
        notes: list[str] = []
        marked = []
        for record in records:
            note = record.get(key)
            if not isinstance(note, str) or not note:
                marked.append(record)
                continue
            if note not in notes:
                notes.append(note)
            marked.append({**record, at: f"{record.get(at)} [{notes.index(note) + 1}]"})
        return marked, lines, [f"[{i}] {note}" for i, note in enumerate(notes, 1)]

    def on_console(self, records: Sequence[dict[str, Any]]) -> bool:
        """Whether the console shows ``records`` as a table (else names it in one line)."""
        return self.console and (self.console_rows is None or len(records) <= self.console_rows)

    def print(self, console: Console, records: Sequence[dict[str, Any]], name: str) -> None:
        """The table on the console, titled ``<name>: <title>``, its note below it."""
        title = f"{name}: {self.title}"
        if not self.on_console(records):
            console.print(
                f"{title}: {len(records)} rows (in the report and the CSV tables)",
                highlight=False,
            )
            return
        # The title on a line of its own: above a narrow table Rich wraps it to the width.
        console.print(title, style="table.title", highlight=False)
        _, hidden = self.hidden(records)
        parts = self.parts(records) or [([], self.shown(records))]
        shown, lines, notes = self.footnoted(records)
        for j, (rows, columns) in enumerate(parts):
            table = Table()
            for column in columns:
                table.add_column(column.label or column.key, justify=_justify(column))
            for i in rows:
                table.add_row(*[cell(shown[i], c) for c in columns])
            print_table(console, table, hidden if j == len(parts) - 1 else None)
        # What is said under the table explains the rows shown: nothing when every row is
        # left out (as on the page).
        if any(rows for rows, _ in parts):
            for line in [*lines, *notes]:
                console.print(f"  {line}", highlight=False)

    def html(self, section: HtmlSection, records: Sequence[dict[str, Any]], key: Key) -> None:
        """The table in the report page, its numbers at their path ``key`` in the summary."""
        _, hidden = self.hidden(records)
        parts = self.parts(records)
        shown, lines, notes = self.footnoted(records)
        for rows, columns in parts:
            section.table(shown, key=key, columns=columns, title=self.title, where=rows)
        for line in [*lines, *notes] if parts else []:
            section.paragraph(line, muted=True)
        if hidden is not None:
            section.paragraph(hidden.note(200), muted=True)

    def schema(self, description: str | None = None) -> dict[str, Any]:
        """The JSON Schema of the summary list: each declared column's type and meaning."""
        fixed = [c for c in self.columns if not c.key.endswith("*")]
        properties = {c.key: _column_schema(c) for c in fixed}
        for c in fixed:
            if c.spec == "ci" and c.upper:
                properties[c.upper] = {"type": _NUMBER, "description": "Its upper bound."}
        items: dict[str, Any] = {"type": "object", "properties": properties}
        families = {
            f"^{re.escape(c.key[:-1])}": _column_schema(c)
            for c in self.columns
            if c.key.endswith("*")
        }
        if families:
            items["patternProperties"] = families
        items["required"] = [c.key for c in fixed if c.required]
        return {"type": "array", "items": items, "description": description or self.description}

    def write(self, tables: dict[str, pd.DataFrame], analysis: str, frame: pd.DataFrame) -> Records:
        """Put ``frame`` in ``tables`` as its CSV file (columns in :meth:`csv`'s order; none
        when the summary holds it alone), and return its records for the summary
        (:meth:`records`: nothing is written when they lack a declared column).
        """
        records = self.records(frame)
        stem = self.file_name(analysis)
        if stem is not None:
            tables[stem] = self.csv(frame)
        return records

    def records(self, frame: pd.DataFrame) -> Records:
        """``frame``'s rows for the summary: the one way a table's rows reach it, with or
        without a CSV file.

        Raises:
            MissingColumnsError: ``frame`` has rows but lacks a column the table declares
                required (a codebook's key misspelt, or the code's): the summary would break its
                own schema and the column vanish from every rendering.
        """
        self.check_columns(frame)
        return frame.to_dict("records")

    def check_columns(self, frame: pd.DataFrame) -> None:
        """Raise :class:`MissingColumnsError` when ``frame`` has rows and lacks a required
        declared column (a family ``key*`` may have no member; an empty frame holds none)."""
        if frame.empty:
            return
        held = [str(c) for c in frame.columns]
        lacking = [
            c.key
            for c in self.columns
            if c.required and not c.key.endswith("*") and c.key not in held
        ]
        if lacking:
            raise MissingColumnsError(self._missing_message(lacking, held))

    def _missing_message(self, lacking: list[str], held: list[str]) -> str:
        hints = []
        for key in lacking:
            close = difflib.get_close_matches(key, held, n=1)
            hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        where = f" in {self.codebook}" if self.codebook else ""
        has = ", ".join(held[:_MAX_NAMED]) + (
            f" and {len(held) - _MAX_NAMED} more" if len(held) > _MAX_NAMED else ""
        )
        return (
            f"table {self.key!r} ({self.title}) declares{where} the column(s) "
            f"{', '.join(hints)} that its data lacks; the data has {has}; fix the key, or "
            "declare the column `{required: false}` where the data may lack it"
        )

    def csv(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with its declared columns in the declared order, each undeclared column
        kept right after the column before it (the labels lead, as they do on the console)."""
        declared = [c.key for c in self.declared(list(frame.columns))]
        blocks: dict[str, list[str]] = {}
        lead: list[str] = []
        current = None
        for column in frame.columns:
            if column in declared:
                current = column
                blocks[column] = [column]
            elif current is None:
                lead.append(column)
            else:
                blocks[current].append(column)
        order = lead + [c for key in declared for c in blocks[key]]
        return frame[order]


class MissingColumnsError(ValueError):
    """A table's data lacks a column its declaration requires: the analysis fails with the
    table, the column, the closest column the data has and the codebook file."""


class KeptFields(dict[str, Any]):
    """Fields for :meth:`ResultTable.named`: one not given is kept as ``{name}``."""

    def __missing__(self, key: str) -> str:
        return f"{{{key}}}"


def missing(value: Any) -> bool:
    """Whether a summary value is missing: None (as read from summary.json) or NaN (as a
    computation holds it before it is written)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def slug(*parts: Any) -> str:
    """A file-name-safe name joined from ``parts`` (empty parts are left out): a table's or a
    figure's file stem."""
    return "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") for p in parts if p)


def cell(record: dict[str, Any], column: Column) -> str:
    """One cell as the console shows it: the value in the column's format (an interval as
    ``[low,high]``), ``*`` after a significant one."""
    value = record.get(column.key)
    if column.spec == "ci":
        # No space: the console wraps cells at spaces, which would cut an interval in two.
        text = f"[{fmt(value)},{fmt(record.get(column.upper or ''))}]"
    else:
        text = fmt(value, column.spec)
    if column.star and record.get(column.star):
        text += "*"
    return text


def _justify(column: Column) -> Any:
    return "left" if column.spec in ("text", "bool") else "right"


def _name_columns(columns: Sequence[Column]) -> list[Column]:
    """The leading label columns that name a row (none: the table's one row is ``all``)."""
    names = []
    for column in columns:
        if column.spec != "text":
            break
        names.append(column)
    return names


def _named(column: Column, value: Any) -> str:
    """A label column's part of a row's name: a contrast's reference reads ``vs A``."""
    text = fmt(value, "text")
    return f"vs {text}" if column.key == "reference" else text


def _column_schema(column: Column) -> dict[str, Any]:
    types = _TYPES.get(column.spec, _NUMBER)
    out: dict[str, Any] = {"type": types} if types else {}
    if column.description:
        out["description"] = column.description
    return out
