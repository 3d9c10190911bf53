"""Kind ``demographic_parity``: rates of a targeted decision by persona group, the DPD of each
case with its parity test, and the seed-004 evidence around it (persona-condition ablation,
the explicit question-answering condition, rationale terms, directional alignment) and, with
several models, the models side by side with tests of their differences (Figs. 11-12)."""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import product
from pathlib import Path
from textwrap import shorten
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import yaml
from pydantic import Field, model_validator
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.analysis.text.term_sets import (
    BUNDLED_TERM_SETS,
    check_term_sets,
    load_term_sets,
    term_set_sources,
)
from biasim.simulator.common.html import Column, HtmlSection, cite, fmt, format_p, from_paper
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    resolve_data_path,
    slug,
)
from biasim.simulator.kinds.explicit_questions import tie_questions
from biasim.simulator.kinds.sections.conditions import (
    add_condition_differences,
    html_condition_differences,
    print_condition_differences,
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
from biasim.simulator.study.fields import Strict

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested

excess_stats = lazy_module("biasim.analysis.stats.excess")
terms = lazy_module("biasim.analysis.text.terms")
unit_terms = lazy_module("biasim.analysis.text.unit_terms")
unit_stats = lazy_module("biasim.analysis.stats.units")

pd = lazy_module("pandas")

case_stats = lazy_module("biasim.analysis.stats.cases")
figures = lazy_module("biasim.analysis.figures")


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


class TermsConfig(Strict):
    """Rationale analysis: declared term sets and a data-driven scan of distinctive words."""

    field: str = Field("rationale", description="Output field holding the rationale text.")
    term_sets: str | dict[str, list[str]] = Field(
        description="Where the key terms come from, always named by the study: a bundled set "
        f"({', '.join(f'`{n}`' for n in BUNDLED_TERM_SETS)}: the seed-004 paper's), a "
        "YAML path (relative to the study file), or name -> terms.",
    )
    inflections: bool = Field(
        True, description="Plain-word terms and scanned words count their inflections too."
    )
    chosen: str | None = Field(
        None,
        description="Count terms only in rationales of units that chose this option; `target` "
        "is each case's targeted decision.",
    )
    names_from: list[str] = Field(
        default_factory=list,
        description="`stage.field` outputs holding agents' names; these names and "
        "`persona_name` are removed before the distinctive-words scan.",
    )
    top_n: int = Field(15, ge=1, description="Distinctive words reported per attribute value.")


class DecisionsSpec(AnalysisSpec):
    """Decision rates by persona group, DPD with its parity test, and the evidence around it.

    The minimal form (stage, field, target, by) gives rates and one DPD. The optional parts
    make it the seed-004 analysis for any study: `cases` split the data (scenario, model, ...),
    `separately` treats each axis as its own case, `condition` compares conditions (ablation),
    `explicit` adds the question-answering condition, `terms` analyses rationales and
    `predictions` checks directional alignment with real-world findings.
    """

    kind: Literal["demographic_parity"] = "demographic_parity"
    stage: str
    field: str
    target: str | None = Field(None, description="The targeted decision whose rate is compared.")
    target_from: str | None = Field(
        None,
        description="Recorded design variable holding each case's targeted decision (e.g. one "
        "per scenario); instead of `target`.",
    )
    by: list[str] | str = Field(description="Persona axis (or axes) defining groups.")
    separately: bool = Field(
        False, description="Each axis in `by` is its own case (agents carry one axis each)."
    )
    cases: list[str] = Field(
        default_factory=list, description="Design factors that split the analysis into cases."
    )
    condition: str | None = Field(
        None, description="Factor whose levels are compared case by case (persona ablation)."
    )
    explicit: ExplicitConfig | None = None
    terms: TermsConfig | None = None
    predictions: str | None = Field(
        None,
        description="Directional predictions (`default`: the seed-004 paper's Table 3, or a "
        "YAML path) checked against the observed rates.",
    )
    unit: Literal["persona", "name"] = Field(
        "persona",
        description="What repeats, the unit of exchangeability of the DPD tests: `persona` (an "
        "agent across its replicates and the design cells outside the case) or `name` (agents "
        "sharing a name from the name bank). Where a unit answers more than once in a case "
        "(replicates) its case is tested by relabelling whole units between groups.",
    )
    alpha: float = Field(0.05, gt=0, lt=1)
    n_simulations: int = Field(10_000, ge=100)
    n_permutations: int = Field(
        2000,
        ge=100,
        description="Permutations of each test of a difference between models or conditions.",
    )
    adjust: Literal["holm", "bh", "none"] = Field(
        "holm",
        description="Adjustment over each family of tests of differences (between models, "
        "between conditions).",
    )

    @property
    def groups(self) -> list[str]:
        """The grouping axes as a list."""
        return [self.by] if isinstance(self.by, str) else list(self.by)

    @model_validator(mode="after")
    def _one_target(self) -> DecisionsSpec:
        if (self.target is None) == (self.target_from is None):
            raise ValueError("give exactly one of `target` and `target_from`")
        return self


#: The paper whose figures these reproduce: captions cite it only on a study from it.
PAPER = "Li, Shirado & Das 2025"

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


def _t_test_name(seed_paper: bool | None) -> str:
    """The two-sample t-test of raw DPDs: the paper's in its own study, else by what it is."""
    return "Paper's t-test" if seed_paper else "T-test"


def _in_words(seed_paper: bool, papers: str, own: str) -> str:
    """A caption in the seed paper's words in its own study, else in words of what is drawn."""
    return papers if seed_paper else own


def _long(df: pd.DataFrame, axes: list[str], separately: bool) -> pd.DataFrame:
    """One row per decision with ``attribute`` (the axis) and ``value`` columns."""
    if not separately:
        data = df.dropna(subset=axes)
        value = data[axes[0]].astype(str)
        for axis in axes[1:]:  # column-wise: a row-wise join costs seconds at 10^5 rows
            value = value + "/" + data[axis].astype(str)
        return data.assign(attribute="×".join(axes), value=value)
    parts = [
        df[df[axis].notna()].assign(attribute=axis, value=lambda d, a=axis: d[a]) for axis in axes
    ]
    return pd.concat(parts, ignore_index=True) if parts else df.iloc[0:0]


class DemographicParityKind(AnalysisKind):
    """Decision rates, DPD per case and its parity test (seed 004 and any binary decision)."""

    name = "demographic_parity"
    spec = DecisionsSpec
    title = "Decision rates and demographic parity"

    def check(self, spec: DecisionsSpec, facts: StudyFacts) -> None:
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        if spec.unit == "name" and facts.config.personas.source != "name_bank":
            facts.problem(
                ("unit",),
                "`unit: name` needs names from a name bank (personas.source: name_bank); "
                "generated or attribute personas are their own units (`unit: persona`)",
            )
        # Each axis of a `separately` analysis is its own case: a study extending a grid may
        # drop axes, and their cases simply do not exist.
        if not (spec.separately and any(a in facts.axes for a in spec.groups)):
            facts.need_axes(spec.groups, ("by",))
        output = (facts.stage_fields.get(spec.stage) or {}).get(spec.field)
        if (
            spec.target is not None
            and output is not None
            and output.choices
            and spec.target not in output.choices
        ):
            facts.problem(("target",), f"`{spec.target}` is not one of {output.choices}")
        facts.need_column(spec.target_from, ("target_from",))
        for j, name in enumerate(spec.cases):
            facts.need_column(name, ("cases", j))
        facts.need_column(spec.condition, ("condition",))
        if spec.explicit is not None:
            _check_explicit(spec, facts)
        if spec.terms is not None:
            _check_terms(spec, facts)
        if spec.predictions not in (None, "default"):
            _check_predictions(spec.predictions, facts)

    def notes(self, spec: DecisionsSpec, data_dir: Path | None) -> list[str]:
        """Where the rationale term sets come from, set by set."""
        if spec.terms is None:
            return []
        _, origin, sources = _term_sets(spec.terms, lambda path: resolve_data_path(path, data_dir))
        lines = [f"rationale term sets: {origin}"]
        lines += [f"  {name}: {shorten(source, 80)}" for name, source in sources.items()]
        return lines

    def decisions(self, results: pd.DataFrame, spec: DecisionsSpec, ctx: AnalysisContext):
        """The analysed stage's rows in long form (``attribute``, ``value``) with ``_hit``:
        whether the answer is the targeted decision (NA when there is no answer), and
        the unit of exchangeability (``units.UNIT_COLUMNS``; ``units.design_units``: the
        persona across scenarios and replicates, or its name), which every test, model and bound
        of the kind reads, so they all count the same units."""
        axes = [a for a in spec.groups if a in ctx.study.personas.axes]
        rows = _long(results[results["stage"] == spec.stage], axes, spec.separately)
        target = rows[spec.target_from] if spec.target_from else spec.target
        return rows.assign(
            _hit=(rows[spec.field] == target).where(rows[spec.field].notna()),
            **{unit_stats.UNIT_COLUMNS[spec.unit]: unit_stats.design_units(rows, spec.unit)},
        )

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
        rows = summary.get("implicit_vs_explicit", [])
        for row in rows:
            at = f"{row['model_label']}: " if len(rows) > 1 else ""
            tests[f"{at}implicit vs explicit beyond chance"] = unit_stats.Tested.of(row, "p_excess")
            # The paper's t-test compares case DPDs: each case is one draw.
            cases = int(row.get("n_cases_implicit") or 0) + int(row.get("n_cases_explicit") or 0)
            tests[f"{at}implicit vs explicit, paper's t-test"] = unit_stats.Tested(
                row.get("p_value"), "case", cases
            )
        levels = summary.get("condition_levels") or []
        every = " vs ".join(levels)
        omnibus: dict[str, list[dict[str, Any]]] = {}
        for row in summary.get("condition_differences", []):
            if row["compared"] == every and not math.isnan(row["p_adjusted"]):
                omnibus.setdefault(row.get("model_label") or "", []).append(row)
        for model, family in omnibus.items():
            at = f"{model}: " if len(omnibus) > 1 else ""
            name = f"{at}DPD differs between {summary['condition_factor']} levels (any case)"
            tests[name] = unit_stats.Tested.family(min(r["p_adjusted"] for r in family), family)
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
        rows = self.decisions(results, spec, ctx)
        condition = [spec.condition] if spec.condition else []
        case_cols = ["model_label", *condition, *spec.cases, "attribute"]
        rates = case_stats.case_rates(rows, case_cols, "value", "_hit", True)
        unit_col = unit_stats.UNIT_COLUMNS[spec.unit]
        units = unit_stats.unit_counts(rows, [*case_cols, "value"], [unit_col], "_hit")
        cases = case_stats.case_parity(
            rates,
            case_cols,
            "value",
            units=units,
            unit=unit_col,
            alpha=spec.alpha,
            n_simulations=spec.n_simulations,
            seed=study.seed,
        )
        if spec.target_from:
            targets = rows.groupby(spec.cases or ["model_label"])[spec.target_from].first()
            cases = cases.merge(targets.reset_index(), how="left") if spec.cases else cases
        section.tables[f"{name}_rates"] = rates
        section.tables[f"{name}_cases"] = cases
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
        self._unit_models(section, rows, spec, ctx, case_cols, condition)
        summary = section.summary
        summary.update(
            stage=spec.stage,
            field=spec.field,
            target=spec.target or f"per case ({spec.target_from})",
            case_columns=case_cols,
            groups=rates.to_dict("records"),
            cases=cases.to_dict("records"),
            # The console's captions use the seed paper's words only in its own study.
            seed_paper=from_paper(study.source, PAPER),
        )
        panel_cases = [c for c in spec.cases if c != "model_label"]
        col_col = panel_cases[0] if panel_cases else "attribute"
        orders, targets = _figure_order(rows, spec, study, col_col)
        self._share_figures(section, rates, cases, spec, ctx, (col_col, orders, targets))
        if spec.condition:
            self._condition_effects(section, rows, cases, spec, ctx, (panel_cases, orders, targets))
        implicit = cases
        x_cases = None
        if spec.explicit is not None:
            implicit, x_cases = self._explicit(
                section, results, (rates, cases, units), spec, ctx, case_cols
            )
        if spec.terms is not None:
            self._terms(results, rows, spec, ctx, condition, section)
        if spec.predictions is not None:
            self._alignment(section, rates, spec, ctx)
        models = ctx.models_in(results)
        if len(models) > 1:
            self._across_models(rows, cases, implicit, x_cases, spec, ctx, models, section)
        return section

    def _unit_models(
        self,
        section: Section,
        rows: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        case_cols: list[str],
        condition: list[str],
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
        items = [c for c in spec.cases if c != "model_label"]
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
        rates: pd.DataFrame,
        cases: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        layout: tuple[str, Any, Any],
    ) -> None:
        """One decision-shares figure per model (and condition level)."""
        study, name = ctx.study, ctx.name
        condition = [spec.condition] if spec.condition else []
        col_col, orders, targets = layout
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

    def _condition_effects(
        self,
        section: Section,
        rows: pd.DataFrame,
        cases: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        layout: tuple[list[str], Any, Any],
    ) -> None:
        """The ablation table, the condition differences and a DPD-by-condition figure per
        model."""
        study, name = ctx.study, ctx.name
        panel_cases, orders, targets = layout
        assert spec.condition is not None
        ablation = case_stats.ablation_table(
            cases, ["model_label", *spec.cases, "attribute"], spec.condition, conditions=None
        )
        section.tables[f"{name}_ablation"] = ablation
        add_condition_differences(
            section,
            ctx,
            rows,
            condition=spec.condition,
            unit_col=unit_stats.UNIT_COLUMNS[spec.unit],
            whole_units=spec.unit == "name",
            case_cols=["model_label", *spec.cases, "attribute"],
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
            alpha=spec.alpha,
        )
        for model, part in cases.groupby("model_label"):
            section.figures[slug(name, "dpd_by_condition", model)] = figures.plot_dpd_by_condition(
                part,
                condition_col=spec.condition,
                case_cols=tuple([*panel_cases, "attribute"]),
                order=[
                    level
                    for level in study.design.factors[spec.condition]
                    if level in set(part[spec.condition])
                ],
                orders=orders,
                targets=targets,
                title=f"DPD by {spec.condition}: {model}",
            )

    def _explicit(
        self,
        section: Section,
        results: pd.DataFrame,
        implicit_tables: tuple[pd.DataFrame, pd.DataFrame, Any],
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        case_cols: list[str],
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The explicit trials' parity, and the implicit cases compared with them (the paper's
        t-test and the excess over chance); returns the implicit cases compared and the
        explicit cases."""
        study, name, summary = ctx.study, ctx.name, section.summary
        rates, cases, units = implicit_tables
        assert spec.explicit is not None
        implicit = cases
        trials = _explicit_trials(results, spec, study)
        explicit_cols = ["model_label", *spec.cases, "attribute"]
        x_rates = case_stats.explicit_rates(
            trials,
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
        if spec.condition:
            # The paper's technique is the last persona condition (contextualized personas).
            main = [
                c for c in study.design.factors[spec.condition] if c in set(cases[spec.condition])
            ]
            implicit = cases[cases[spec.condition] == main[-1]] if main else cases
            summary["implicit_condition"] = main[-1] if main else None
        # The paper's t-test compares raw DPDs, whose chance levels differ between the two
        # sides; the headline is the excess over chance, tested under the joint null.
        comparison = case_stats.implicit_vs_explicit(implicit, x_cases, ddof=0)
        implicit_rates = rates
        if spec.condition and summary.get("implicit_condition") is not None:
            implicit_rates = rates[rates[spec.condition] == summary["implicit_condition"]]
        excess = excess_stats.excess_dpd_test(
            implicit_rates,
            x_rates,
            case_cols,
            explicit_cols,
            unknown=spec.explicit.unknown,
            alpha=spec.alpha,
            n_simulations=spec.n_simulations,
            seed=study.seed,
            implicit_units=(
                units[units[spec.condition] == summary["implicit_condition"]]
                if spec.condition and summary.get("implicit_condition") is not None
                else units
            ),
        )
        # Both tables count the cases; the t-test table's counts are kept.
        counts = ["n_cases_implicit", "n_cases_explicit"]
        comparison = comparison.merge(excess.drop(columns=counts), on="model_label", how="left")
        section.tables[f"{name}_implicit_vs_explicit"] = comparison
        section.figures[slug(name, "implicit_vs_explicit")] = figures.plot_implicit_explicit(
            comparison,
            model_order=ctx.models_in(comparison) or None,
            t_test=_t_test_name(from_paper(study.source, PAPER)).lower(),
        )
        summary["explicit_cases"] = x_cases.to_dict("records")
        summary["implicit_vs_explicit"] = comparison.to_dict("records")
        return implicit, x_cases

    def _alignment(
        self, section: Section, rates: pd.DataFrame, spec: DecisionsSpec, ctx: AnalysisContext
    ) -> None:
        """Directional alignment of the rates with the predictions the study names."""
        name, summary = ctx.name, section.summary
        condition = [spec.condition] if spec.condition else []
        assert spec.predictions is not None
        path = (
            case_stats.DEFAULT_PREDICTIONS
            if spec.predictions == "default"
            else ctx.resolve(spec.predictions)
        )
        scenario_col = spec.cases[0] if spec.cases else "scenario"
        alignment = case_stats.directional_alignment(
            rates.rename(columns={scenario_col: "scenario"})
            if scenario_col != "scenario"
            else rates,
            case_stats.load_predictions(path),
            by=("model_label", *condition),
        )
        section.tables[f"{name}_alignment"] = alignment
        summary["alignment"] = alignment.to_dict("records")

    def _terms(
        self,
        results: pd.DataFrame,
        rows: pd.DataFrame,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        condition: list[str],
        section: Section,
    ) -> None:
        config = spec.terms
        assert config is not None
        term_sets, origin, sources = _term_sets(config, ctx.resolve)
        answered = rows[rows["valid"].astype(bool)]
        chose_col = None
        if config.chosen is not None:
            chosen = (
                answered["_hit"]
                if config.chosen == "target"
                else answered[spec.field] == config.chosen
            )
            answered, chose_col = answered.assign(_chosen=chosen), "_chosen"
        group_cols = ["model_label", *condition, *spec.cases, "attribute", "value"]
        counts = terms.term_counts(
            answered,
            config.field,
            group_cols,
            term_sets,
            inflections=config.inflections,
            chose_col=chose_col,
        )
        if config.chosen is not None:
            counts.insert(counts.columns.get_loc("term_set"), "chosen", config.chosen)
        section.tables[f"{ctx.name}_terms"] = counts
        own = answered.get("persona_name")
        texts, removed = terms.strip_names(
            answered[config.field], _agent_names(results, config), own
        )
        answered = answered.assign(**{config.field: texts})
        section.summary["terms"] = {
            "term_sets": origin,
            "sources": sources,
            "inflections": config.inflections,
            "chosen": config.chosen,
            "name_words_removed": removed,
        }
        scans = []
        keys = ["model_label", *condition, *spec.cases, "attribute"]
        for key, part in answered.groupby(keys):
            if part["value"].nunique() < 2:
                continue
            scan = terms.distinctive_terms(
                part,
                config.field,
                "value",
                top_n=config.top_n,
                min_count=2,
                inflections=config.inflections,
            )
            for col, value in zip(keys, key, strict=True):
                scan.insert(0, col, value)
            scans.append(scan)
        if scans:
            section.tables[f"{ctx.name}_distinctive_terms"] = pd.concat(scans, ignore_index=True)
        _unit_term_scans(section, ctx.name, answered, keys, (config.field, spec.unit))

    def _across_models(
        self,
        rows: pd.DataFrame,
        cases: pd.DataFrame,
        implicit: pd.DataFrame,
        x_cases: pd.DataFrame | None,
        spec: DecisionsSpec,
        ctx: AnalysisContext,
        models: list[str],
        section: Section,
    ) -> None:
        """Cases side by side per model, Figs. 11-12, and a test per case and model pair."""
        name = ctx.name
        condition = [spec.condition] if spec.condition else []
        case_keys = [*condition, *spec.cases, "attribute"]
        section.tables[f"{name}_cases_by_model"] = _side_by_side(cases, case_keys, models)
        figure_keys = tuple([*[c for c in spec.cases if c != "model_label"], "attribute"])
        orders, targets = _figure_order(rows, spec, ctx.study, figure_keys[0])
        # Figs. 11 (explicit) and 12 (implicit) compare models on the paper's technique: the
        # last persona condition when there are several.
        drawn, technique = implicit, ""
        if spec.condition and implicit[spec.condition].nunique() > 1:
            present = set(implicit[spec.condition])
            technique = [c for c in ctx.study.design.factors[spec.condition] if c in present][-1]
            drawn = implicit[implicit[spec.condition] == technique]
        if x_cases is not None:
            section.figures[slug(name, "explicit_by_model")] = figures.plot_dpd_by_condition(
                x_cases,
                condition_col="model_label",
                case_cols=figure_keys,
                order=models,
                orders=orders,
                targets=targets,
                ylabel="DPD in the rate of naming each attribute",
                title=_in_words(
                    from_paper(ctx.study.source, PAPER),
                    "Explicit bias (question answering) across models",
                    "DPD of the answers to the direct question across models",
                )
                + cite(ctx.study.source, PAPER, "Fig. 11"),
            )
        section.figures[slug(name, "implicit_by_model")] = figures.plot_dpd_by_condition(
            drawn,
            condition_col="model_label",
            case_cols=figure_keys,
            order=models,
            orders=orders,
            targets=targets,
            title=_in_words(
                from_paper(ctx.study.source, PAPER),
                f"Implicit bias (agent decisions{f', {technique}' if technique else ''}) "
                "across models",
                f"DPD of the agents' decisions{f' ({technique})' if technique else ''} "
                "across models",
            )
            + cite(ctx.study.source, PAPER, "Fig. 12"),
        )
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
            table.add_column(col, justify="right")
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
        for row in summary.get("implicit_vs_explicit", []):
            console.print(
                Text("implicit vs explicit", style="bold")
                + f" ({row['model_label']}): DPD beyond chance "
                f"{fmt(row.get('mean_excess_implicit'), '+.3f')} implicit vs "
                f"{fmt(row.get('mean_excess_explicit'), '+.3f')} explicit, difference "
                f"{fmt(row.get('excess_difference'), '+.3f')} (p {format_p(row.get('p_excess'))}, "
                f"joint-null bootstrap). {_t_test_name(summary.get('seed_paper'))} (raw DPDs, "
                "not comparable: chance levels differ): implicit mean DPD "
                f"{fmt(row['mean_dpd_implicit'])} (sd "
                f"{fmt(row['sd_dpd_implicit'])}, {row['n_significant_implicit']}/"
                f"{row['n_cases_implicit']} significant) vs explicit "
                f"{fmt(row['mean_dpd_explicit'])} (sd {fmt(row['sd_dpd_explicit'])}, "
                f"{row['n_significant_explicit']}/{row['n_cases_explicit']} significant); "
                f"t = {fmt(row['t_statistic'], '.2f')}, p {format_p(row['p_value'])}"
            )
        if summary.get("condition_differences"):
            print_condition_differences(summary, console)
        if summary.get("condition_differences_refused"):
            console.print(
                f"  condition differences not tested: {summary['condition_differences_refused']}"
            )
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
        for name in section.figures:
            if name.startswith(f"{prefix}_dpd_by_condition"):
                section.figure(name, "DPD by persona condition" + section.cite(PAPER, "Fig. 5"))
        if summary.get("condition_differences"):
            html_condition_differences(summary, section)
        if summary.get("condition_differences_refused"):
            section.paragraph(
                f"Condition differences not tested: {summary['condition_differences_refused']}"
            )
        _html_explicit(summary, section, case_cols)
        _html_model_differences(summary, section, case_cols)
        if summary.get("terms"):
            used = summary["terms"]
            among = f"units that chose {used['chosen']}" if used["chosen"] else "every unit"
            section.paragraph(
                f"Rationale terms: sets from {used['term_sets']}, counted in the rationales of "
                f"{among}, inflections {'counted together' if used['inflections'] else 'apart'}"
                f"; {used['name_words_removed']} name words removed before the "
                "distinctive-words scan."
                + (f" {used['unit_test']}." if "unit_test" in used else "")
            )
        if summary.get("alignment"):
            section.table(
                summary["alignment"],
                key="alignment",
                title="Directional alignment with real-world findings (Table 3)",
            )


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


def _html_explicit(summary: dict[str, Any], section: HtmlSection, case_cols: list[str]) -> None:
    """The explicit condition's DPDs and their comparison with the implicit ones."""
    prefix = summary["name"]
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
            _in_words(
                section.from_paper(PAPER),
                "Implicit vs explicit bias per model",
                "Mean DPD per model: agents' decisions vs the direct question",
            )
            + section.cite(PAPER, "Fig. 3"),
        )


