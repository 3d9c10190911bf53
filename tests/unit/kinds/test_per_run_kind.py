"""A kind computed per run (``PerRunKind``: pipeline, policy_effect) declares one run's result
and computes one run; the class splits several runs, each under ``models`` with its own name,
and shows them one after another, each through the one rendering of its declared result."""

from __future__ import annotations

import html
import io
import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from rich.console import Console

from biasim.simulator.common.html import Column, HtmlSection
from biasim.simulator.common.result_tables import Records, ResultTable
from biasim.simulator.common.results import about, result_schema, summary_of, tabled
from biasim.simulator.kinds import AnalysisContext, Section, get_kind
from biasim.simulator.kinds.sections.per_run import PerRunKind

_BY_KIND = ResultTable(
    key="by_kind",
    title="rows by kind",
    columns=(
        Column("kind", "kind", description="A row's kind."),
        Column("n", "rows", "int", description="Its rows."),
    ),
    description="Rows per kind.",
)


@dataclass(kw_only=True)
class _Result:
    rows: int = field(metadata=about("Rows of the run."))
    by_kind: Records = field(metadata=tabled(_BY_KIND))


class _Rows(PerRunKind):
    name = "rows_per_run"
    result = _Result

    def compute_run(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        section = Section(summary={})
        counts = results.groupby("kind").size().rename("n").reset_index()
        result = _Result(
            rows=len(results), by_kind=_BY_KIND.write(section.tables, ctx.name, counts)
        )
        section.summary = summary_of(result)
        return section

    def lines(self, summary: dict[str, Any]) -> list[str]:
        return [f"{summary['rows']} rows"]


def _ctx(models: tuple[str, ...]) -> AnalysisContext:
    return AnalysisContext(study=None, name="funnel", models=models)  # type: ignore[arg-type]


def _printed(kind: PerRunKind, summary: dict[str, Any]) -> str:
    out = io.StringIO()
    kind.print(summary, Console(file=out, width=80))
    return out.getvalue()


def test_one_run_is_computed_and_shown_as_it_is() -> None:
    kind = _Rows()
    rows = pd.DataFrame({"model_label": ["a"] * 3, "kind": ["x", "y", "x"]})
    section = kind.compute(rows, None, _ctx(("a",)))
    assert section.summary == {"rows": 3, "by_kind": [{"kind": "x", "n": 2}, {"kind": "y", "n": 1}]}
    assert list(section.tables) == ["funnel_by_kind"]
    printed = _printed(kind, {"name": "funnel", **section.summary})
    assert printed.startswith("funnel (rows_per_run)\n  3 rows\nfunnel: rows by kind\n")


def test_several_runs_are_split_each_under_models_and_shown_in_turn() -> None:
    kind = _Rows()
    rows = pd.DataFrame({"model_label": ["b", "a", "b"], "kind": ["x", "x", "y"]})
    split = kind.compute(rows, None, _ctx(("a", "b")))
    summary = split.summary
    assert list(summary["models"]) == ["a", "b"]
    assert summary["models"]["b"]["name"] == "funnel_b" and summary["models"]["b"]["rows"] == 2
    assert list(split.tables) == ["funnel_a_by_kind", "funnel_b_by_kind"]
    printed = _printed(kind, {"name": "funnel", **summary})
    assert printed.index("funnel_a (rows_per_run)") < printed.index("funnel_b (rows_per_run)")
    assert printed.index("funnel_a: rows by kind") < printed.index("funnel_b: rows by kind")
    section = HtmlSection("Funnel", path=("analyses", 0))
    kind.html(summary, section)
    page = html.unescape(section.render("x"))
    # Each run's numbers point into its own summary.
    assert 'data-path="' + json.dumps(["analyses", 0, "models", "b", "by_kind", 1, "n"]) in page
    schema = kind.summary_schema()
    assert schema["anyOf"][0] == result_schema(_Result)


def test_the_pipeline_kinds_are_computed_per_run() -> None:
    for name in ("pipeline", "policy_effect"):
        assert isinstance(get_kind(name), PerRunKind)
        assert get_kind(name).result is not None
        assert "anyOf" in get_kind(name).summary_schema()
