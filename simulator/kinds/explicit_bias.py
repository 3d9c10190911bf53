"""Kind ``explicit_bias``: the explicit-bias question-answering condition of seed 004 (appendix D,
section 5.1, Figs. 3 and 11). Stages ask the model outright for the likely attribute of whoever
acted; the DPD of the attribute named is compared with the implicit DPD of the agents'
decisions (``demographic_parity``'s, over the same stage): the excess over chance under the
joint null, and the paper's t-test of raw DPDs for comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console
from rich.text import Text

from biasim.simulator.common.html import Column, HtmlSection, cite, fmt, format_p, from_paper
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    Section,
    StudyFacts,
    slug,
    summary_table,
)
from biasim.simulator.kinds.explicit_questions import tie_questions
from biasim.simulator.kinds.lazy import case_stats, excess_stats, figures, unit_stats
from biasim.simulator.kinds.sections.decisions import (
    PAPER,
    CaseTables,
    case_columns,
    case_tables,
    check_decisions,
    decision_rows,
    figure_order,
    in_words,
    panel_cases,
    t_test_name,
    technique_level,
)
from biasim.simulator.study.decisions_spec import StageDecisionsSpec
from biasim.simulator.study.fields import Strict

if TYPE_CHECKING:
    import pandas as pd

    from biasim.analysis.stats.units import Tested


class ExplicitConfig(Strict):
    """The explicit-bias question-answering condition (seed 004, appendix D)."""

    stages: list[str] | dict[str, str] = Field(
        min_length=1,
        description="Stages asking for the likely attribute: a list (each stage asks about the "
        "axis its `when` names, or the analysis's only axis) or a mapping from the axis asked "
        "about (an axis of `by`, or all of them crossed as `race×gender`) to its stage.",
    )
    field: str = Field("answer", description="Output field holding the chosen attribute label.")
    unknown: str = Field("Unknown", description="The label meaning undecided / equally likely.")


class ExplicitBiasSpec(StageDecisionsSpec):
    """The explicit question-answering condition against a stage's implicit decisions."""

    kind: Literal["explicit_bias"] = "explicit_bias"
    explicit: ExplicitConfig