def _html_model_differences(
    summary: dict[str, Any], section: HtmlSection, case_cols: list[str]
) -> None:
    """Differences between models per case, with the per-model figures."""
    prefix = summary["name"]
    if summary.get("model_differences"):
        differences = summary["model_differences"]
        html_differences(
            section,
            differences,
            [c for c in differences[0] if c in case_cols],
            "Differences between models per case",
            _DIFFERENCE_NOTE,
        )
        section.figure(
            slug(prefix, "explicit_by_model"),
            _in_words(
                section.from_paper(PAPER),
                "Explicit bias per case across models",
                "DPD of the answers to the direct question per case across models",
            )
            + section.cite(PAPER, "Fig. 11"),
        )
        section.figure(
            slug(prefix, "implicit_by_model"),
            _in_words(
                section.from_paper(PAPER),
                "Implicit bias per case across models",
                "DPD of the agents' decisions per case across models",
            )
            + section.cite(PAPER, "Fig. 12"),
        )


def _fit_keys(summary: dict[str, Any]) -> list[str]:
    """The columns that name a model fit: the case columns without the crossed item."""
    return [c for c in summary["case_columns"] if c != summary.get("model_estimates_item")]


def _figure_order(
    rows: pd.DataFrame, spec: DecisionsSpec, study: Any, col_col: str
) -> tuple[dict[str, list[Any]], dict[Any, str]]:
    """The declared order of what figures show (design factors' levels, persona axes and
    their values, as the study lists them, e.g. the paper's), and each ``col_col`` value's
    targeted decision."""
    axes = {a: study.personas.axes[a] for a in spec.groups if a in study.personas.axes}
    if spec.separately:
        attributes, values = list(axes), [v for vs in axes.values() for v in vs]
    else:
        attributes, values = ["×".join(axes)], ["/".join(p) for p in product(*axes.values())]
    orders: dict[str, list[Any]] = {"attribute": attributes, "value": values}
    orders.update({f: list(levels) for f, levels in study.design.factors.items()})
    if spec.target is not None:
        targets = {v: spec.target for v in rows[col_col].dropna().unique()}
    else:
        targets = rows.groupby(col_col)[spec.target_from].first().dropna().to_dict()
    return orders, targets


