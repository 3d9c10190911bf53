"""The decisions of one stage as every kind over them reads them (``demographic_parity``,
``condition_differences``, ``explicit_bias``, ``rationale_terms``, ``predictions_check``): the
check of the fields they share, the rows in long form with the targeted decision and the unit,
and the rates and DPD per case they all start from, so each kind counts the same units."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any, Literal, NamedTuple

from biasim.simulator.common.html import from_paper
from biasim.simulator.common.results import summary_of
from biasim.simulator.kinds.base import AnalysisContext, AnalysisKind, Section, StudyFacts, slug
from biasim.simulator.kinds.lazy import case_stats, figures, pd, unit_stats
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

#: The paper whose figures these kinds reproduce: captions cite it only on a study from it.
PAPER = "Li, Shirado & Das 2025"


def t_test_name(seed_paper: bool | None) -> str:
    """The two-sample t-test of raw DPDs: the paper's in its own study, else by what it is."""
    return "Paper's t-test" if seed_paper else "T-test"


def in_words(seed_paper: bool, papers: str, own: str) -> str:
    """A caption in the seed paper's words in its own study, else in words of what is drawn."""
    return papers if seed_paper else own


def check_decisions(spec: StageDecisionsSpec, facts: StudyFacts) -> None:
    """The stage, decision field, axes, target, cases, condition and unit the spec names."""
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


class DecisionsKind(AnalysisKind):
    """A kind over one stage's decisions: its study is checked as every such kind's is (a kind
    asking more adds its own checks after these), and it reads the decisions in the one long
    form :func:`decision_rows` gives, so the tests of every such kind count the same units."""

    def check(self, spec: StageDecisionsSpec, facts: StudyFacts) -> None:
        check_decisions(spec, facts)

    def compute(self, results: pd.DataFrame, spec: Any, ctx: AnalysisContext) -> Section:
        section = Section(summary={})
        rows = decision_rows(results, spec, ctx)
        section.summary = summary_of(self.read(Decisions(results, rows, ctx, section), spec))
        return section

    def read(self, decisions: Decisions, spec: Any) -> Any:
        """The kind's result (its ``result`` dataclass), its CSV tables and figures put in
        ``decisions.section``."""
        raise NotImplementedError


class Decisions(NamedTuple):
    """What a kind over a stage's decisions reads, and the section it fills."""

    #: Every row of the run (every stage and model).
    results: pd.DataFrame
    #: The stage's decisions in long form (:func:`decision_rows`).
    rows: pd.DataFrame
    ctx: AnalysisContext
    section: Section


def case_columns(spec: StageDecisionsSpec) -> list[str]:
    """What splits the decisions into cases: model, condition level, cases, attribute."""
    return ["model_label", *([spec.condition] if spec.condition else []), *spec.cases, "attribute"]


def panel_cases(spec: StageDecisionsSpec) -> list[str]:
    """The case columns a figure lays out in panels (every one but the model)."""
    return [c for c in spec.cases if c != "model_label"]


def long_form(df: pd.DataFrame, axes: list[str], separately: bool) -> pd.DataFrame:
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


def decision_rows(
    results: pd.DataFrame, spec: StageDecisionsSpec, ctx: AnalysisContext
) -> pd.DataFrame:
    """The analysed stage's rows in long form (``attribute``, ``value``) with ``_hit``:
    whether the answer is the targeted decision (NA when there is no answer), and the unit of
    exchangeability (``units.UNIT_COLUMNS``; ``units.design_units``: the persona across
    scenarios and replicates, or its name), which every test, model and bound of these kinds
    reads, so they all count the same units."""
    axes = [a for a in spec.groups if a in ctx.study.personas.axes]
    rows = long_form(results[results["stage"] == spec.stage], axes, spec.separately)
    target = rows[spec.target_from] if spec.target_from else spec.target
    return rows.assign(
        _hit=(rows[spec.field] == target).where(rows[spec.field].notna()),
        **{unit_stats.UNIT_COLUMNS[spec.unit]: unit_stats.design_units(rows, spec.unit)},
    )


@dataclass(frozen=True)
class CaseTables:
    """The rates per group and case, the DPD and parity test per case, and the units counted
    per group (what the parity tests relabel)."""

    rates: pd.DataFrame
    cases: pd.DataFrame
    units: pd.DataFrame


def case_tables(rows: pd.DataFrame, spec: StageDecisionsSpec, ctx: AnalysisContext) -> CaseTables:
    """The rates and the DPD of each case with its parity test (``analysis.stats.cases``), each
    case carrying its targeted decision when it comes from a design variable."""
    case_cols = case_columns(spec)
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
        seed=ctx.study.seed,
    )
    if spec.target_from and spec.cases:
        targets = rows.groupby(spec.cases)[spec.target_from].first()
        cases = cases.merge(targets.reset_index(), how="left")
    return CaseTables(rates, cases, units)


def figure_order(
    rows: pd.DataFrame, spec: StageDecisionsSpec, study: Any, col_col: str
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


def technique_level(study: Any, condition: str, present: Any) -> str | None:
    """The paper's technique among a condition's levels present: the last one declared
    (contextualized personas), or None when none is present."""
    levels = [c for c in study.design.factors[condition] if c in set(present)]
    return levels[-1] if levels else None


#: The figure of each case's DPD across models, by the decisions it draws: its file stem, the
#: paper's figure, its caption in the paper's words and in words of what is drawn, the y label.
_ACROSS_MODELS = {
    "implicit": (
        "implicit_by_model",
        "Fig. 12",
        "Implicit bias per case across models",
        "DPD of the agents' decisions per case across models",
        "DPD in the rate of the targeted decision",
    ),
    "explicit": (
        "explicit_by_model",
        "Fig. 11",
        "Explicit bias per case across models",
        "DPD of the answers to the direct question per case across models",
        "DPD in the rate of naming each attribute",
    ),
}


def across_models_caption(
    name: str, seed_paper: bool, side: Literal["implicit", "explicit"], detail: str = ""
) -> tuple[str, str]:
    """The across-models figure of ``side``'s DPDs: its name and caption (``detail``: the
    condition level drawn, e.g. the paper's technique)."""
    stem, where, papers, own, _ = _ACROSS_MODELS[side]
    words = in_words(seed_paper, papers, own) + (f" ({detail})" if detail else "")
    return slug(name, stem), words + (f" ({PAPER}, {where})" if seed_paper else "")


def add_across_models_figure(
    section: Section,
    cases: pd.DataFrame,
    rows: pd.DataFrame,
    spec: StageDecisionsSpec,
    ctx: AnalysisContext,
    models: list[str],
    side: Literal["implicit", "explicit"],
    detail: str = "",
) -> None:
    """Each case's DPD across the models (Figs. 11-12) into ``section``'s figures."""
    figure_keys = tuple([*panel_cases(spec), "attribute"])
    orders, targets = figure_order(rows, spec, ctx.study, figure_keys[0])
    seed_paper = from_paper(ctx.study.source, PAPER)
    name, caption = across_models_caption(ctx.name, seed_paper, side, detail)
    section.figures[name] = figures.plot_dpd_by_condition(
        cases,
        condition_col="model_label",
        case_cols=figure_keys,
        order=models,
        orders=orders,
        targets=targets,
        ylabel=_ACROSS_MODELS[side][4],
        title=caption,
    )
