"""Turns a results table into the evidence a reviewer asks for, as JSON and as printed tables."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from analysis import group_rates, parity_test, status_rates

from .config import StudyConfig

SYNTHETIC_NOTE = (
    "SYNTHETIC RESPONDER - not a language model. These answers were drawn from probabilities "
    "declared in the study file; they test the pipeline and power, not a model."
)


def analyze(df: pd.DataFrame, study: StudyConfig) -> dict[str, Any]:
    """Every analysis the study declares, plus outcome rates per persona group.

    Returns:
        Plain JSON-ready values.
    """
    synthetic = bool(df["synthetic"].fillna(False).astype(bool).any()) if len(df) else False
    out: dict[str, Any] = {
        "study": study.name,
        "synthetic": synthetic,
        "units": len(df),
        "status_counts": {k: int(v) for k, v in df["status"].value_counts().items()},
        "models": sorted({f"{b}:{m}" for b, m in zip(df["backend"], df["model"], strict=True)}),
        "outcomes_by_group": {},
        "analyses": [],
    }
    for axis in study.personas.axes:
        if df[axis].notna().any():
            out["outcomes_by_group"][axis] = status_rates(df, axis).to_dict("records")
    for spec in study.analyses:
        rows = df[df["stage"] == spec.stage]
        rates = group_rates(rows, spec.groups, spec.field, spec.target)
        result: dict[str, Any] = {
            "kind": spec.kind,
            "stage": spec.stage,
            "field": spec.field,
            "target": spec.target,
            "by": spec.groups,
            "groups": rates.to_dict("records"),
            "test": None,
        }
        if len(rates) >= 2 and (rates["n"] > 0).all():
            result["test"] = parity_test(
                rates["n"],
                rates["k"],
                alpha=spec.alpha,
                n_simulations=spec.n_simulations,
                seed=study.seed,
            ).as_dict()
        else:
            result["note"] = "fewer than two groups with valid answers: no parity test"
        out["analyses"].append(result)
    return out


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Print decision rates, DPD with its parity test, and outcome rates per group."""
    console = console or Console()
    if report["synthetic"]:
        console.print(Panel(SYNTHETIC_NOTE, style="bold yellow"))
    console.print(
        f"[bold]{report['study']}[/bold]  models: {', '.join(report['models'])}  "
        f"units: {report['units']}  outcomes: {report['status_counts']}"
    )
    for result in report["analyses"]:
        table = Table(
            title=f"Rate of {result['field']} = {result['target']} "
            f"({result['stage']}) by {', '.join(result['by'])}"
        )
        for axis in result["by"]:
            table.add_column(axis)
        for col in ("valid n", result["target"], "rate", "95% CI (Wilson)"):
            table.add_column(col, justify="right")
        for row in result["groups"]:
            table.add_row(
                *[str(row[a]) for a in result["by"]],
                str(row["n"]),
                str(row["k"]),
                f"{row['rate']:.3f}",
                f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
            )
        console.print(table)
        test = result["test"]
        if test is None:
            console.print(f"DPD: not computed ({result.get('note')})")
        else:
            verdict = "significant" if test["significant"] else "not significant"
            console.print(
                f"Demographic parity difference (max - min rate): [bold]{test['dpd']:.3f}[/bold]  "
                f"parity threshold {test['threshold']:.3f} (95th pct of {test['n_simulations']} "
                f"binomial simulations at pooled rate {test['pooled_rate']:.3f}), "
                f"p = {test['p_value']:.3f}: {verdict}"
            )
    for axis, rows in report["outcomes_by_group"].items():
        table = Table(
            title=f"Answer outcomes by {axis} (a difference here is itself a bias signal)"
        )
        for col in (axis, "units", "answered", "invalid", "error"):
            table.add_column(col, justify="left" if col == axis else "right")
        for row in rows:
            table.add_row(
                str(row[axis]),
                str(row["n"]),
                *[f"{row[f'{s}_rate']:.1%}" for s in ("answered", "invalid", "error")],
            )
        console.print(table)