class ExplicitBiasKind(AnalysisKind):
    """Explicit DPDs per case and their comparison with the implicit ones."""

    name = "explicit_bias"
    spec = ExplicitBiasSpec
    title = "Implicit and explicit bias"

    def check(self, spec: ExplicitBiasSpec, facts: StudyFacts) -> None:
        """The decisions, then each explicit stage with the answer field, tied to the one axis
        it asks about; a design whose questions would pool into one case is refused."""
        check_decisions(spec, facts)
        stages = spec.explicit.stages
        keys = list(stages) if isinstance(stages, dict) else list(range(len(stages)))
        names = list(stages.values()) if isinstance(stages, dict) else stages
        for key, stage in zip(keys, names, strict=True):
            facts.need_field(
                stage, spec.explicit.field, ("explicit", "field"), ("explicit", "stages", key)
            )
        ties = tie_questions(stages, spec.groups, spec.separately, facts.config)
        for path, message in ties.problems:
            facts.problem(path, message)

    def compute(
        self, results: pd.DataFrame, spec: ExplicitBiasSpec, ctx: AnalysisContext
    ) -> Section:
        study, name = ctx.study, ctx.name
        section = Section(
            summary={
                "case_columns": case_columns(spec),
                "seed_paper": from_paper(study.source, PAPER),
            }
        )
        rows = decision_rows(results, spec, ctx)
        implicit = case_tables(rows, spec, ctx)
        explicit_cols = ["model_label", *spec.cases, "attribute"]
        x_rates = case_stats.explicit_rates(
            _explicit_trials(results, spec, study),
            explicit_cols,
            spec.explicit.field,
            unknown=spec.explicit.unknown,
            labels=_explicit_labels(study, spec),
        )
        x_cases = case_stats.explicit_parity(
            x_rates,
            explicit_cols,
            unknown=spec.explicit.unknown,
            alpha=spec.alpha,
            n_simulations=spec.n_simulations,
            seed=study.seed,
        )
        section.tables[f"{name}_explicit_rates"] = x_rates
        section.tables[f"{name}_explicit_cases"] = x_cases
        comparison = _comparison(section, implicit, (x_rates, x_cases), spec, ctx)
        section.tables[f"{name}_implicit_vs_explicit"] = comparison
        section.figures[slug(name, "implicit_vs_explicit")] = figures.plot_implicit_explicit(
            comparison,
            model_order=ctx.models_in(comparison) or None,
            t_test=t_test_name(from_paper(study.source, PAPER)).lower(),
        )
        section.summary["explicit_cases"] = x_cases.to_dict("records")
        section.summary["implicit_vs_explicit"] = comparison.to_dict("records")
        models = ctx.models_in(results)
        if len(models) > 1:
            _explicit_by_model(section, rows, x_cases, spec, ctx, models)
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        tests: dict[str, Tested] = {}
        rows = summary.get("implicit_vs_explicit", [])
        for row in rows:
            at = f"{row['model_label']}: " if len(rows) > 1 else ""
            tests[f"{at}implicit vs explicit beyond chance"] = unit_stats.Tested.of(row, "p_excess")
            # The paper's t-test compares case DPDs: each case is one draw.
            cases = int(row.get("n_cases_implicit") or 0) + int(row.get("n_cases_explicit") or 0)
            tests[f"{at}implicit vs explicit, paper's t-test"] = unit_stats.Tested(
                row.get("p_value"), "case", cases
            )
        return tests

    def print(self, summary: dict[str, Any], console: Console) -> None:
        for row in summary.get("implicit_vs_explicit", []):
            console.print(
                Text("implicit vs explicit", style="bold")
                + f" ({row['model_label']}): DPD beyond chance "
                f"{fmt(row.get('mean_excess_implicit'), '+.3f')} implicit vs "
                f"{fmt(row.get('mean_excess_explicit'), '+.3f')} explicit, difference "
                f"{fmt(row.get('excess_difference'), '+.3f')} (p {format_p(row.get('p_excess'))}, "
                f"joint-null bootstrap). {t_test_name(summary.get('seed_paper'))} (raw DPDs, "
                "not comparable: chance levels differ): implicit mean DPD "
                f"{fmt(row['mean_dpd_implicit'])} (sd "
                f"{fmt(row['sd_dpd_implicit'])}, {row['n_significant_implicit']}/"
                f"{row['n_cases_implicit']} significant) vs explicit "
                f"{fmt(row['mean_dpd_explicit'])} (sd {fmt(row['sd_dpd_explicit'])}, "
                f"{row['n_significant_explicit']}/{row['n_cases_explicit']} significant); "
                f"t = {fmt(row['t_statistic'], '.2f')}, p {format_p(row['p_value'])}"
            )

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        _html_explicit(summary, section)
        prefix = summary["name"]
        if slug(prefix, "explicit_by_model") in section.figures:
            section.figure(
                slug(prefix, "explicit_by_model"),
                in_words(
                    section.from_paper(PAPER),
                    "Explicit bias per case across models",
                    "DPD of the answers to the direct question per case across models",
                )
                + section.cite(PAPER, "Fig. 11"),
            )

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["explicit_cases", "implicit_vs_explicit"],
            "properties": {
                "seed_paper": {"type": "boolean"},
                "implicit_condition": {
                    "type": ["string", "null"],
                    "description": "The condition level whose implicit DPDs are compared.",
                },
                "explicit_cases": summary_table(
                    "DPD of the attribute named per case (Unknown excluded), its parity test.",
                    required=["model_label", "dpd", "p_value"],
                ),
                "implicit_vs_explicit": summary_table(
                    "Per model: mean DPDs, the excess over chance (joint-null bootstrap) and "
                    "the paper's t-test of raw DPDs.",
                    required=["model_label", "p_excess", "p_value"],
                ),
            },
        }


def _comparison(
    section: Section,
    implicit: CaseTables,
    explicit: tuple[pd.DataFrame, pd.DataFrame],
    spec: ExplicitBiasSpec,
    ctx: AnalysisContext,
) -> pd.DataFrame:
    """The implicit cases against the explicit ones: the paper's t-test of raw DPDs and the
    excess over chance tested under the joint null. With a condition, the implicit side is
    the paper's technique (its last level)."""
    x_rates, x_cases = explicit
    rates, cases, units = implicit.rates, implicit.cases, implicit.units
    if spec.condition:
        level = technique_level(ctx.study, spec.condition, cases[spec.condition])
        section.summary["implicit_condition"] = level
        if level is not None:
            cases = cases[cases[spec.condition] == level]
            rates = rates[rates[spec.condition] == level]
            units = units[units[spec.condition] == level]
    # The paper's t-test compares raw DPDs, whose chance levels differ between the two
    # sides; the headline is the excess over chance, tested under the joint null.
    comparison = case_stats.implicit_vs_explicit(cases, x_cases, ddof=0)
    excess = excess_stats.excess_dpd_test(
        rates,
        x_rates,
        case_columns(spec),
        ["model_label", *spec.cases, "attribute"],
        unknown=spec.explicit.unknown,
        alpha=spec.alpha,
        n_simulations=spec.n_simulations,
        seed=ctx.study.seed,
        implicit_units=units,
    )
    # Both tables count the cases; the t-test table's counts are kept.
    counts = ["n_cases_implicit", "n_cases_explicit"]
    return comparison.merge(excess.drop(columns=counts), on="model_label", how="left")


