"""Kind ``condition_differences``: does a stage's DPD differ between the levels of a condition
factor, e.g. a persona ablation (seed 004, section 5.3 and Fig. 5)? The DPD of every case at
each level side by side (the ablation table), a permutation test of the difference per case,
and a DPD-by-condition figure per model, over the decisions ``demographic_parity`` reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import from_paper
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.base import slug
from biasim.simulator.kinds.lazy import case_stats, figures, unit_stats
from biasim.simulator.kinds.sections import decisions
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.conditions import condition_differences
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested


class ConditionDifferencesSpec(StageDecisionsSpec):
    """The DPD of a stage's decisions compared between the levels of `condition`."""

    kind: Literal["condition_differences"] = "condition_differences"
    condition: str = Field(  # type: ignore[assignment]  # required here
        description="Design factor whose levels are compared case by case (persona ablation)."
    )


#: The table of its result, declared in condition_differences.tables.yaml.
TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class ConditionDifferencesResult:
    """What ``condition_differences`` computes; the summary, its schema and the renderings
    come from it."""

    condition_factor: str = field(metadata=about("The factor whose levels are compared."))
    condition_levels: list[str] = field(metadata=about("Its levels present, in study order."))
    model_labels: list[str] = field(metadata=about("The models, one DPD-by-condition figure each."))
    seed_paper: bool = field(metadata=about("Whether the study is the seed paper's own."))
    condition_differences: Records | None = field(
        default=None, metadata=tabled(TABLES["condition_differences"])
    )
    condition_differences_refused: str | None = field(
        default=None, metadata=about("Why the differences could not be tested.")
    )


class ConditionDifferencesKind(
    decisions.DecisionsKind, spec=ConditionDifferencesSpec, result=ConditionDifferencesResult
):
    """The DPD per case at each level of a condition, and the tests of their differences."""

    title = "DPD between conditions"

    def read(
        self, stage: decisions.Decisions, spec: ConditionDifferencesSpec
    ) -> ConditionDifferencesResult:
        _, rows, ctx, section = stage
        study, name = ctx.study, ctx.name
        cases = decisions.case_tables(rows, spec, ctx).cases
        case_keys = ["model_label", *spec.cases, "attribute"]
        section.tables[f"{name}_ablation"] = case_stats.ablation_table(
            cases, case_keys, spec.condition, conditions=None
        )
        tests, levels, refused = condition_differences(
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
        result = ConditionDifferencesResult(
            condition_factor=spec.condition,
            condition_levels=levels,
            model_labels=[str(m) for m in cases["model_label"].unique()],
            seed_paper=from_paper(study.source, decisions.PAPER),
            condition_differences_refused=refused,
        )
        if tests is not None:
            result.condition_differences = TABLES["condition_differences"].write(
                section.tables, name, tests
            )
        panels = decisions.panel_cases(spec)
        orders, targets = decisions.figure_order(
            rows, spec, study, panels[0] if panels else "attribute"
        )
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
        return result

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

    def headline(self, summary: dict[str, Any]) -> str:
        return f"({self.name}): the DPD per case between {summary['condition_factor']} levels"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        levels = summary["condition_levels"]
        if summary.get("condition_differences_refused"):
            return [f"condition differences not tested: {summary['condition_differences_refused']}"]
        if len(levels) < 2:
            return [f"condition differences not tested: fewer than two levels ({levels})"]
        return [f"levels compared: {', '.join(levels)}"]

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        caption = "DPD by persona condition" + (
            f" ({decisions.PAPER}, Fig. 5)" if summary.get("seed_paper") else ""
        )
        return [
            (slug(summary["name"], "dpd_by_condition", m), caption) for m in summary["model_labels"]
        ]
