"""How every decision kind shows refusals and invalid answers (``analysis.stats.refusals``):
the validity test and the exclusion bounds per case, in the console and in the page."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import pd, refusals

NOTE = (
    "validity = largest minus smallest share of valid answers between groups; DPD as is "
    "(among valid answers), with every excluded answer counted as not targeted (negative) and "
    "as targeted (positive), each tested with the unit named. 'includes parity' = in some "
    "treatment of the excluded answers the gap is gone or not significant: the headline may "
    "come from who is excluded."
)


def add_exclusions(
    section: Section,
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    case_cols: list[str],
    group_col: str,
    hit_col: str,
    unit_col: str | None,
    alpha: float,
    n_permutations: int,
) -> None:
    """Test every case with an excluded answer and put the table (``<name>_exclusions``) and
    its records (``exclusions``) into ``section``."""
    table = refusals.case_exclusions(
        rows,
        case_cols,
        group_col,
        hit_col,
        unit_col=unit_col,
        alpha=alpha,
        n_permutations=n_permutations,
        seed=ctx.study.seed,
    )
    section.tables[f"{ctx.name}_exclusions"] = table
    section.summary["exclusions"] = table.to_dict("records")


def print_exclusions(rows: list[dict[str, Any]], keys: list[str], console: Console) -> None:
    """The cases with excluded answers as a console table, then the note (nothing when no
    case has an excluded answer)."""
    if not rows:
        return
    table = Table(title="Refusals and invalid answers: validity and exclusion bounds")
    for col in (*keys, "excluded", "validity", "p", "DPD", "if negative", "if positive", "bounds"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            *[str(row[c]) for c in keys],
            str(row["n_excluded"]),
            fmt(row["validity_gap"]),
            fmt(row["validity_p_value"], "p"),
            _with_p(row, "valid_only"),
            _with_p(row, "excluded_as_negative"),
            _with_p(row, "excluded_as_positive"),
            "includes parity" if row["bounds_include_parity"] else "excludes parity",
        )
    print_table(console, table)
    console.print(f"{NOTE} Test: {rows[0]['test']}.")


def html_exclusions(section: HtmlSection, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """The same table in the page."""
    if not rows:
        return
    section.table(
        rows,
        key="exclusions",
        title="Refusals and invalid answers: validity and exclusion bounds",
        columns=[
            *[Column(k) for k in keys],
            Column("n_excluded", "excluded", "int"),
            Column("validity_gap", "validity gap", ".3f"),
            Column("validity_p_value", "p", "p"),
            Column("dpd_valid_only", "DPD (valid)", ".3f"),
            Column("p_valid_only", "p", "p"),
            Column("dpd_excluded_as_negative", "DPD if negative", ".3f"),
            Column("p_excluded_as_negative", "p", "p"),
            Column("dpd_excluded_as_positive", "DPD if positive", ".3f"),
            Column("p_excluded_as_positive", "p", "p"),
            Column("bounds_include_parity", "bounds include parity", "text"),
        ],
        note=f"{NOTE} Test: {rows[0]['test']}.",
    )


def _with_p(row: dict[str, Any], scenario: str) -> str:
    return f"{fmt(row[f'dpd_{scenario}'])} (p {format_p(row[f'p_{scenario}'])})"
