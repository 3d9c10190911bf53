"""A kind computed per run (``PerRunKind``: pipeline, policy_effect) writes one run's compute,
schema, print and page; the class splits several runs, each under ``models`` with its own name,
and shows them one after another."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
from rich.console import Console

from biasim.simulator.common.html import HtmlSection
from biasim.simulator.kinds import AnalysisContext, Section, get_kind
from biasim.simulator.kinds.sections.per_run import PerRunKind


class _Rows(PerRunKind):
    name = "rows_per_run"

    def compute_run(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        return Section(summary={"name": ctx.name, "rows": len(results)})

    @classmethod
    def run_schema(cls) -> dict[str, Any]:
        return {"type": "object", "required": ["rows"]}

    def print_run(self, summary: dict[str, Any], console: Console) -> None:
        console.print(f"{summary['name']}: {summary['rows']} rows")

    def html_run(self, summary: dict[str, Any], section: HtmlSection) -> None:
        section.paragraph(f"{summary['rows']} rows at {'/'.join(section.path)}")


def _ctx(models: tuple[str, ...]) -> AnalysisContext:
    return AnalysisContext(study=None, name="funnel", models=models)  # type: ignore[arg-type]


def _printed(kind: PerRunKind, summary: dict[str, Any]) -> str:
    out = io.StringIO()
    kind.print(summary, Console(file=out, width=80))
    return out.getvalue()


def test_one_run_is_computed_and_shown_as_it_is() -> None:
    kind = _Rows()
    summary = kind.compute(pd.DataFrame({"model_label": ["a"] * 3}), None, _ctx(("a",))).summary
    assert summary == {"name": "funnel", "rows": 3}
    assert _printed(kind, summary) == "funnel: 3 rows\n"


def test_several_runs_are_split_each_under_models_and_shown_in_turn() -> None:
    kind = _Rows()
    rows = pd.DataFrame({"model_label": ["b", "a", "b"]})
    summary = kind.compute(rows, None, _ctx(("a", "b"))).summary
    assert list(summary["models"]) == ["a", "b"]
    assert summary["models"]["b"] == {"name": "funnel_b", "rows": 2, "model": "b"}
    printed = _printed(kind, {"name": "funnel", **summary})
    assert printed.index("funnel_a: 1 rows") < printed.index("funnel_b: 2 rows")
    section = HtmlSection("Funnel", path=("analyses", "funnel"))
    kind.html(summary, section)
    assert "2 rows at analyses/funnel/models/b" in section.render("x")
    schema = kind.summary_schema()
    assert schema["anyOf"][0] == {"type": "object", "required": ["rows"]}


def test_the_pipeline_kinds_are_computed_per_run() -> None:
    for name in ("pipeline", "policy_effect"):
        assert isinstance(get_kind(name), PerRunKind)
        assert "anyOf" in get_kind(name).summary_schema()