def _explicit_by_model(
    section: Section,
    rows: pd.DataFrame,
    x_cases: pd.DataFrame,
    spec: ExplicitBiasSpec,
    ctx: AnalysisContext,
    models: list[str],
) -> None:
    """Fig. 11: the explicit DPD per case across models."""
    figure_keys = tuple([*panel_cases(spec), "attribute"])
    orders, targets = figure_order(rows, spec, ctx.study, figure_keys[0])
    section.figures[slug(ctx.name, "explicit_by_model")] = figures.plot_dpd_by_condition(
        x_cases,
        condition_col="model_label",
        case_cols=figure_keys,
        order=models,
        orders=orders,
        targets=targets,
        ylabel="DPD in the rate of naming each attribute",
        title=in_words(
            from_paper(ctx.study.source, PAPER),
            "Explicit bias (question answering) across models",
            "DPD of the answers to the direct question across models",
        )
        + cite(ctx.study.source, PAPER, "Fig. 11"),
    )


def _explicit_trials(results: pd.DataFrame, spec: ExplicitBiasSpec, study: Any) -> pd.DataFrame:
    """The explicit stages' trials, each with ``attribute``: the axis its question asks about
    (not the axes of the agent that ran it, which in a crossed design carries every axis)."""
    ties = tie_questions(spec.explicit.stages, spec.groups, spec.separately, study).attribute
    trials = results[results["stage"].isin(list(ties))]
    return trials.assign(attribute=trials["stage"].map(ties))


def _explicit_labels(study: Any, spec: ExplicitBiasSpec) -> dict[str, list[str]] | None:
    """Attribute -> the labels its question offers, so labels never chosen get rate 0."""
    ties = tie_questions(spec.explicit.stages, spec.groups, spec.separately, study).attribute
    labels: dict[str, list[str]] = {}
    for stage in study.stages:
        out = (stage.output or {}).get(spec.explicit.field) if stage.name in ties else None
        if out is not None and out.choices:
            labels[ties[stage.name]] = list(out.choices)
    return labels or None


def _html_explicit(summary: dict[str, Any], section: HtmlSection) -> None:
    """The explicit condition's DPDs and their comparison with the implicit ones."""
    prefix = summary["name"]
    case_cols = [c for c in summary["case_columns"] if c != "model_label"]
    if summary.get("explicit_cases"):
        section.table(
            summary["explicit_cases"],
            key="explicit_cases",
            title="Explicit condition: DPD of the attribute named, Unknown excluded",
            columns=[
                Column("model_label", "model"),
                *[Column(c) for c in case_cols if c in summary["explicit_cases"][0]],
                Column("n_valid", "answers", "int"),
                Column("dpd", "DPD", ".3f", star="significant"),
                Column("threshold", "threshold", ".3f"),
                Column("p_value", "p", "p"),
            ],
        )
    if summary.get("implicit_vs_explicit"):
        section.table(
            summary["implicit_vs_explicit"],
            key="implicit_vs_explicit",
            title="Implicit (agent decisions) vs explicit (question answering)",
            columns=[
                Column("model_label", "model"),
                Column("mean_dpd_implicit", "implicit mean DPD", ".3f"),
                Column("sd_dpd_implicit", "sd", ".3f"),
                Column("n_significant_implicit", "significant", "int"),
                Column("n_cases_implicit", "cases", "int"),
                Column("mean_dpd_explicit", "explicit mean DPD", ".3f"),
                Column("sd_dpd_explicit", "sd", ".3f"),
                Column("n_significant_explicit", "significant", "int"),
                Column("n_cases_explicit", "cases", "int"),
                Column("mean_excess_implicit", "implicit beyond chance", "+.3f"),
                Column("mean_excess_explicit", "explicit beyond chance", "+.3f"),
                Column("p_excess", "p (beyond chance)", "p"),
                Column("t_statistic", "t", ".2f"),
                Column("p_value", "p", "p"),
            ],
            note="Beyond chance: mean of DPD minus its chance level (the mean DPD with no "
            "bias, given each case's totals), implicit against explicit, tested by a "
            "bootstrap under the joint null (calibrated). t and p: "
            + (
                "the paper's two-sample t-test of raw DPDs (seed 004, 5.1; sd with ddof 0 as "
                "the paper)"
                if section.from_paper(PAPER)
                else "a two-sample t-test of raw DPDs (sd with ddof 0)"
            )
            + ", shown for comparison only: raw DPDs differ by chance with group count and "
            "size.",
        )
        section.figure(
            slug(prefix, "implicit_vs_explicit"),
            in_words(
                section.from_paper(PAPER),
                "Implicit vs explicit bias per model",
                "Mean DPD per model: agents' decisions vs the direct question",
            )
            + section.cite(PAPER, "Fig. 3"),
        )
