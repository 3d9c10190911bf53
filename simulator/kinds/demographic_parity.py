"""Kind ``demographic_parity``: rates of a targeted decision by persona group and the DPD of each
case with its parity test, the exclusions and model estimates around it, and, with several
models, the models side by side with tests of their differences (seed 004, Figs. 4 and 12).

The rest of the seed-004 evidence reads the same decisions as kinds of their own:
``condition_differences`` (persona ablation), ``explicit_bias`` (the question-answering
condition), ``rationale_terms`` and ``predictions_check`` (directional alignment)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt, from_paper
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    Section,
    StudyFacts,
    slug,
    summary_table,
)
from biasim.simulator.kinds.sections.decisions import (
    PAPER,
    across_models_caption,
    add_across_models_figure,
    case_columns,
    case_tables,
    check_decisions,
    decision_rows,
    figure_order,
    panel_cases,
    technique_level,
)
from biasim.simulator.kinds.sections.differences import (
    add_model_differences,
    html_differences,
    print_differences,
)
from biasim.simulator.kinds.sections.exclusions import (
    add_exclusions,
    html_exclusions,
    print_exclusions,
)
from biasim.simulator.kinds.sections.expected import (
    add_expected_decisions,
    dpd_extremes,
    html_expected,
    is_logprob_stage,
    print_expected,
)
from biasim.simulator.kinds.sections.unit_models import (
    add_model_estimates,
    html_grades,
    html_model_estimates,
    print_grades,
    print_model_estimates,
)
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

if TYPE_CHECKING:
    import pandas as pd

    from biasim.analysis.stats.units import Tested

unit_stats = lazy_module("biasim.analysis.stats.units")
case_stats = lazy_module("biasim.analysis.stats.cases")
figures = lazy_module("biasim.analysis.figures")


class DecisionsSpec(StageDecisionsSpec):
    """Decision rates by persona group, and the DPD of each case with its parity test.

    The minimal form (stage, field, target, by) gives rates and one DPD; `cases` split the data
    (scenario, model, ...), `separately` treats each axis as its own case and `condition`
    splits every case by a factor's levels. The kinds `condition_differences`,
    `explicit_bias`, `rationale_terms` and `predictions_check` add the rest of the seed-004
    analysis over the same decisions (give them the same name to keep one set of outputs).
    """

    kind: Literal["demographic_parity"] = "demographic_parity"


_DIFFERENCE_NOTE = (
    "p = permutation test of |DPD A - DPD B|: model labels are swapped within each agent "
    "(same persona, index, replicate and design cell) under the null that both models answer "
    "each agent alike; p adj. over every case and model pair (* = significant)."
)


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
        note += " † = too few units for any data to reach p < alpha: the test cannot reject."
    return note


class DemographicParityKind(AnalysisKind):
    """Decision rates, DPD per case and its parity test (seed 004 and any binary decision)."""

    name = "demographic_parity"
    spec = DecisionsSpec
    title = "Decision rates and demographic parity"

    def check(self, spec: DecisionsSpec, facts: StudyFacts) -> None:
        check_decisions(spec, facts)

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

    def compute(self, results: pd.DataFrame, spec: DecisionsSpec, ctx: AnalysisContext) -> Section:
        study, name = ctx.study, ctx.name
        section = Section(summary={})
        rows = decision_rows(results, spec, ctx)
        case_cols = case_columns(spec)
        tables = case_tables(rows, spec, ctx)
        rates, cases = tables.rates, tables.cases
        section.tables[f"{name}_rates"] = rates
        section.tables[f"{name}_cases"] = cases
        unit_col = unit_stats.UNIT_COLUMNS[spec.unit]
        if is_logprob_stage(ctx, spec.stage) and "probabilities" in rows:
            add_expected_decisions(
                section,
                ctx,
                rows,
                target=rows[spec.target_from] if spec.target_from else spec.target,
                case_cols=case_cols,
                n_permutations=spec.n_permutations,
                unit_col=unit_col,
            )
        self._unit_models(section, rows, spec, ctx, case_cols)
        section.summary.update(
            stage=spec.stage,
            field=spec.field,
            target=spec.target or f"per case ({spec.target_from})",
            case_columns=case_cols,
            groups=rates.to_dict("records"),
            cases=cases.to_dict("records"),
            # The console's captions use the seed paper's words only in its own study.
            seed_paper=from_paper(study.source, PAPER),
        )
        self._share_figures(section, rows, tables, spec, ctx)
        models = ctx.models_in(results)
        if len(models) > 1:
            self._across_models(rows, cases, spec, ctx, models, section)
        return section

    def _unit_models(
        self,
        section: Section,
        rows: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        case_cols: list[str],
    ) -> None:
        """Exclusion tests and model estimates on the kind's unit (``units.UNIT_COLUMNS``): the
        validity and bounds tests relabel it whole, and the models cluster on it across
        scenarios and replicates."""
        unit_col = unit_stats.UNIT_COLUMNS[spec.unit]
        add_exclusions(
            section,
            ctx,
            rows,
            case_cols=case_cols,
            group_col="value",
            hit_col="_hit",
            unit_col=unit_col,
            alpha=spec.alpha,
            n_permutations=spec.n_permutations,
        )
        # One model per case without its first case column (the scenario), which becomes the
        # crossed item: a group's odds ratio across the scenarios, units and items respected.
        items = panel_cases(spec)
        condition = [spec.condition] if spec.condition else []
        add_model_estimates(
            section,
            ctx,
            rows,
            fit_cols=["model_label", *condition, *items[1:], "attribute"],
            group_col="value",
            hit_col="_hit",
            unit_col=unit_col,
            item_col=items[0] if items else None,
        )

    def _share_figures(
        self,
        section: Section,
        rows: pd.DataFrame,
        tables: Any,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
    ) -> None:
        """One decision-shares figure per model (and condition level)."""
        study, name = ctx.study, ctx.name
        rates, cases = tables.rates, tables.cases
        condition = [spec.condition] if spec.condition else []
        panels = panel_cases(spec)
        col_col = panels[0] if panels else "attribute"
        orders, targets = figure_order(rows, spec, study, col_col)
        for key, part in rates.groupby(["model_label", *condition], sort=False):
            key = key if isinstance(key, tuple) else (key,)
            mask = np.logical_and.reduce(
                [cases[c] == v for c, v in zip(["model_label", *condition], key, strict=True)]
            )
            section.figures[slug(name, "shares", *key)] = figures.plot_decision_shares(
                part,
                cases[mask],
                col_col=col_col,
                targets=targets,
                orders=orders,
                title=f"{study.name}: {' / '.join(map(str, key))}",
            )

    def _across_models(
        self,
        rows: pd.DataFrame,
        cases: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        models: list[str],
        section: Section,
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
            technique = technique_level(ctx.study, spec.condition, cases[spec.condition]) or ""
            drawn = cases[cases[spec.condition] == technique]
        add_across_models_figure(section, drawn, rows, spec, ctx, models, "implicit", technique)
        answered = rows[rows["_hit"].notna()]
        add_model_differences(
            section,
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

    def print(self, summary: dict[str, Any], console: Console) -> None:
        print_expected(summary, console)
        case_cols = [c for c in summary["case_columns"] if c != "model_label"]
        cases = summary["cases"]
        if len(cases) == 1:
            table = Table(
                title=f"Rate of {summary['field']} = {summary['target']} ({summary['stage']})"
            )
            for col in ("group", "valid n", "excluded", "targeted", "rate", "95% CI (Wilson)"):
                table.add_column(col, justify="right")
            for row in summary["groups"]:
                table.add_row(
                    str(row["value"]),
                    str(row["n_valid"]),
                    str(row["n_excluded"]),
                    str(row["k"]),
                    fmt(row["rate"]),
                    f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]",
                )
            print_table(console, table)
        table = Table(title=f"Demographic parity difference per case ({summary['name']})")
        columns = ("model", *case_cols, "DPD", "highest", "lowest", "threshold", "by chance")
        for col in (*columns, "p", "unit", "excluded"):
            table.add_column(col, justify="right", no_wrap=col == "unit")
        for row in cases:
            mark = "*" if row["significant"] else ""
            table.add_row(
                str(row["model_label"]),
                *[str(row[c]) for c in case_cols],
                f"{fmt(row['dpd'])}{mark}",
                *dpd_extremes(row["dpd"], row.get("max_group"), row.get("min_group")),
                fmt(row["threshold"]),
                fmt(row["chance_dpd"]),
                fmt(row["p_value"], "p") + ("" if row.get("can_reject", True) else " †"),
                unit_stats.unit_label(row.get("unit"), row.get("n_units")).removeprefix("unit: "),
                str(row["n_excluded"]),
            )
        print_table(console, table)
        console.print(case_note(cases, bool(summary.get("seed_paper"))))
        print_exclusions(summary.get("exclusions", []), ["model_label", *case_cols], console)
        print_model_estimates(summary.get("model_estimates", []), _fit_keys(summary), console)
        print_grades(summary.get("model_grades", []), console)
        differences = summary.get("model_differences") or []
        if differences:
            print_differences(
                differences,
                [c for c in differences[0] if c in case_cols],
                f"Differences between models per case ({summary['name']})",
                _DIFFERENCE_NOTE,
                console,
            )

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        html_expected(summary, section)
        case_cols = [c for c in summary["case_columns"] if c != "model_label"]
        section.paragraph(
            f"Rate of {summary['field']} = {summary['target']} in stage {summary['stage']}, by "
            "persona group, with Wilson 95% intervals; invalid or undecided answers are excluded "
            "and counted."
        )
        _html_case_tables(summary, section, case_cols)
        html_exclusions(section, summary.get("exclusions", []), ["model_label", *case_cols])
        html_model_estimates(section, summary.get("model_estimates", []), _fit_keys(summary))
        html_grades(section, summary.get("model_grades", []))
        prefix = summary["name"]
        for name in section.figures:
            if name.startswith(f"{prefix}_shares"):
                section.figure(name, "Decision shares per case" + section.cite(PAPER, "Fig. 4"))
        differences = summary.get("model_differences")
        if differences:
            html_differences(
                section,
                differences,
                [c for c in differences[0] if c in case_cols],
                "Differences between models per case",
                _DIFFERENCE_NOTE,
            )
            section.figure(*across_models_caption(prefix, section.from_paper(PAPER), "implicit"))

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["cases"],
            "properties": {
                "stage": {"type": "string"},
                "field": {"type": "string"},
                "target": {"type": "string", "description": "The targeted decision."},
                "case_columns": {"type": "array", "items": {"type": "string"}},
                "groups": summary_table("Rates per group and case (Wilson 95% CI)."),
                "cases": summary_table(
                    "DPD per case with its parity test, unit and threshold.",
                    required=["model_label", "dpd", "p_value", "significant"],
                ),
                "seed_paper": {"type": "boolean"},
                "exclusions": summary_table("Validity test and exclusion bounds per case."),
                "model_estimates": summary_table("Model-based group estimates per fit."),
                "model_grades": summary_table("Each model's grade across fits."),
                "model_differences": summary_table("Tests of DPD differences between models."),
                "model_order": {"type": "array", "items": {"type": "string"}},
                "expected": {"type": "object", "description": "Expected decisions (logprobs)."},
            },
        }


def _html_case_tables(summary: dict[str, Any], section: HtmlSection, case_cols: list[str]) -> None:
    """The DPD per case and the rates per group."""
    text = [Column("model_label", "model"), *[Column(c) for c in case_cols]]
    section.table(
        summary["cases"],
        key="cases",
        title="Demographic parity difference per case",
        columns=[
            *text,
            Column("n_valid", "valid n", "int"),
            Column("n_excluded", "excluded", "int"),
            Column("dpd", "DPD", ".3f", star="significant"),
            Column("max_group", "highest rate"),
            Column("min_group", "lowest rate"),
            Column("threshold", "threshold", ".3f"),
            Column("chance_dpd", "by chance", ".3f"),
            Column("p_value", "p", "p"),
            Column("test", "test"),
            Column("unit", "unit"),
            Column("n_units", "units", "int"),
        ],
        note=case_note(summary["cases"], section.from_paper(PAPER)),
    )
    section.table(
        summary["groups"],
        key="groups",
        title="Rates per group",
        columns=[
            *text,
            Column("value", "group"),
            Column("n_valid", "valid n", "int"),
            Column("n_excluded", "excluded", "int"),
            Column("k", "targeted", "int"),
            Column("rate", "rate", ".3f"),
            Column("ci_low", "95% CI (Wilson)", "ci", upper="ci_high"),
        ],
    )


def _fit_keys(summary: dict[str, Any]) -> list[str]:
    """The columns that name a model fit: the case columns without the crossed item."""
    return [c for c in summary["case_columns"] if c != summary.get("model_estimates_item")]


def _side_by_side(cases: pd.DataFrame, keys: list[str], models: list[str]) -> pd.DataFrame:
    """One row per case, the DPD, significance and p-value of each model in columns."""
    wide = cases.pivot_table(
        index=keys, columns="model_label", values=["dpd", "p_value"], aggfunc="first"
    )
    wide.columns = [f"{stat}_{model}" for stat, model in wide.columns]
    ordered = [f"{stat}_{m}" for m in models for stat in ("dpd", "p_value")]
    return wide.reindex(columns=[c for c in ordered if c in wide.columns]).reset_index()
