"""Table 19 of seed 002 in the letters kind and ``analyze --texts``: each style scorer given
labelled sentences (``style: {dim: {labelled: FILE}}``) gets its precision, recall and F1 there
(``analysis.text.classifier_metrics``), in a table, the summary and the console."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import fmt
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import classifier_metrics, pd


def classifier_table(
    labelled: Mapping[str, Path], scorers: Mapping[str, Any], cache: Any = None
) -> pd.DataFrame | None:
    """One row per style dimension with labelled data, or None when none has any."""
    rows = [
        classifier_metrics.scorer_metrics(dim, scorers[dim], path, cache)
        for dim, path in labelled.items()
    ]
    return pd.DataFrame(rows) if rows else None


def add_classifier_metrics(
    section: Section,
    ctx: AnalysisContext,
    style: Mapping[str, Any],
    scorers: Mapping[str, Any],
    cache: Any,
) -> None:
    """Put ``<name>_classifiers`` and the summary's ``classifiers`` records into ``section``."""
    labelled = {
        dim: ctx.resolve(choice.labelled) for dim, choice in style.items() if choice.labelled
    }
    try:
        table = classifier_table(labelled, scorers, cache)
    except (OSError, ValueError) as exc:
        section.summary["classifiers_note"] = f"no classifier metrics: {exc}"
        return
    if table is not None:
        section.tables[f"{ctx.name}_classifiers"] = table
        section.summary["classifiers"] = table.to_dict("records")


def print_classifier_metrics(summary: dict[str, Any], console: Console) -> None:
    """Table 19: each scorer's precision, recall and F1 on its labelled sentences."""
    if summary.get("classifiers_note"):
        console.print(summary["classifiers_note"], highlight=False)
    records = summary.get("classifiers") or []
    if not records:
        return
    table = Table(title=f"{summary.get('name')}: style scorers on labelled sentences (label 1)")
    for head in (
        "dimension",
        "scorer",
        "sentences",
        "unscored",
        "precision",
        "recall",
        "F1",
        "macro F1",
        "accuracy",
    ):
        table.add_column(head, justify="right")
    for r in records:
        table.add_row(
            r["dimension"],
            r["scorer"],
            str(r["n"]),
            str(r["n_unscored"]),
            *(fmt(r[k]) for k in ("precision", "recall", "f1", "macro_f1", "accuracy")),
        )
    print_table(console, table)
