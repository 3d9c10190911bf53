"""How every kind shows its tests of differences between models (``analysis.models``): one
table in the console and in the page, with the case columns the kind has."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisContext, Section, without_model
from biasim.simulator.kinds.lazy import model_tests, pd


def add_model_differences(
    section: Section,
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    models: list[str],
    case_cols: list[str],
    group_col: str,
    outcome_col: str,
    id_col: str,
    n_permutations: int,
    adjust: str,
) -> None:
    """Test every case and pair of models, prompts matched by ``id_col`` without its model,
    and put the table and its records into ``section`` (``<name>_model_differences``)."""
    tests = model_tests.model_difference_tests(
        rows.assign(_match=without_model(rows, id_col)),
        model_col="model_label",
        models=models,
        case_cols=case_cols,
        group_col=group_col,
        outcome_col=outcome_col,
        match_col="_match",
        n_permutations=n_permutations,
        adjust=adjust,
        seed=ctx.study.seed,
    )
    section.tables[f"{ctx.name}_model_differences"] = tests
    section.summary["model_order"] = models
    section.summary["model_differences"] = tests.to_dict("records")


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
            fmt(row["p_value"], "p"),
            fmt(row["p_adjusted"], "p") + ("*" if row["significant"] else ""),
        )
    print_table(console, table)
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
            Column("p_value", "p", "p"),
            Column("p_adjusted", "p adj.", "p", star="significant"),
        ],
        note=note,
    )
