"""How every kind shows its tests of differences between models (``analysis.models``): one
table in the console and in the page, with the case columns the kind has."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..htmlreport import Column, HtmlSection, fmt


def print_differences(
    rows: list[dict[str, Any]], keys: list[str], title: str, note: str, console: Console
) -> None:
    """The tests as a console table (``keys``: the case columns), then ``note``."""
    table = Table(title=title)
    for col in (*keys, "model A", "model B", "DPD A", "DPD B", "p", "p adj."):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            *[str(row[c]) for c in keys],
            str(row["model_a"]),
            str(row["model_b"]),
            fmt(row["dpd_a"]),
            fmt(row["dpd_b"]),
            fmt(row["p_value"]),
            fmt(row["p_adjusted"]) + ("*" if row["significant"] else ""),
        )
    console.print(table)
    console.print(note)


def html_differences(
    section: HtmlSection, rows: list[dict[str, Any]], keys: list[str], title: str, note: str
) -> None:
    """The tests as a table of the page, read from ``summary["model_differences"]``."""
    section.table(
        rows,
        key="model_differences",
        title=title,
        columns=[
            *[Column(c) for c in keys],
            Column("model_a", "model A"),
            Column("model_b", "model B"),
            Column("dpd_a", "DPD A", ".3f"),
            Column("dpd_b", "DPD B", ".3f"),
            Column("n_matched", "matched prompts", "int"),
            Column("p_value", "p", ".3f"),
            Column("p_adjusted", "p adj.", ".3f", star="significant"),
        ],
        note=note,
    )
