"""Kind ``explicit_bias``: the explicit-bias question-answering condition of seed 004 (appendix D,
section 5.1, Figs. 3 and 11). Stages ask the model outright for the likely attribute of whoever
acted; the DPD of the attribute named is compared with the implicit DPD of the agents'
decisions (``demographic_parity``'s, over the same stage): the excess over chance under the
joint null, and the paper's t-test of raw DPDs for comparison."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import from_paper
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.base import slug
from biasim.simulator.kinds.explicit_questions import tie_questions
from biasim.simulator.kinds.lazy import case_stats, excess_stats, figures, unit_stats
from biasim.simulator.kinds.sections import decisions
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.study.decisions_spec import StageDecisionsSpec
from biasim.simulator.study.fields import Strict

if TYPE_CHECKING:
    import pandas as pd

    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


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


TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class ExplicitBiasResult:
    """What ``explicit_bias`` computes; the summary, its schema and the renderings come from
    it."""

    case_columns: list[str] = field(metadata=about("What splits the decisions into cases."))
    seed_paper: bool = field(metadata=about("Whether the study is the seed paper's own."))
    implicit_condition: str | None = field(
        default=None, metadata=about("The condition level whose implicit DPDs are compared.")
    )
    explicit_cases: Records = field(metadata=tabled(TABLES["explicit_cases"]))
    implicit_vs_explicit: Records = field(metadata=tabled(TABLES["implicit_vs_explicit"]))


class ExplicitBiasKind(decisions.DecisionsKind, spec=ExplicitBiasSpec, result=ExplicitBiasResult):
    """Explicit DPDs per case and their comparison with the implicit ones."""

    title = "Implicit and explicit bias"

    def check(self, spec: ExplicitBiasSpec, facts: StudyFacts) -> None:
        """The decisions, then each explicit stage with the answer field, tied to the one axis
        it asks about; a design whose questions would pool into one case is refused."""
        super().check(spec, facts)
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

    def read(self, stage: decisions.Decisions, spec: ExplicitBiasSpec) -> ExplicitBiasResult:
        results, rows, ctx, section = stage
        study, name = ctx.study, ctx.name
        implicit = decisions.case_tables(rows, spec, ctx)
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
        level, comparison = _comparison(implicit, (x_rates, x_cases), spec, ctx)
        seed_paper = from_paper(study.source, decisions.PAPER)
        result = ExplicitBiasResult(
            case_columns=decisions.case_columns(spec),
            seed_paper=seed_paper,
            implicit_condition=level,
            explicit_cases=TABLES["explicit_cases"].write(section.tables, name, x_cases),
            implicit_vs_explicit=TABLES["implicit_vs_explicit"].write(
                section.tables, name, comparison
            ),
        )
        section.figures[slug(name, "implicit_vs_explicit")] = figures.plot_implicit_explicit(
            comparison,
            model_order=ctx.models_in(comparison) or None,
            t_test=decisions.t_test_name(seed_paper).lower(),
        )
        models = ctx.models_in(results)
        if len(models) > 1:
            decisions.add_across_models_figure(
                section, x_cases, rows, spec, ctx, models, "explicit"
            )
        return result

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

    def headline(self, summary: dict[str, Any]) -> str:
        return f"({self.name}): agents' decisions against the direct question"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        level = summary.get("implicit_condition")
        out = [f"implicit side: the {level} condition's cases"] if level else []
        if summary.get("seed_paper"):
            out.append(
                f"t and p: the paper's t-test ({decisions.PAPER}, 5.1; sd with ddof 0 as the paper)"
            )
        return out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        seed_paper = bool(summary.get("seed_paper"))
        mean = decisions.in_words(
            seed_paper,
            "Implicit vs explicit bias per model",
            "Mean DPD per model: agents' decisions vs the direct question",
        )
        return [
            (
                slug(summary["name"], "implicit_vs_explicit"),
                mean + (f" ({decisions.PAPER}, Fig. 3)" if seed_paper else ""),
            ),
            decisions.across_models_caption(summary["name"], seed_paper, "explicit"),
        ]


def _comparison(
    implicit: decisions.CaseTables,
    explicit: tuple[pd.DataFrame, pd.DataFrame],
    spec: ExplicitBiasSpec,
    ctx: AnalysisContext,
) -> tuple[str | None, pd.DataFrame]:
    """The implicit cases against the explicit ones: the paper's t-test of raw DPDs and the
    excess over chance tested under the joint null. With a condition, the implicit side is
    the paper's technique (its last level), returned with the comparison."""
    x_rates, x_cases = explicit
    rates, cases, units = implicit.rates, implicit.cases, implicit.units
    level = None
    if spec.condition:
        level = decisions.technique_level(ctx.study, spec.condition, cases[spec.condition])
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
        decisions.case_columns(spec),
        ["model_label", *spec.cases, "attribute"],
        unknown=spec.explicit.unknown,
        alpha=spec.alpha,
        n_simulations=spec.n_simulations,
        seed=ctx.study.seed,
        implicit_units=units,
    )
    # Both tables count the cases; the t-test table's counts are kept.
    counts = ["n_cases_implicit", "n_cases_explicit"]
    return level, comparison.merge(excess.drop(columns=counts), on="model_label", how="left")


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
