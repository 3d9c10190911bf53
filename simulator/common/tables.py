"""The one console table renderer: every table the CLI prints fits the console and keeps every
number whole.

Rich squeezes a table wider than the terminal by cutting cells to ``0.…``, which turns a p-value
or a rate into a lie. :func:`print_table` instead tries, in order, until the table fits:

1. the boxed grid, text wrapped at spaces, each column at least its longest word (a cell
   holding a p's bound, ``< 0.001``, or a count of units, ``120 persona_id``, or in a
   ``no_wrap`` column never wraps);
2. a compact grid (no vertical rules), columns whose value is the same in every row (of a
   one-row table: its key columns) moved to one line below it;
3. the same with headers wider than their values abbreviated (a legend line says so);
4. the compact grid split into column groups, each repeating the table's key columns (its
   leading columns of labels) so every group reads on its own; the keys' long labels (never
   a number) fold when they leave too little room whole.

Columns whose header starts with ``_`` are internal and never shown; rows a caller hides as
saying nothing are counted and named in a one-line note, and a table with nothing to show (no
rows, or only empty or internal columns) prints its title and one line that says so.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

#: A cell that reads as a number, an interval or a count ("0.25", "[0.1, 0.3]", "12/40", "< 0.001").
_NUMERIC = re.compile(r"^[\s\[(<>≤≥±+\-−]*\d")
#: A cell read whole, never wrapped: a p's bound ("< 0.001", "< 0.001 †") or a count of units
#: ("120 persona_id").
_WHOLE = re.compile(r"^\s*(?:[<>≤≥] ?\d[\d.,]*|\d[\d,]* [A-Za-z_][\w-]*)(?: ?[*†!+]+)?\s*$")
#: The narrowest a label column may fold to (a number never folds).
_FOLD_FLOOR = 12
#: The narrowest an abbreviated header may be.
_ABBREVIATION_FLOOR = 4


@dataclass(frozen=True)
class Hidden:
    """Rows a table leaves out because they say nothing, and why: printed as one note line (two
    when the reason leaves no room on it for the rows' names).

    Attributes:
        rows: Each hidden row by its key columns (``"GEE female vs male"``), so a reader
            knows which rows the CSV holds that the console does not show.
        why: Why they say nothing.
        of: The leading key columns every hidden row shares (``"gpt-4o gender"``), said once.
    """

    rows: tuple[str, ...]
    why: str
    of: str = ""

    @property
    def count(self) -> int:
        return len(self.rows)

    def note(self, width: int) -> str:
        """The note, the rows named as far as ``width`` allows (then ``and N more``)."""
        rows = "row" if self.count == 1 else "rows"
        head = f"{self.count} {rows} not shown (kept in the CSV tables): {self.why}"
        label = f"{rows} of {self.of}:" if self.of else f"{rows}:"
        room = width - len(head) - len(f" ({label} )")
        if len(_listed(self.rows, 0)) <= room:
            return f"{head} ({label} {_listed(self.rows, room)})"
        # A long reason: the names on a line of their own, which they fit.
        return f"{head}\n  {label} {_listed(self.rows, width - len(f'  {label} '))}"


def _listed(names: Sequence[str], room: int) -> str:
    """``names`` joined, the last ones cut to ``and N more`` to fit ``room`` (one at least)."""
    shown, used = 0, -2
    for name in names:
        rest = len(names) - shown - 1
        more = len(f" and {rest} more") if rest else 0
        if shown and used + 2 + len(name) + more > room:
            break
        used += 2 + len(name)
        shown += 1
    rest = len(names) - shown
    return "; ".join(names[:shown]) + (f" and {rest} more" if rest else "")


@dataclass(frozen=True)
class _Shape:
    """One column's widths: the narrowest it may be and the width that holds it on one line."""

    low: int
    high: int


def print_table(console: Console, table: Table, hidden: Hidden | None = None) -> None:
    """Print ``table`` whole, fitted to the console (see the module's docstring)."""
    columns = [c for c in table.columns if not _plain(console, c.header).startswith("_")]
    hidden = hidden if hidden is not None and hidden.count else None
    if not table.row_count or not any(_plain(console, x).strip() for c in columns for x in c.cells):
        # Nothing to grid: the title, and one line that says why (the hidden rows', or this).
        if table.title:
            console.print(_text(console, table.title), style="table.title")
        if hidden is None:
            console.print(_empty_note(table.row_count, len(table.columns)), highlight=False)
    elif not _print_fitted(console, _with(table, columns)):
        _print_compact(console, table, columns)
    if hidden is not None:
        console.print(hidden.note(console.options.max_width), highlight=False)


def _empty_note(rows: int, columns: int) -> str:
    if not rows:
        return "(no rows)"
    shown = "every column is empty or internal" if columns else "it has no columns"
    return f"({rows} {'row' if rows == 1 else 'rows'} not shown: {shown}; see the CSV tables)"


def _print_fitted(console: Console, table: Table, folding: int = 0) -> bool:
    """Print ``table`` if its narrowest layout fits the console, each column given at least that
    and the rest of the width shared by need; else print nothing and say so. The first
    ``folding`` columns may fold their labels."""
    width = console.options.max_width
    shapes = [_shape(console, column, i < folding) for i, column in enumerate(table.columns)]
    lows = sum(s.low for s in shapes)
    slack = width - _frame(console, table) - lows
    if slack < 0:
        return False
    need = sum(s.high for s in shapes) - lows
    fitted = []
    for column, shape in zip(table.columns, shapes, strict=True):
        # Rich would shrink the widest columns first, cutting a number in a narrow one: fix
        # each column's width instead, never under its narrowest layout.
        share = (shape.high - shape.low) * slack // need if need > slack else shape.high - shape.low
        grown = shape.low + share
        folds = shape.low < _shape(console, column, False).low
        overflow = "fold" if folds else column.overflow
        fitted.append(dataclasses.replace(column, width=grown, overflow=overflow))
    console.print(_with(table, fitted))
    return True


def _print_compact(console: Console, table: Table, columns: list[Column]) -> None:
    compact = _with(table, columns)
    compact.box, compact.show_edge, compact.pad_edge = box.SIMPLE_HEAD, False, False
    compact.collapse_padding, compact.caption = True, None
    varying, constant = _split_constant(console, columns, table.row_count)
    short, legend = _abbreviate(console, varying)
    # The least change that fits: abbreviated headers, else column groups (headers whole).
    if _print_fitted(console, _with(compact, varying)):
        legend = []
    elif not _print_fitted(console, _with(compact, short)):
        _print_groups(console, compact, varying)
        legend = []
    if constant:
        every = "; ".join(f"{header} {value}" for header, value in constant)
        console.print(
            f"{'every row' if table.row_count > 1 else 'the row'}: {every}", highlight=False
        )
    if legend:
        console.print("abbreviations: " + "; ".join(legend), highlight=False)
    if table.caption:
        console.print(_text(console, table.caption), style="table.caption")


def _print_groups(console: Console, table: Table, columns: list[Column]) -> None:
    groups, folding = _groups(console, table, columns)
    for i, group in enumerate(groups):
        part = _with(table, group)
        if i:
            part.title = Text.assemble(_text(console, table.title or ""), " (continued)")
        if not _print_fitted(console, part, folding):
            # Wider than the console even alone: the only layout left folds every word.
            console.print(_with(part, [dataclasses.replace(c, overflow="fold") for c in group]))


def _split_constant(
    console: Console, columns: list[Column], rows: int
) -> tuple[list[Column], list[tuple[str, str]]]:
    """The columns that vary, and (header, value) of those the same in every row: with one row,
    its key columns (what names it). Kept as columns when they are all the table has."""
    if rows == 1:
        constant = [i < _key_count(console, columns) for i in range(len(columns))]
    else:
        constant = [len({_plain(console, cell) for cell in c.cells}) == 1 for c in columns]
    if all(constant):
        return columns, []
    said = [
        (_plain(console, c.header), _plain(console, next(iter(c.cells))))
        for c, same in zip(columns, constant, strict=True)
        if same
    ]
    # A column empty in every row says nothing: no "header " with no value after it.
    return (
        [c for c, same in zip(columns, constant, strict=True) if not same],
        [(header, value) for header, value in said if value.strip()],
    )


def _abbreviate(console: Console, columns: list[Column]) -> tuple[list[Column], list[str]]:
    """Headers whose longest word is wider than every value under them, cut to the values'
    width (a header with a digit is left whole); the legend entries for those cut."""
    taken = {_plain(console, c.header) for c in columns}
    out, legend = [], []
    for column in columns:
        header = _plain(console, column.header)
        values = max((_measure(console, cell).minimum for cell in column.cells), default=0)
        room = max(values, _ABBREVIATION_FLOOR)
        # A cut that saves a character or two reads worse than the width it frees.
        short = " ".join(w if len(w) <= room + 2 else w[: room - 1] + "." for w in header.split())
        if short == header or re.search(r"\d", header) or short in taken:
            out.append(column)
            continue
        taken.add(short)
        legend.append(f"{short} = {header}")
        out.append(dataclasses.replace(column, header=short))
    return out, legend


def _groups(
    console: Console, table: Table, columns: list[Column]
) -> tuple[list[list[Column]], int]:
    """``columns`` in groups that each fit the console, each led by the key columns, and how
    many of those may fold their labels. Keys fold only when they leave too little room whole,
    and only the first is repeated when all of them leave too little room folded."""
    width = console.options.max_width
    n_keys = _key_count(console, columns)
    for keys, folding in ((n_keys, 0), (n_keys, n_keys), (1, 0), (1, 1)):
        shapes = [_shape(console, c, i < folding) for i, c in enumerate(columns)]

        def fits(group: list[int], shapes: list[_Shape] = shapes) -> bool:
            frame = _frame(console, _with(table, [columns[i] for i in group]))
            return frame + sum(shapes[i].low for i in group) <= width

        lead = list(range(keys))
        if all(fits([*lead, i]) for i in range(keys, len(columns))):
            break
    groups: list[list[int]] = []
    for i in range(keys, len(columns)):
        if groups and fits([*groups[-1], i]):
            groups[-1].append(i)
        else:
            groups.append([*lead, i])
    return [[columns[i] for i in group] for group in groups], folding


def _key_count(console: Console, columns: Sequence[Column]) -> int:
    """How many leading columns hold labels (no cell reads as a number): what names a row.
    At least one, and never every column (the rest must have somewhere to go)."""
    for i, column in enumerate(columns):
        if any(_NUMERIC.match(_plain(console, cell)) for cell in column.cells):
            return max(i, 1)
    return max(1, len(columns) - 1)


def _shape(console: Console, column: Column, fold: bool) -> _Shape:
    cells = [_measure(console, cell) for cell in (column.header, *column.cells)]
    # A p's bound or a count of units is never cut at its space: "< 0.001" over two lines
    # reads as "<" above "0.001". Its narrowest is its width (an interval may still wrap).
    whole = [
        m.maximum if i and _WHOLE.match(_plain(console, cell)) else m.minimum
        for i, (cell, m) in enumerate(zip((column.header, *column.cells), cells, strict=True))
    ]
    low, high = max(whole), max(m.maximum for m in cells)
    if column.no_wrap:  # the caller's word: a unit ("persona, 60 units") reads whole too
        low = high
    labels = not any(re.search(r"\d", _plain(console, cell)) for cell in column.cells)
    if fold and labels:
        header = _measure(console, column.header).minimum
        low = max(min(low, _FOLD_FLOOR), header)
    return _Shape(low, high)


def _frame(console: Console, table: Table) -> int:
    """Borders and padding: what ``table`` needs beyond its columns' content."""
    bare = _with(table, [Column(header="x") for _ in table.columns])
    bare.rows = []
    return _measure(console, bare).minimum - len(table.columns)


def _measure(console: Console, cell: RenderableType) -> Measurement:
    return Measurement.get(console, console.options.update_width(1_000_000), cell)


def _with(table: Table, columns: list[Column]) -> Table:
    """``table`` (title, rows, style) with these columns."""
    out = copy.copy(table)
    # Rich pads a column by its position (the first and last differ): renumber them.
    out.columns = [dataclasses.replace(c, _index=i) for i, c in enumerate(columns)]
    return out


def _plain(console: Console, cell: RenderableType) -> str:
    return _text(console, cell).plain


def _text(console: Console, cell: RenderableType) -> Text:
    """A cell as the table would show it (its markup applied), on one logical line."""
    if isinstance(cell, Text):
        return cell
    return console.render_str(str(cell), highlight=False)