def _check_terms(spec: DecisionsSpec, facts: StudyFacts) -> None:
    """The rationale field, the term sets (loaded, so a broken file fails before any call),
    the chosen option and the stages giving names."""
    config = spec.terms
    assert config is not None
    facts.need_field(spec.stage, config.field, ("terms", "field"), ("stage",))
    at = ("terms", "term_sets")
    written_in = Path(facts.smap.locate((*facts.at, *at))[0]).parent
    try:
        _term_sets(config, lambda path: resolve_data_path(path, written_in))
    except (OSError, ValueError) as err:
        facts.problem(at, str(err))
    output = (facts.stage_fields.get(spec.stage) or {}).get(spec.field)
    options = output.choices if output is not None else None
    if config.chosen not in (None, "target") and options and config.chosen not in options:
        facts.problem(("terms", "chosen"), f"`{config.chosen}` is not one of {options}")
    for j, ref in enumerate(config.names_from):
        stage, _, name = ref.partition(".")
        if not name:
            facts.problem(("terms", "names_from", j), f"`{ref}` is not `stage.field`")
        else:
            path = ("terms", "names_from", j)
            facts.need_field(stage, name, path, path)


def _check_predictions(declared: str, facts: StudyFacts) -> None:
    """Load a predictions file at validation, so a missing or malformed one fails before any
    call rather than after the run."""
    written_in = Path(facts.smap.locate((*facts.at, "predictions"))[0]).parent
    path = resolve_data_path(declared, written_in)
    if not path.is_file():
        facts.problem(
            ("predictions",), f"predictions file `{declared}` not found (looked at {path})"
        )
        return
    try:
        case_stats.load_predictions(path)
    except (OSError, ValueError, AttributeError, yaml.YAMLError) as err:
        # The loader's own message names the file and the entry, never its contents.
        reason = str(err) if isinstance(err, ValueError) else f"{path}: {type(err).__name__}"
        facts.problem(("predictions",), f"unusable predictions file: {reason}")


