"""Seed 000 Table 8's rows on the console: each trait's tested effect (fractional logit, letters
permuted within job) beside the paper's beta regression, one table through the one renderer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import fmt, format_p
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.lazy import ceiling_effects, unit_stats

#: The paper's (uncalibrated) model, printed beside the tested one.
PAPER_MODEL = "beta_job_random"


def print_trait_effects(
    rows: Sequence[dict[str, Any]], by: Sequence[str], title: str, console: Console
) -> None:
    """One row per tested effect: ``by`` and the trait name it, * marks a significant one."""
    paper = {_key(r, by): r for r in rows if r["model"] == PAPER_MODEL}
    tested = [r for r in rows if r["model"] == ceiling_effects.MODEL]
    if not tested:
        return
    table = Table(title=title)
    for column in (*by, "trait", "term", "vs", "estimate", "se", "p", "unit", "paper's beta"):
        table.add_column(column, justify="left" if column in (*by, "trait") else "right")
    for row in tested:
        twin = paper.get(_key(row, by))
        table.add_row(
            *[str(row[k]) for k in by],
            str(row["trait"]),
            str(row["term"]),
            str(row["reference"]),
            f"{row['estimate']:+.4f}" + ("*" if row["significant"] else ""),
            f"{row['std_error']:.4f}",
            fmt(row["p_value"], "p"),
            unit_stats.unit_label(row["unit"], row["n_units"]).removeprefix("unit: "),
            "-" if twin is None else f"{twin['estimate']:+.4f} (p {format_p(twin['p_value'])})",
        )
    print_table(console, table)


def _key(row: dict[str, Any], by: Sequence[str]) -> tuple[Any, ...]:
    return (*[row[k] for k in by], row["trait"])
