"""Kinds whose analysis is one study's pipeline (``pipeline``, ``policy_effect``) read several
models or compared runs (``biasim compare``) one by one: documents, pools and who advanced
belong to one run, so pooling two runs' readings into one table would mix their pools. Each run
gets its own summary under ``models``, shown one after another."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rich.console import Console

from biasim.simulator.common.html import HtmlSection
from biasim.simulator.common.results import html_result, print_result, result_schema
from biasim.simulator.kinds.base import AnalysisContext, AnalysisKind, Section, slug
from biasim.simulator.kinds.lazy import pd

# The frame type as a string: reading it would import pandas when a study is validated.
Compute = Callable[["pd.DataFrame", Any, AnalysisContext], Section]


def compute_per_run(
    compute: Compute, results: pd.DataFrame, spec: Any, ctx: AnalysisContext
) -> Section | None:
    """``compute`` on each model label's rows, or None when there is one label (the caller
    computes as usual). Tables and figures are prefixed with the label."""
    labels = ctx.models_in(results)
    if len(labels) < 2:
        return None
    section = Section(summary={"models": {}})
    for label in labels:
        name = slug(ctx.name, label)
        part = compute(
            results[results["model_label"] == label], spec, dataclasses.replace(ctx, name=name)
        )
        part.summary.update(name=name, model=label)
        section.summary["models"][label] = part.summary
        section.tables.update(part.tables)
        section.figures.update(part.figures)
    return section


def per_run_schema(one_run: dict[str, Any]) -> dict[str, Any]:
    """A kind's part of the summary schema when it is computed per run: ``one_run``'s shape,
    or ``models`` (label -> that shape, with the run's ``name`` and ``model``)."""
    run = {**one_run, "required": [*one_run.get("required", ()), "name", "model"]}
    several = {
        "type": "object",
        "required": ["models"],
        "properties": {"models": {"type": "object", "additionalProperties": run}},
    }
    return {"anyOf": [one_run, several], "properties": one_run.get("properties", {})}


def print_per_run(
    show: Callable[[dict[str, Any], Console], None], summary: dict[str, Any], console: Console
) -> bool:
    """Print each run's summary with ``show``; False when the summary is of one run."""
    if "models" not in summary:
        return False
    for label, part in summary["models"].items():
        console.rule(f"{summary['name']}: {label}")
        show(part, console)
    return True


def html_per_run(
    show: Callable[[dict[str, Any], HtmlSection], None],
    summary: dict[str, Any],
    section: HtmlSection,
) -> bool:
    """Write each run's summary with ``show`` under a heading; False when it is of one run."""
    if "models" not in summary:
        return False
    for label, part in summary["models"].items():
        section.heading(label)
        # The same page and figures; numbers point into this run's summary.
        show(part, dataclasses.replace(section, path=(*section.path, "models", label)))
    return True


class PerRunKind(AnalysisKind):
    """A kind computed on each run apart: ``compute_run`` sees one run's rows and builds its
    declared :attr:`result`, whose schema, console and page are one run's; with several
    runs the summary holds each under ``models`` and they are shown one after another."""

    def compute(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        split = compute_per_run(self.compute_run, results, spec, ctx)
        return split if split is not None else self.compute_run(results, spec, ctx)

    def compute_run(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        raise NotImplementedError

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return per_run_schema(cls.run_schema())

    @classmethod
    def run_schema(cls) -> dict[str, Any]:
        """One run's summary shape: its declared result's."""
        assert cls.result is not None, cls.name
        return result_schema(cls.result)

    def print(self, summary: dict[str, Any], console: Console) -> None:
        if not print_per_run(self.print_run, summary, console):
            self.print_run(summary, console)

    def print_run(self, summary: dict[str, Any], console: Console) -> None:
        """One run's summary on the console: its sentences, then its tables."""
        assert self.result is not None, self.name
        print_result(self.result, summary, console, self.headline(summary), self.lines(summary))

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        if not html_per_run(self.html_run, summary, section):
            self.html_run(summary, section)

    def html_run(self, summary: dict[str, Any], section: HtmlSection) -> None:
        """One run's summary in the page: its sentences, tables and figures."""
        assert self.result is not None, self.name
        html_result(self.result, summary, section, self.lines(summary), self.figures(summary))