def _unit_term_scans(
    section: Section,
    name: str,
    answered: pd.DataFrame,
    keys: list[str],
    field_unit: tuple[str, str],
) -> None:
    """The distinctive-words scan with the kind's unit (``units.UNIT_COLUMNS``; a persona's
    replicates are one unit): each value against the rest, per case
    (``analysis.text.unit_terms``). The token-level log-odds z above counts every token as
    independent and is descriptive only."""
    field, unit = field_unit
    scans = []
    for key, part in answered.groupby(keys):
        values = sorted(part["value"].dropna().astype(str).unique())
        for value in values if len(values) > 1 else []:
            scan = unit_terms.unit_term_test(
                part, field, "value", unit_stats.UNIT_COLUMNS[unit], positive=value
            )
            scan = scan.assign(unit=unit).head(20)
            for col, level in zip(keys, key, strict=True):
                scan.insert(0, col, level)
            scan.insert(len(keys), "value", value)
            scans.append(scan)
    if scans:
        section.tables[f"{name}_distinctive_terms_by_unit"] = pd.concat(scans, ignore_index=True)
        section.summary.setdefault("terms", {})["unit_test"] = (
            f"distinctive_terms_by_unit: unit {unit} (replicates one unit), permutation of the "
            f"value across {unit}s; the token-level z counts every token as independent"
        )


