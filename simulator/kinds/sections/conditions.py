"""How the ``demographic_parity`` kind tests whether the disparity differs between the levels of
its ``condition`` factor (``analysis.conditions``), e.g. a persona ablation: one table in the
console and in the page."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import conditions, pd

_NOTE = (
    "spread = largest - smallest DPD over the conditions compared. p = permutation test: each "
    "unit's condition labels (the analysis's unit: a persona with its replicates, or a name "
    "with every persona drawn with it) are relabelled among its answers, under the null that "
    "the condition does not change how a unit answers; p adj. over every case and comparison "
    "(* = significant)."
)


def add_condition_differences(
    section: Section,
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    condition: str,
    unit_col: str,
    whole_units: bool,
    case_cols: list[str],
    n_permutations: int,
    adjust: str,
    alpha: float,
) -> None:
    """Test every case for a difference in DPD between the levels of ``condition`` (all at
    once, then each pair) and put the table and its records into ``section``
    (``<name>_condition_differences``). ``rows``: the kind's decisions (``value``, ``_hit``)
    with ``unit_col``, the unit every test of the kind reads (``units.design_units``): the
    persona without its condition and replicate, whose answers' condition labels are
    relabelled among themselves, or (``whole_units``) the name shared by every persona drawn
    with it, whose conditions are relabelled whole (its personas differ, so its answers are
    not exchangeable)."""
    study = ctx.study
    answered = rows[rows["_hit"].notna() & rows[unit_col].notna()]
    present = set(answered[condition])
    levels = [level for level in study.design.factors[condition] if level in present]
    if len(levels) < 2:
        return
    in_groups = answered.groupby([*case_cols, unit_col], sort=False)["value"].nunique()
    if (in_groups > 1).any():
        section.summary["condition_differences_refused"] = (
            f"a {unit_col} answers in more than one group of a case (e.g. "
            f"{in_groups[in_groups > 1].index[0][-1]}): its condition labels cannot be "
            "relabelled without moving answers between groups"
        )
        return
    tests = conditions.condition_difference_tests(
        answered.assign(_hit=answered["_hit"].astype(bool)),
        condition_col=condition,
        conditions=levels,
        case_cols=case_cols,
        group_col="value",
        outcome_col="_hit",
        match_col=unit_col,
        whole_units=whole_units,
        n_permutations=n_permutations,
        adjust=adjust,
        alpha=alpha,
        seed=study.seed,
    )
    # The unit: the kind's, matched across the levels, whose condition labels are relabelled.
    tests = tests.assign(unit=unit_col, n_units=tests["n_matched"])
    section.tables[f"{ctx.name}_condition_differences"] = tests
    section.summary["condition_factor"] = condition
    section.summary["condition_levels"] = levels
    section.summary["condition_differences"] = tests.to_dict("records")


def _shown(summary: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The records, their case columns (one value throughout left out) and the levels."""
    rows = summary["condition_differences"]
    levels = summary["condition_levels"]
    fixed = {"compared", "spread", "n", "n_matched", "p_value", "p_adjusted", "significant"}
    fixed |= {"unit", "n_units"}
    fixed |= {f"dpd_{level}" for level in levels}
    keys = [c for c in rows[0] if c not in fixed and len({str(r[c]) for r in rows}) > 1]
    return rows, keys, levels


def print_condition_differences(summary: dict[str, Any], console: Console) -> None:
    """The tests as a console table, then what they assume."""
    rows, keys, levels = _shown(summary)
    table = Table(title=f"Does the DPD differ between {summary['condition_factor']} levels?")
    for col in (*keys, "compared", *(f"DPD {lv}" for lv in levels), "spread", "p", "p adj."):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            *[str(row[c]) for c in keys],
            "all" if row["compared"].count(" vs ") > 1 else row["compared"],
            *[fmt(row.get(f"dpd_{lv}")) for lv in levels],
            fmt(row["spread"]),
            fmt(row["p_value"], "p"),
            fmt(row["p_adjusted"], "p") + ("*" if row["significant"] else ""),
        )
    print_table(console, table)
    console.print(_NOTE)


def html_condition_differences(summary: dict[str, Any], section: HtmlSection) -> None:
    """The tests as a table of the page, read from ``summary["condition_differences"]``."""
    rows, keys, levels = _shown(summary)
    section.table(
        rows,
        key="condition_differences",
        title=f"Does the DPD differ between {summary['condition_factor']} levels?",
        columns=[
            *[Column(c) for c in keys],
            Column("compared", "compared"),
            *[Column(f"dpd_{lv}", f"DPD {lv}", ".3f") for lv in levels],
            Column("spread", "spread", ".3f"),
            Column("n_matched", "matched agents", "int"),
            Column("p_value", "p", "p"),
            Column("p_adjusted", "p adj.", "p", star="significant"),
        ],
        note=_NOTE,
    )
