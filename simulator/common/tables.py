"""Console tables that never cut a number: a grid when it fits, a long layout when it does not.

Rich squeezes a table wider than the terminal by cutting cells to ``0.…``, which turns a p-value
or a rate into a lie. Every table the CLI prints goes through :func:`print_table` instead.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` whole.

    As a grid when its narrowest layout (every word and number on one line) fits the console,
    each column given at least that and the rest of the width shared by need; else as one block
    of ``column: value`` lines per row.
    """
    width = console.options.max_width
    unbounded = console.options.update_width(1_000_000)
    bounds = [
        [Measurement.get(console, unbounded, cell) for cell in (column.header, *column.cells)]
        for column in table.columns
    ]
    lows = [max(m.minimum for m in cells) for cells in bounds]
    highs = [max(m.maximum for m in cells) for cells in bounds]
    # Borders and padding: what the table needs beyond its columns' content.
    frame = Measurement.get(console, unbounded, table).minimum - sum(lows)
    if frame + sum(lows) > width:
        _print_long(console, table)
        return
    slack = width - frame - sum(lows)
    need = sum(highs) - sum(lows)
    if need > slack:
        # Rich would shrink the widest columns first, cutting a number in a narrow one: fix
        # each column's width instead, never under its longest word.
        for column, low, high in zip(table.columns, lows, highs, strict=True):
            column.width = low + (high - low) * slack // need
    console.print(table)


def _print_long(console: Console, table: Table) -> None:
    if table.title:
        console.print(_text(console, table.title), style="table.title")
    headers = [_text(console, column.header) for column in table.columns]
    columns = [list(column.cells) for column in table.columns]
    for i in range(table.row_count):
        for j, (header, cells) in enumerate(zip(headers, columns, strict=True)):
            lead = "- " if j == 0 else "  "
            label = Text.assemble(lead, header, ": ") if header.plain else Text(lead)
            console.print(Text.assemble(label, _text(console, cells[i])), highlight=False)
    if table.caption:
        console.print(_text(console, table.caption), style="table.caption")


def _text(console: Console, cell: RenderableType) -> Text:
    """A cell as the table would show it (its markup applied), on one logical line."""
    if isinstance(cell, Text):
        return cell
    return console.render_str(str(cell), highlight=False)