def _term_sets(
    config: TermsConfig, resolve: Callable[[str], Path]
) -> tuple[dict[str, list[str]], str, dict[str, str]]:
    """The study's term sets, where they come from (said in the summary and by `validate`),
    and each set's own source.

    Raises:
        ValueError: ``default`` (no study inherits another paper's terms), or a set file that
            is missing or malformed.
        OSError: The file cannot be read.
    """
    declared = config.term_sets
    if isinstance(declared, dict):
        check_term_sets(declared)
        return dict(declared), "inline in the study file", {n: "study file" for n in declared}
    if declared in BUNDLED_TERM_SETS:
        path = BUNDLED_TERM_SETS[declared]
        origin = f"bundled `{declared}` ({path.name})"
    elif declared == "default":
        raise ValueError(
            "name the term sets instead of `default`: "
            + ", ".join(f"`{n}` ({p.name})" for n, p in BUNDLED_TERM_SETS.items())
            + ", a YAML path, or name -> terms"
        )
    else:
        path = resolve(declared)
        if not path.is_file():
            raise ValueError(f"term-set file `{declared}` not found (looked at {path})")
        origin = f"file {path}"
    return load_term_sets(path), origin, term_set_sources(path)


def _agent_names(results: pd.DataFrame, config: TermsConfig) -> list[str]:
    """Every agent's name in the run: ``persona_name`` and the ``names_from`` outputs."""
    names = results["persona_name"].dropna().tolist() if "persona_name" in results else []
    for ref in config.names_from:
        stage, _, name = ref.partition(".")
        if name in results:
            names += results.loc[results["stage"] == stage, name].dropna().tolist()
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]


