"""Kind ``condition_differences``: does a stage's DPD differ between the levels of a condition
factor, e.g. a persona ablation (seed 004, section 5.3 and Fig. 5)? The DPD of every case at
each level side by side (the ablation table), a permutation test of the difference per case,
and a DPD-by-condition figure per model, over the decisions ``demographic_parity`` reads."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console

from biasim.simulator.common.html import HtmlSection
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    Section,
    StudyFacts,
    slug,
    summary_table,
)
from biasim.simulator.kinds.lazy import case_stats, figures, unit_stats
from biasim.simulator.kinds.sections.conditions import (
    add_condition_differences,
    html_condition_differences,
    print_condition_differences,
)
from biasim.simulator.kinds.sections.decisions import (
    PAPER,
    case_tables,
    check_decisions,
    decision_rows,
    figure_order,
    panel_cases,
)
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

if TYPE_CHECKING:
    import pandas as pd

    from biasim.analysis.stats.units import Tested


class ConditionDifferencesSpec(StageDecisionsSpec):
    """The DPD of a stage's decisions compared between the levels of `condition`."""

    kind: Literal["condition_differences"] = "condition_differences"
    condition: str = Field(  # type: ignore[assignment]  # required here
        description="Design factor whose levels are compared case by case (persona ablation)."
    )


class ConditionDifferencesKind(AnalysisKind):
    """The DPD per case at each level of a condition, and the tests of their differences."""

    name = "condition_differences"
    spec = ConditionDifferencesSpec
    title = "DPD between conditions"

    def check(self, spec: ConditionDifferencesSpec, facts: StudyFacts) -> None:
        check_decisions(spec, facts)

    def compute(
        self, results: pd.DataFrame, spec: ConditionDifferencesSpec, ctx: AnalysisContext
    ) -> Section:
        study, name = ctx.study, ctx.name
        section = Section(summary={})
        rows = decision_rows(results, spec, ctx)
        cases = case_tables(rows, spec, ctx).cases
        case_keys = ["model_label", *spec.cases, "attribute"]
        section.tables[f"{name}_ablation"] = case_stats.ablation_table(
            cases, case_keys, spec.condition, conditions=None
        )
        add_condition_differences(
            section,
            ctx,
            rows,
            condition=spec.condition,
            unit_col=unit_stats.UNIT_COLUMNS[spec.unit],
            whole_units=spec.unit == "name",
            case_cols=case_keys,
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
            alpha=spec.alpha,
        )
        panels = panel_cases(spec)
        orders, targets = figure_order(rows, spec, study, panels[0] if panels else "attribute")
        for model, part in cases.groupby("model_label"):
            section.figures[slug(name, "dpd_by_condition", model)] = figures.plot_dpd_by_condition(
                part,
                condition_col=spec.condition,
                case_cols=tuple([*panels, "attribute"]),
                order=[
                    level
                    for level in study.design.factors[spec.condition]
                    if level in set(part[spec.condition])
                ],
                orders=orders,
                targets=targets,
                title=f"DPD by {spec.condition}: {model}",
            )
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        levels = summary.get("condition_levels") or []
        every = " vs ".join(levels)
        omnibus: dict[str, list[dict[str, Any]]] = {}
        for row in summary.get("condition_differences", []):
            if row["compared"] == every and not math.isnan(row["p_adjusted"]):
                omnibus.setdefault(row.get("model_label") or "", []).append(row)
        tests: dict[str, Tested] = {}
        for model, family in omnibus.items():
            at = f"{model}: " if len(omnibus) > 1 else ""
            name = f"{at}DPD differs between {summary['condition_factor']} levels (any case)"
            tests[name] = unit_stats.Tested.family(min(r["p_adjusted"] for r in family), family)
        return tests

    def print(self, summary: dict[str, Any], console: Console) -> None:
        if summary.get("condition_differences"):
            print_condition_differences(summary, console)
        if summary.get("condition_differences_refused"):
            console.print(
                f"  condition differences not tested: {summary['condition_differences_refused']}"
            )

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        prefix = summary["name"]
        for name in section.figures:
            if name.startswith(f"{prefix}_dpd_by_condition"):
                section.figure(name, "DPD by persona condition" + section.cite(PAPER, "Fig. 5"))
        if summary.get("condition_differences"):
            html_condition_differences(summary, section)
        if summary.get("condition_differences_refused"):
            section.paragraph(
                f"Condition differences not tested: {summary['condition_differences_refused']}"
            )

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "condition_factor": {"type": "string", "description": "The factor compared."},
                "condition_levels": {"type": "array", "items": {"type": "string"}},
                "condition_differences": summary_table(
                    "Per case: DPD at each level, spread, permutation p and adjusted p.",
                    required=["compared", "spread", "p_value", "p_adjusted", "significant"],
                ),
                "condition_differences_refused": {
                    "type": "string",
                    "description": "Why the differences could not be tested.",
                },
            },
        }
