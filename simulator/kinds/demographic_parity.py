"""Kind ``demographic_parity``: rates of a targeted decision by persona group and the DPD of each
case with its parity test, the exclusions and model estimates around it, and, with several
models, the models side by side with tests of their differences (seed 004, Figs. 4 and 12).

The rest of the seed-004 evidence reads the same decisions as kinds of their own:
``condition_differences`` (persona ablation), ``explicit_bias`` (the question-answering
condition), ``rationale_terms`` and ``predictions_check`` (directional alignment)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from biasim.simulator.common.html import from_paper
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.base import Section, slug
from biasim.simulator.kinds.lazy import case_stats, figures, refusals, unit_stats
from biasim.simulator.kinds.sections import decisions, unit_models
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.differences import MODEL_DIFFERENCES, model_differences
from biasim.simulator.kinds.sections.exclusions import EXCLUSIONS
from biasim.simulator.kinds.sections.expected import (
    ExpectedDecisions,
    add_expected_decisions,
    is_logprob_stage,
)
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

if TYPE_CHECKING:
    import pandas as pd

    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext


class DecisionsSpec(StageDecisionsSpec):
    """Decision rates by persona group, and the DPD of each case with its parity test.

    The minimal form (stage, field, target, by) gives rates and one DPD; `cases` split the data
    (scenario, model, ...), `separately` treats each axis as its own case and `condition`
    splits every case by a factor's levels. The kinds `condition_differences`,
    `explicit_bias`, `rationale_terms` and `predictions_check` add the rest of the seed-004
    analysis over the same decisions (give them the same name to keep one set of outputs).
    """

    kind: Literal["demographic_parity"] = "demographic_parity"


def case_note(cases: list[dict[str, Any]], seed_paper: bool) -> str:
    """What the case table's threshold and p mean, for the tests its cases used (naming the
    binomial one as the paper's only in the seed paper's own study)."""
    tests = {row.get("test") for row in cases}
    parts = []
    if case_stats.BINOMIAL_TEST in tests:
        parts.append(
            "in binomial simulations at the pooled rate where each unit answered once"
            + (" (the paper's test)" if seed_paper else "")
        )
    if case_stats.UNIT_TEST in tests:
        parts.append(
            "over relabellings of whole units between groups where units answered more than "
            "once (replicates: a unit's answers share its propensity, so answers are not "
            "independent draws)"
        )
    note = (
        "DPD = max - min rate of the targeted decision; threshold = 95th percentile of DPD "
        + "; or ".join(parts)
        + " (* = significant); 'by chance' = mean DPD under the null."
    )
    if any(row.get("can_reject") is False and row.get("test") for row in cases):
        note += " can reject 'no': too few units for any data to reach p < alpha."
    return note


TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class DemographicParityResult:
    """What ``demographic_parity`` computes; the summary, its schema and the renderings come
    from it."""

    stage: str = field(metadata=about("The stage whose decisions are read."))
    target: str = field(metadata=about("The targeted decision."))
    case_columns: list[str] = field(metadata=about("What splits the decisions into cases."))
    seed_paper: bool = field(metadata=about("Whether the study is the seed paper's own."))
    cases_note: str = field(metadata=about("What the case table's threshold and p mean."))
    expected: ExpectedDecisions | None = field(
        default=None, metadata=about("Expected decisions (stage answered with logprobs).")
    )
    groups: Records = field(metadata=tabled(TABLES["groups"]))
    cases: Records = field(metadata=tabled(TABLES["cases"]))
    exclusions: Records = field(metadata=tabled(EXCLUSIONS))
    model_estimates: Records = field(metadata=tabled(unit_models.MODEL_ESTIMATES))
    model_estimates_item: str | None = field(
        default=None, metadata=about("The crossed item of the model fits (not a fit's key).")
    )
    model_grades: Records | None = field(
        default=None, metadata=tabled(unit_models.TABLES["model_grades"])
    )
    model_order: list[str] | None = field(
        default=None, metadata=about("The models compared, in order.")
    )
    model_differences: Records | None = field(default=None, metadata=tabled(MODEL_DIFFERENCES))
    share_figures: list[str] = field(metadata=about("Decision-share figures, per model."))
    grade_figures: list[str] = field(
        default_factory=list, metadata=about("Model-grade figures, one per contrast.")
    )
    # Last: the name shadows ``dataclasses.field`` in the class body below it.
    field: str = field(metadata=about("Its decision field."))


class DemographicParityKind(
    decisions.DecisionsKind, spec=DecisionsSpec, result=DemographicParityResult
):
    """Decision rates, DPD per case and its parity test (seed 004 and any binary decision)."""

    title = "Decision rates and demographic parity"

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        tests: dict[str, Tested] = {}
        by_model: dict[str, list[dict[str, Any]]] = {}
        for case in summary.get("cases", []):
            if case.get("p_value") is not None and not math.isnan(case["p_value"]):
                by_model.setdefault(case.get("model_label") or "", []).append(case)
        several = len(by_model) > 1
        for model, family in by_model.items():
            at = f"{model}: " if several else ""
            # Holm's smallest adjusted p: is any case's DPD significant over the family?
            p = min(1.0, min(c["p_value"] for c in family) * len(family))
            name = f"{at}any case DPD (holm over {len(family)} cases)"
            tests[name] = unit_stats.Tested.family(p, family)
        expected = [c for c in (summary.get("expected") or {}).get("cases", []) if "p_value" in c]
        for case in expected:
            at = f"{case.get('model_label')}: " if several else ""
            # Expected decisions from log-probabilities, against the sampled DPD above.
            tests[f"{at}expected decisions DPD ({case.get('attribute')})"] = unit_stats.Tested.of(
                case, "p_value"
            )
        return tests

    def audit_strata(self, spec: DecisionsSpec) -> list[str]:
        return [c for c in [spec.condition, *spec.cases] if c and c != "model_label"]

    def selections(
        self, results: pd.DataFrame, spec: DecisionsSpec, ctx: AnalysisContext
    ) -> pd.DataFrame:
        """Each decision of the analysed stage with ``selected``: the targeted decision was
        made (NA when the answer is invalid or missing)."""
        rows = results[results["stage"] == spec.stage]
        target = rows[spec.target_from] if spec.target_from else spec.target
        answered = rows["valid"].astype("boolean").fillna(False) & rows[spec.field].notna()
        return rows.assign(selected=(rows[spec.field] == target).astype("boolean").where(answered))

    def read(self, stage: decisions.Decisions, spec: DecisionsSpec) -> DemographicParityResult:
        results, rows, ctx, section = stage
        study, name = ctx.study, ctx.name
        case_cols = decisions.case_columns(spec)
        tables = decisions.case_tables(rows, spec, ctx)
        seed_paper = from_paper(study.source, decisions.PAPER)
        cases = TABLES["cases"].write(section.tables, name, tables.cases)
        result = DemographicParityResult(
            stage=spec.stage,
            field=spec.field,
            target=spec.target or f"per case ({spec.target_from})",
            case_columns=case_cols,
            # The captions and notes use the seed paper's words only in its own study.
            seed_paper=seed_paper,
            cases_note=case_note(cases, seed_paper),
            groups=TABLES["groups"].write(section.tables, name, tables.rates),
            cases=cases,
            exclusions=[],
            model_estimates=[],
            share_figures=self._share_figures(section, rows, tables, spec, ctx),
        )
        if is_logprob_stage(ctx, spec.stage) and "probabilities" in rows:
            result.expected = add_expected_decisions(
                section.tables,
                ctx,
                rows,
                target=rows[spec.target_from] if spec.target_from else spec.target,
                case_cols=case_cols,
                n_permutations=spec.n_permutations,
                unit_col=unit_stats.UNIT_COLUMNS[spec.unit],
            )
        self._unit_models(section, result, rows, spec, ctx)
        models = ctx.models_in(results)
        if len(models) > 1:
            self._across_models(rows, tables.cases, spec, ctx, models, section, result)
        return result

    def _unit_models(
        self,
        section: Section,
        result: DemographicParityResult,
        rows: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
    ) -> None:
        """Exclusion tests and model estimates on the kind's unit (``units.UNIT_COLUMNS``): the
        validity and bounds tests relabel it whole, and the models cluster on it across
        scenarios and replicates."""
        unit_col = unit_stats.UNIT_COLUMNS[spec.unit]
        exclusions = refusals.case_exclusions(
            rows,
            decisions.case_columns(spec),
            "value",
            "_hit",
            unit_col=unit_col,
            alpha=spec.alpha,
            n_permutations=spec.n_permutations,
            seed=ctx.study.seed,
        )
        result.exclusions = EXCLUSIONS.write(section.tables, ctx.name, exclusions)
        # One model per case without its first case column (the scenario), which becomes the
        # crossed item: a group's odds ratio across the scenarios, units and items respected.
        items = decisions.panel_cases(spec)
        condition = [spec.condition] if spec.condition else []
        item = items[0] if items else None
        estimates, grades = unit_models.add_model_estimates(
            section,
            ctx,
            rows,
            fit_cols=["model_label", *condition, *items[1:], "attribute"],
            group_col="value",
            hit_col="_hit",
            unit_col=unit_col,
            item_col=item,
        )
        result.model_estimates = unit_models.MODEL_ESTIMATES.write(
            section.tables, ctx.name, estimates
        )
        result.model_estimates_item = item
        if grades is not None:
            result.model_grades = unit_models.TABLES["model_grades"].write(
                section.tables, ctx.name, grades
            )
            result.grade_figures = [n for n in section.figures if "_model_grades" in n]

    def _share_figures(
        self,
        section: Section,
        rows: pd.DataFrame,
        tables: Any,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
    ) -> list[str]:
        """One decision-shares figure per model (and condition level): their names."""
        study, name = ctx.study, ctx.name
        rates, cases = tables.rates, tables.cases
        condition = [spec.condition] if spec.condition else []
        panels = decisions.panel_cases(spec)
        col_col = panels[0] if panels else "attribute"
        orders, targets = decisions.figure_order(rows, spec, study, col_col)
        names = []
        for key, part in rates.groupby(["model_label", *condition], sort=False):
            key = key if isinstance(key, tuple) else (key,)
            mask = np.logical_and.reduce(
                [cases[c] == v for c, v in zip(["model_label", *condition], key, strict=True)]
            )
            names.append(slug(name, "shares", *key))
            section.figures[names[-1]] = figures.plot_decision_shares(
                part,
                cases[mask],
                col_col=col_col,
                targets=targets,
                orders=orders,
                title=f"{study.name}: {' / '.join(map(str, key))}",
            )
        return names

    def _across_models(
        self,
        rows: pd.DataFrame,
        cases: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        models: list[str],
        section: Section,
        result: DemographicParityResult,
    ) -> None:
        """Cases side by side per model, Fig. 12, and a test per case and model pair."""
        name = ctx.name
        condition = [spec.condition] if spec.condition else []
        case_keys = [*condition, *spec.cases, "attribute"]
        section.tables[f"{name}_cases_by_model"] = _side_by_side(cases, case_keys, models)
        # Fig. 12 compares models on the paper's technique: the last persona condition when
        # there are several.
        drawn, technique = cases, ""
        if spec.condition and cases[spec.condition].nunique() > 1:
            technique = (
                decisions.technique_level(ctx.study, spec.condition, cases[spec.condition]) or ""
            )
            drawn = cases[cases[spec.condition] == technique]
        decisions.add_across_models_figure(
            section, drawn, rows, spec, ctx, models, "implicit", technique
        )
        answered = rows[rows["_hit"].notna()]
        tests = model_differences(
            ctx,
            answered.assign(_hit=answered["_hit"].astype(bool)),
            models=models,
            case_cols=case_keys,
            group_col="value",
            outcome_col="_hit",
            id_col="agent_id",
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
        )
        result.model_order = models
        result.model_differences = MODEL_DIFFERENCES.write(section.tables, name, tests)

    def headline(self, summary: dict[str, Any]) -> str:
        return (
            f"({self.name}): the rate of {summary['field']} = {summary['target']} in stage "
            f"{summary['stage']} by persona group, and the DPD per case"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        return [
            "Invalid or undecided answers are excluded and counted; rates with Wilson 95% "
            "intervals."
        ]

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        seed_paper = bool(summary.get("seed_paper"))
        shares = "Decision shares per case" + (
            f" ({decisions.PAPER}, Fig. 4)" if seed_paper else ""
        )
        out = [(name, shares) for name in summary["share_figures"]]
        out += [(name, "Models graded by their disparity") for name in summary["grade_figures"]]
        if summary.get("model_differences"):
            out.append(decisions.across_models_caption(summary["name"], seed_paper, "implicit"))
        return out


def _side_by_side(cases: pd.DataFrame, keys: list[str], models: list[str]) -> pd.DataFrame:
    """One row per case, the DPD, significance and p-value of each model in columns."""
    wide = cases.pivot_table(
        index=keys, columns="model_label", values=["dpd", "p_value"], aggfunc="first"
    )
    wide.columns = [f"{stat}_{model}" for stat, model in wide.columns]
    ordered = [f"{stat}_{m}" for m in models for stat in ("dpd", "p_value")]
    return wide.reindex(columns=[c for c in ordered if c in wide.columns]).reset_index()
