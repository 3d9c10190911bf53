"""Table 19 of seed 002 in the letters kind and ``analyze --texts``: each style scorer given
labelled sentences (``style: {dim: {labelled: FILE}}``) gets its precision, recall and F1 there
(``analysis.text.classifier_metrics``), in a table declared once in its codebook
(:data:`TABLE`, ``classifier_metrics.tables.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import classifier_metrics, pd
from biasim.simulator.kinds.sections.codebook import tables_of

#: Table 19: each scorer's precision, recall and F1 on its labelled sentences (label 1),
#: declared in classifier_metrics.tables.yaml.
TABLE = tables_of(__name__)["classifiers"]


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
        section.summary["classifiers"] = TABLE.write(section.tables, ctx.name, table)