def _side_by_side(cases: pd.DataFrame, keys: list[str], models: list[str]) -> pd.DataFrame:
    """One row per case, the DPD, significance and p-value of each model in columns."""
    wide = cases.pivot_table(
        index=keys, columns="model_label", values=["dpd", "p_value"], aggfunc="first"
    )
    wide.columns = [f"{stat}_{model}" for stat, model in wide.columns]
    ordered = [f"{stat}_{m}" for m in models for stat in ("dpd", "p_value")]
    return wide.reindex(columns=[c for c in ordered if c in wide.columns]).reset_index()


def _check_explicit(spec: DecisionsSpec, facts: StudyFacts) -> None:
    """Each explicit stage exists with the answer field and is tied to the one axis it asks
    about; a design whose questions would pool into one case is refused."""
    assert spec.explicit is not None
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


def _explicit_trials(results: pd.DataFrame, spec: DecisionsSpec, study: Any) -> pd.DataFrame:
    """The explicit stages' trials, each with ``attribute``: the axis its question asks about
    (not the axes of the agent that ran it, which in a crossed design carries every axis)."""
    assert spec.explicit is not None
    ties = tie_questions(spec.explicit.stages, spec.groups, spec.separately, study).attribute
    trials = results[results["stage"].isin(list(ties))]
    return trials.assign(attribute=trials["stage"].map(ties))


def _explicit_labels(study: Any, spec: DecisionsSpec) -> dict[str, list[str]] | None:
    """Attribute -> the labels its question offers, so labels never chosen get rate 0."""
    assert spec.explicit is not None
    ties = tie_questions(spec.explicit.stages, spec.groups, spec.separately, study).attribute
    labels: dict[str, list[str]] = {}
    for stage in study.stages:
        out = (stage.output or {}).get(spec.explicit.field) if stage.name in ties else None
        if out is not None and out.choices:
            labels[ties[stage.name]] = list(out.choices)
    return labels or None
