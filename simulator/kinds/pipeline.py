"""Kind ``pipeline``: where disparity enters a multi-stage selection and how it compounds.

Reads the results of a study whose readers evaluate documents other agents wrote (see
``simulator.populations``): per stage and group, who entered, who advanced, the stage selection
rate, impact ratio and DPD with tests adjusted across stages; the decomposition of the
end-to-end impact ratio into stage ratios; position effects and choice rates against chance for
pairs and pools; flip rates and McNemar's test for counterfactual (name-swapped) readings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.samples import few_pools
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisSpec, Section, slug, summary_table
from biasim.simulator.kinds.lazy import (
    counterfactual,
    figures,
    multiple,
    parity,
    pd,
    pipeline_stats,
    unit_stats,
)
from biasim.simulator.kinds.sections import validity
from biasim.simulator.kinds.sections.per_run import PerRunKind
from biasim.simulator.kinds.spec_fields import Adjustment, groups_field
from biasim.simulator.study.market import person_of

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")


class PipelineSpec(AnalysisSpec):
    """Stage-by-stage selection of candidates whose documents readers evaluated."""

    kind: Literal["pipeline"]
    stages: list[str] = Field(
        min_length=1,
        description="Reading stages in pipeline order, each `after` the one before; a "
        "counterfactual stage may be listed anywhere (it gets its paired test instead).",
    )
    groups: list[str] = groups_field()
    n_permutations: int = Field(2000, ge=100, description="Permutations per stage test.")
    adjust: Adjustment = Field("holm", description="Adjustment of the stage tests across stages.")


_STAGE_NOTE = (
    "entered = candidates in a valid evaluation of the stage (for pairs: showings, each pair "
    "in both orders); advanced = picked (pairs, pools) "
    "or accepted (single readings); IR = impact ratio (rate / highest rate, ! = below "
    "four-fifths); 95% CI = Wilson interval of the rate (conservative for pools, where exactly "
    "k are picked); p = {test}, {adjust}-adjusted across stages; cumulative = advanced / "
    "entered the first stage."
)
_COMPOUND_NOTE = (
    "End-to-end ratio = the group's rate from the first stage to the last over the reference "
    "group's (the highest); it is exactly the product of the stage ratios (each stage's rate "
    "over the reference group's), so the table shows where the disparity entered."
)


class PipelineKind(PerRunKind):
    """Selection through the stages of a pipeline, by group."""

    name = "pipeline"
    spec = PipelineSpec
    title = "Pipeline: selection by stage"

    def check(self, spec: PipelineSpec, facts: StudyFacts) -> None:
        facts.need_axes(spec.groups, ("groups",))
        stages = {s.name: s for s in facts.config.stages}
        chain: list[str] = []
        written: set[str] = set()
        for j, name in enumerate(spec.stages):
            stage = stages.get(name)
            if stage is None:
                facts.problem(("stages", j), f"no stage named `{name}`")
                continue
            if stage.reads is None:
                facts.problem(("stages", j), f"`{name}` reads no documents (it has no `reads`)")
                continue
            if stage.reads.stage in stages:  # a missing one is the study check's error
                written.add(stage.reads.stage)
            if stage.reads.counterfactual is not None:
                continue
            if chain and stage.reads.after != chain[-1]:
                facts.problem(
                    ("stages", j),
                    f"`{name}` does not follow `{chain[-1]}` (its `after` is "
                    f"`{stage.reads.after}`): list the stages in pipeline order",
                )
            chain.append(name)
        if len(written) > 1:
            facts.problem(("stages",), f"the stages read different documents: {sorted(written)}")

    def compute_run(
        self, results: pd.DataFrame, spec: PipelineSpec, ctx: AnalysisContext
    ) -> Section:
        stages = {s.name: s for s in ctx.study.stages}
        writing = stages[spec.stages[0]].reads.stage  # type: ignore[union-attr]
        authors = authors_table(results, writing, spec.groups)
        picks = {name: stage_picks(stages[name]) for name in spec.stages}
        readings = readings_table(results, picks, authors)
        chain = [s for s in spec.stages if stages[s].reads.counterfactual is None]  # type: ignore[union-attr]
        summary: dict[str, Any] = {
            "writing_stage": writing,
            "stages": chain,
            "groups": spec.groups,
            "adjust": spec.adjust,
            "applications": len(authors),
            "documents_failed": int((~authors["valid"]).sum()),
        }
        section = Section(summary=summary)
        candidates, exclusions = candidates_table(readings, chain, authors)
        summary["exclusions"] = exclusions
        persons = ctx.study.market is not None
        if persons:
            candidates = with_persons(candidates)
        # The unit its pool tests and intervals draw: the first stage's pools (or pairs); none
        # where only counterfactual readings are analysed.
        first = candidates.loc[candidates["stage"] == chain[0], "cluster"] if chain else None
        summary["clusters"] = None if first is None else int(first.nunique())
        section.tables[slug(ctx.name, "exclusions")] = pd.DataFrame(
            exclusions, columns=["stage", "reason", "count"]
        )
        pairs = [n for n in chain if stages[n].reads.matching == "pair"]  # type: ignore[union-attr]
        summary["by_group"] = {
            group: _add_group_stages(section, ctx, spec, candidates, chain, pairs, authors, group)
            for group in (spec.groups if chain else [])
        }
        _add_validity(
            section,
            ctx,
            spec,
            authors.assign(stage=writing),
            readings[readings["stage"].isin(chain)],
            persons=persons,
        )
        _add_position_effects(section, ctx, spec, readings)
        summary["counterfactual"] = {}
        for name in spec.stages:
            reads = stages[name].reads
            assert reads is not None
            if reads.counterfactual is not None:
                _add_counterfactual(section, ctx, spec, readings, name, reads.counterfactual)
        return section

    @classmethod
    def run_schema(cls) -> dict[str, Any]:
        count = {"type": "integer", "minimum": 0}
        texts = {"type": "array", "items": {"type": "string"}}
        per_group = {
            "type": "object",
            "required": ["stages", "compounding"],
            "properties": {
                "stages": summary_table(
                    "Per stage: who entered and advanced, the rate, its test and unit.",
                    required=["stage", "unit"],
                ),
                "compounding": summary_table("Stage ratios multiplied into the end-to-end one."),
            },
        }
        return {
            "type": "object",
            "required": [
                *["writing_stage", "stages", "groups", "adjust", "applications"],
                *["documents_failed", "exclusions", "clusters", "by_group"],
                *["position_effect", "choice_rates", "counterfactual"],
            ],
            "properties": {
                "writing_stage": {"type": "string", "description": "The stage that writes."},
                "stages": {**texts, "description": "The reading stages of the chain."},
                "groups": {**texts, "description": "Persona columns compared."},
                "adjust": {"type": "string", "description": "Adjustment across stages."},
                "applications": {**count, "description": "Documents written."},
                "documents_failed": {**count, "description": "Documents that failed."},
                "exclusions": summary_table("Candidates left out, by stage and reason."),
                "clusters": {
                    "type": ["integer", "null"],
                    "description": "First-stage pools (the tests' unit); null without a chain.",
                },
                "by_group": {
                    "type": "object",
                    "additionalProperties": per_group,
                    "description": "Persona column -> the funnel and its compounding.",
                },
                "validity": validity.SUMMARY_SCHEMA,
                "position_effect": summary_table("The first position's test, per stage."),
                "choice_rates": {
                    "type": "object",
                    "description": "Stage -> each group's choice rate against chance.",
                },
                "counterfactual": {
                    "type": "object",
                    "description": "Counterfactual stage -> its axis and paired readings.",
                },
            },
        }

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Each stage's DPD test per group (adjusted over the stages) and each stage's
        position effect: the tests the console prints."""
        tests: dict[str, Tested] = {}
        for group, parts in summary.get("by_group", {}).items():
            for row in parts["stages"]:
                tests[f"{row['stage']}: DPD by {group}"] = unit_stats.Tested.of(row, "p_adjusted")
        for row in summary.get("position_effect", []):
            tests[f"{row['stage']}: position effect"] = unit_stats.Tested.of(row, "p_adjusted")
        return tests

    def selections(
        self, results: pd.DataFrame, spec: PipelineSpec, ctx: AnalysisContext
    ) -> pd.DataFrame:
        """Every applicant, ``selected`` when advanced at the last stage (end to end); NA
        when its document was not written."""
        stages = {s.name: s for s in ctx.study.stages}
        chain = [s for s in spec.stages if stages[s].reads.counterfactual is None]  # type: ignore[union-attr]
        return audited(results, ctx, chain, spec.groups, entrants_only=False)

    def stage_selections(
        self, results: pd.DataFrame, spec: PipelineSpec, ctx: AnalysisContext, stage: str
    ) -> pd.DataFrame:
        """The decisions of ``stage``: its entrants, ``selected`` when advanced there."""
        chain = stage_chain(ctx, stage, spec.stages)
        return audited(results, ctx, chain, spec.groups, entrants_only=True)

    def print_run(self, summary: dict[str, Any], console: Console) -> None:
        console.print(
            Text(str(summary["name"]), style="bold") + f": {summary['applications']} applications "
            f"({summary['documents_failed']} failed to write)"
            + (f", stages {' -> '.join(summary['stages'])}" if summary["stages"] else "")
        )
        for group, parts in summary["by_group"].items():
            _print_stages(summary, group, parts["stages"], console)
            _print_compounding(summary, group, parts["compounding"], console)
        _print_reading_tests(summary, console)
        validity.print_validity(summary, console)
        small = summary.get("clusters") is not None and few_pools(
            str(summary["name"]), summary["clusters"]
        )
        if small:
            console.print(f"  {small}")
        if summary["exclusions"]:
            console.print(
                "  excluded: "
                + "; ".join(
                    f"{e['stage']}: {e['count']} {e['reason']}" for e in summary["exclusions"]
                )
            )

    def html_run(self, summary: dict[str, Any], section: HtmlSection) -> None:
        section.paragraph(
            f"{summary['applications']} applications ({summary['documents_failed']} failed to "
            f"write); stages {' → '.join(summary['stages'])}."
        )
        for group, parts in summary["by_group"].items():
            _html_stages(summary, group, parts["stages"], section)
            _html_compounding(summary, group, parts["compounding"], section)
            section.figure(
                slug(summary["name"], "funnel", group),
                f"Share of each {group} still in the pipeline after each stage",
            )
        _html_position_effects(summary, section)
        _html_choice_rates(summary, section)
        _html_counterfactual(summary, section)
        validity.html_validity(summary, section)
        if summary["exclusions"]:
            section.table(summary["exclusions"], key="exclusions", title="Excluded, by reason")


def _add_group_stages(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    candidates: pd.DataFrame,
    chain: list[str],
    pairs: list[str],
    authors: pd.DataFrame,
    group: str,
) -> dict[str, Any]:
    """The stage table (with the rates' Wilson intervals), the compounding table and the
    funnel of one group axis, added to ``section``; their records for the summary."""
    # Every writer's group is reported, also where no evaluation of a stage was valid.
    known = sorted(set(authors[group].unique()))
    table, compound = pipeline_stats.stage_and_compounding_tables(
        candidates,
        chain,
        group,
        n_permutations=spec.n_permutations,
        seed=ctx.study.seed,
        adjust=spec.adjust,
        values=known,
        pairs=pairs,
    )
    entered = table["entered"].to_numpy()
    # A group nobody of which reached a stage has no rate and no interval there.
    with np.errstate(divide="ignore", invalid="ignore"):
        low, high = parity.wilson_interval(table["advanced"].to_numpy(), entered)
    low, high = np.where(entered > 0, low, np.nan), np.where(entered > 0, high, np.nan)
    table.insert(table.columns.get_loc("rate") + 1, "ci_low", low)
    table.insert(table.columns.get_loc("ci_low") + 1, "ci_high", high)
    section.tables[slug(ctx.name, "stages", group)] = table
    section.tables[slug(ctx.name, "compounding", group)] = compound
    section.figures[slug(ctx.name, "funnel", group)] = figures.plot_funnel(
        table, group, title=f"Who is still in, by {group}"
    )
    return {"stages": table.to_dict("records"), "compounding": compound.to_dict("records")}


def _add_position_effects(
    section: Section, ctx: AnalysisContext, spec: PipelineSpec, readings: pd.DataFrame
) -> None:
    """Per stage that picks: the picks by position shown, the first position's test against
    chance (adjusted across stages) and each group's choice rate against chance."""
    summary = section.summary
    # A committee's or a selection rule's decision is not one reader's k picks, so the chance
    # of a position is not k / size: those stages are left out of these tests (each member's
    # own picks are in its rows, stage `<stage>.reader<j>`).
    combined = [s.name for s in ctx.study.stages if s.readers or s.selection]
    chosen = readings[readings["valid"] & (readings["k"] > 0) & ~readings["stage"].isin(combined)]
    # The tests tell evaluations apart, never read their ids: codes check and group faster
    # than 100,000 names, four times per stage.
    chosen = chosen.assign(evaluation=pd.factorize(chosen["evaluation"])[0])
    summary["position_effect"] = []
    summary["choice_rates"] = {}
    for stage, shown in chosen.groupby("stage", sort=False):
        # Per stage: two stages may show the same format to different readers.
        rows = pipeline_stats.CheckedReadings.of(shown, spec.groups)
        positions = pipeline_stats.position_table(rows).assign(stage=stage)
        section.tables[slug(ctx.name, "positions", stage)] = positions
        first = pipeline_stats.first_position_test(rows, adjust="none").assign(stage=stage)
        summary["position_effect"] += first.to_dict("records")
        summary["choice_rates"][stage] = {
            group: pipeline_stats.choice_rates(rows, group).to_dict("records")
            for group in spec.groups
        }
    if summary["position_effect"]:
        p = np.array([r["p_value"] for r in summary["position_effect"]])
        adjusted = multiple.adjust(p, spec.adjust)
        for record, value in zip(summary["position_effect"], adjusted, strict=True):
            record["p_adjusted"] = float(value)


def _add_counterfactual(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    readings: pd.DataFrame,
    name: str,
    axis: str,
) -> None:
    """Flip rates and McNemar's tests of the counterfactual stage ``name`` (its documents read
    under names of each value of ``axis``)."""
    paired = readings[(readings["stage"] == name) & readings["valid"]].rename(
        columns={"candidate": "document", "chosen": "outcome"}
    )
    values = ctx.study.personas.axes[axis]
    table = counterfactual.counterfactual_table(
        paired,
        variants=[v for v in values if v in set(paired["variant"])],
        adjust=spec.adjust,
    )
    section.tables[slug(ctx.name, "counterfactual", name)] = table
    section.summary["counterfactual"][name] = {"axis": axis, "pairs": table.to_dict("records")}


def _print_stages(
    summary: dict[str, Any], group: str, rows: list[dict[str, Any]], console: Console
) -> None:
    """Selection by stage and value of ``group``, then each stage's DPD and test."""
    table = Table(title=f"{summary['name']}: selection by stage and {group}")
    # Few columns, folded never cut: a truncated group name or number misleads. What
    # is one value per stage (DPD, test) is printed under the table.
    for col in ("stage", group, "in", "picked", "rate (95% CI)", "IR", "cumulative"):
        table.add_column(col, justify="right", overflow="fold")
    for row in rows:
        flag = "!" if row["four_fifths"] else ""
        table.add_row(
            row["stage"],
            str(row["value"]),
            str(row["entered"]),
            str(row["advanced"]),
            f"{fmt(row['rate'])} ({fmt(row['ci_low'], '.2f')}-{fmt(row['ci_high'], '.2f')})",
            fmt(row["impact_ratio"]) + flag,
            fmt(row["cumulative_rate"]),
        )
    print_table(console, table)
    for stage in summary["stages"]:
        row = next(r for r in rows if r["stage"] == stage)
        console.print(
            f"  {stage}: DPD {fmt(row['dpd'])}, p ({summary['adjust']}) "
            f"{format_p(row['p_adjusted'])} ({row['test'].replace('_', ' ')})"
        )
    console.print("  ! = impact ratio below four-fifths")


def _print_compounding(
    summary: dict[str, Any], group: str, rows: list[dict[str, Any]], console: Console
) -> None:
    """The end-to-end impact ratio of each value of ``group`` as the product of stage ratios."""
    compound = Table(title=f"{summary['name']}: end-to-end impact ratio by {group}")
    stage_cols = [f"ratio_{s}" for s in summary["stages"]]
    for col in (group, *stage_cols, "product", "end-to-end", "identity"):
        compound.add_column(col, justify="right", overflow="fold")
    for row in rows:
        compound.add_row(
            str(row["value"]),
            *[fmt(row[c]) for c in stage_cols],
            fmt(row["product"]),
            fmt(row["end_to_end_ratio"]),
            "undefined" if row["undefined"] else ("holds" if row["identity_holds"] else "FAILS"),
        )
    print_table(console, compound)
    undefined = rows[0]["undefined"] if rows else ""
    if undefined:
        console.print(f"  end-to-end ratio undefined: {undefined}")
    else:
        console.print(
            "  " + " x ".join(f"{s}" for s in summary["stages"]) + " = end-to-end, exactly"
        )


def _print_reading_tests(summary: dict[str, Any], console: Console) -> None:
    """One line each: the position effects, the choice rates against chance and the
    counterfactual readings."""
    for row in summary.get("position_effect", []):
        console.print(
            f"  position effect at {row['stage']}: the first shown was picked in "
            f"{fmt(row['share'], '.1%')} of {row['n_evaluations']} evaluations picking "
            f"{row['k']} of {row['size']} (chance {fmt(row['chance'], '.1%')}), "
            f"p ({summary['adjust']}) {format_p(row['p_adjusted'])}"
        )
    for stage, groups in summary.get("choice_rates", {}).items():
        for group, rows in groups.items():
            console.print(
                f"  picked when shown at {stage}, by {group}: "
                + ", ".join(
                    f"{r['value']} {fmt(r['rate'], '.1%')} ({r['chosen']}/{r['shown']})"
                    for r in rows
                )
                + f"; chance {fmt(rows[0]['chance'], '.1%')}"
            )
    for stage, result in summary.get("counterfactual", {}).items():
        for row in result["pairs"]:
            console.print(
                f"  counterfactual {stage}: the same {row['n_pairs']} documents under a "
                f"{row['a']} and a {row['b']} name ({result['axis']}): advanced "
                f"{fmt(row['rate_a'], '.1%')} vs {fmt(row['rate_b'], '.1%')}, flip rate "
                f"{fmt(row['flip_rate'], '.1%')}, McNemar exact p ({summary['adjust']}) "
                f"{format_p(row['p_adjusted'])}"
            )


def _html_stages(
    summary: dict[str, Any], group: str, rows: list[dict[str, Any]], section: HtmlSection
) -> None:
    """Selection by stage and value of ``group``, with each stage's test."""
    section.table(
        rows,
        key=["by_group", group, "stages"],
        title=f"Selection by stage and {group}",
        columns=[
            Column("stage", "stage", "text"),
            Column("value", group, "text"),
            Column("entered", "entered", "int"),
            Column("advanced", "advanced", "int"),
            Column("rate", "rate", ".3f"),
            Column("ci_low", "95% CI", "ci", upper="ci_high"),
            Column("impact_ratio", "impact ratio", ".3f"),
            Column("four_fifths", "below 4/5", "text"),
            Column("dpd", "DPD", ".3f"),
            Column("test", "test", "text"),
            Column("p_value", "p", "p"),
            Column("p_adjusted", f"p ({summary['adjust']})", "p"),
            Column("cumulative_rate", "cumulative", ".3f"),
        ],
        note=_STAGE_NOTE.format(
            test="the test named (permutation_within_pool: group labels shuffled "
            "within each pool; concordant_pairs: the unit is the pair, whole authors "
            "swap groups within it, so only pairs picked alike in both orders count)",
            adjust=summary["adjust"],
        ).replace(" (rate / highest rate, ! = below four-fifths)", " (rate / highest)"),
    )


def _html_compounding(
    summary: dict[str, Any], group: str, rows: list[dict[str, Any]], section: HtmlSection
) -> None:
    """The end-to-end impact ratio of each value of ``group``, decomposed into stage ratios."""
    stage_cols = [Column(f"ratio_{s}", f"ratio at {s}", ".3f") for s in summary["stages"]]
    section.table(
        rows,
        key=["by_group", group, "compounding"],
        title=f"End-to-end impact ratio by {group}, decomposed",
        columns=[
            Column("value", group, "text"),
            Column("end_to_end_rate", "end-to-end rate", ".3f"),
            *stage_cols,
            Column("product", "product", ".3f"),
            Column("end_to_end_ratio", "end-to-end ratio", ".3f"),
            Column("identity_holds", "identity", "text"),
            Column("undefined", "undefined because", "text"),
        ],
        note=_COMPOUND_NOTE,
    )


def _html_position_effects(summary: dict[str, Any], section: HtmlSection) -> None:
    """Whether the first document shown is picked more than chance, per stage."""
    if not summary.get("position_effect"):
        return
    section.table(
        summary["position_effect"],
        key="position_effect",
        title="Position effect: is the first document shown picked more than chance?",
        columns=[
            Column("stage", "stage", "text"),
            Column("size", "shown", "int"),
            Column("k", "picked", "int"),
            Column("n_evaluations", "evaluations", "int"),
            Column("first_chosen", "first picked", "int"),
            Column("share", "share", ".3f"),
            Column("chance", "chance", ".3f"),
            Column("p_value", "p (exact binomial)", "p"),
            Column("p_adjusted", f"p ({summary['adjust']})", "p"),
        ],
    )


def _html_choice_rates(summary: dict[str, Any], section: HtmlSection) -> None:
    """How often each group is picked when shown, against chance, per stage."""
    for stage, groups in summary.get("choice_rates", {}).items():
        for group, rows in groups.items():
            section.table(
                rows,
                key=["choice_rates", stage, group],
                title=f"Picked when shown at {stage}, by {group}, against chance",
                columns=[
                    Column("value", group, "text"),
                    Column("shown", "shown", "int"),
                    Column("chosen", "picked", "int"),
                    Column("rate", "rate", ".3f"),
                    Column("chance", "chance", ".3f"),
                    Column("ratio_to_chance", "rate / chance", ".3f"),
                ],
            )


def _html_counterfactual(summary: dict[str, Any], section: HtmlSection) -> None:
    """Each counterfactual stage: the same documents advanced under either name."""
    for stage, result in summary.get("counterfactual", {}).items():
        section.table(
            result["pairs"],
            key=["counterfactual", stage, "pairs"],
            title=f"Counterfactual readings at {stage}: the same document under names of "
            f"two {result['axis']} values",
            columns=[
                Column("a", "name A", "text"),
                Column("b", "name B", "text"),
                Column("n_pairs", "documents", "int"),
                Column("rate_a", "advanced as A", ".3f"),
                Column("rate_b", "advanced as B", ".3f"),
                Column("only_a", "only as A", "int"),
                Column("only_b", "only as B", "int"),
                Column("flip_rate", "flip rate", ".3f"),
                Column("p_value", "McNemar exact p", "p"),
                Column("p_adjusted", f"p ({summary['adjust']})", "p"),
                Column("excluded", "excluded", "int"),
            ],
        )


def _add_validity(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    authors: pd.DataFrame,
    readings: pd.DataFrame,
    *,
    persons: bool,
) -> None:
    """Whose document was written (``authors``, their ``stage`` the writing stage), and whose
    was read in a valid evaluation (``readings``), by group and stage. The applicant is the
    unit: a failed pool or pair excludes all its documents at once, so the applicants' labels
    are permuted within the stage (pools are drawn at random, so under no group effect any
    applicant could have sat in any failed evaluation). With ``persons`` (a market, where one
    person applies in several cycles) the unit is the person, whose applications move
    together: a model that fails on a name fails on it in every cycle."""
    columns = ["stage", "candidate", "valid", *spec.groups]
    frame = pd.concat([authors[columns], readings[columns]], ignore_index=True)
    if persons:
        frame["candidate"] = frame["candidate"].map(person_of)
    # Applicants are told apart, never read: codes in their names' sorted order group as the
    # names do (the same units in the same order, so the same draws), without sorting
    # 100,000 names again per group and stage.
    codes, _ = pd.factorize(frame["candidate"], sort=True)
    frame["candidate"] = np.where(codes < 0, np.nan, codes)
    for group in spec.groups:
        table = validity.validity_records(
            frame, strata=["stage"], group=group, ok=frame["valid"].to_numpy(dtype=bool),
            unit_col="candidate", unit="person" if persons else "applicant",
            seed=ctx.study.seed,
        )  # fmt: skip
        validity.add_validity(section, ctx.name, group, table)


def stage_chain(ctx: AnalysisContext, stage: str, analysed: list[str]) -> list[str]:
    """The selecting stages an applicant passes to reach ``stage``'s decision, first to last
    (``stage`` last). Only the analysis's own stages (``analysed``) can be chosen: a study with
    policies also holds each policy's copies, which a policy analysis audits itself.

    Raises:
        InputError: ``stage`` is no selecting stage of the analysis.
    """
    stages = {s.name: s for s in ctx.study.stages}
    selecting = [
        s
        for s in analysed
        if stages[s].reads is not None and stages[s].reads.counterfactual is None  # type: ignore[union-attr]
    ]
    if stage not in selecting:
        raise InputError(
            [
                Problem(
                    "--stage",
                    None,
                    "",
                    f"`{stage}` is no selecting stage of this run; stages: " + ", ".join(selecting),
                )
            ]
        )
    chain = [stage]
    while stages[chain[0]].reads.after is not None:  # type: ignore[union-attr]
        chain.insert(0, stages[chain[0]].reads.after)  # type: ignore[union-attr, arg-type]
    return chain


def audited(
    results: pd.DataFrame,
    ctx: AnalysisContext,
    chain: list[str],
    groups: list[str],
    *,
    entrants_only: bool,
) -> pd.DataFrame:
    """The writing stage's rows (persona, design columns) of the applicants audited, with
    ``selected``: advanced at the last stage of ``chain``. ``entrants_only``: only those read
    in a valid evaluation of that stage (its decisions); else every applicant (end to end)."""
    stages = {s.name: s for s in ctx.study.stages}
    writing = stages[chain[0]].reads.stage  # type: ignore[union-attr]
    authors = authors_table(results, writing, groups)
    readings = readings_table(results, {name: stage_picks(stages[name]) for name in chain}, authors)
    candidates, _ = candidates_table(readings, chain, authors)
    last = candidates[candidates["stage"] == chain[-1]]
    advanced = set(last.loc[last["advanced"], "candidate"])
    rows = results[results["stage"] == writing]
    ids = rows["agent_id"].astype(str)
    if entrants_only:
        rows, ids = rows[ids.isin(set(last["candidate"]))], ids[ids.isin(set(last["candidate"]))]
    written = rows["valid"].astype("boolean").fillna(False)
    return rows.assign(selected=ids.isin(advanced).astype("boolean").where(written))


def with_persons(candidates: pd.DataFrame) -> pd.DataFrame:
    """``candidates`` with the ``person`` each application is by (``study.market.person_of``
    of its author): in a market one person applies in several cycles, and the stage tests
    relabel persons, not applications (``analysis.stats.pipeline.stage_table``)."""
    authors = candidates["author"] if "author" in candidates else candidates["candidate"]
    return candidates.assign(person=authors.astype(str).map(person_of))


def stage_picks(stage: Any) -> int:
    """How many documents a reader of ``stage`` picks: its ``select``, 1 for a pair, 0 for a
    single reading."""
    return stage.select or (1 if stage.reads.matching == "pair" else 0)


def authors_table(results: pd.DataFrame, writing: str, groups: list[str]) -> pd.DataFrame:
    """One row per writer: its document's unit id, group values and whether it wrote."""
    columns = list(dict.fromkeys(["agent_id", "unit_id", "valid", *groups]))
    rows = results.loc[results["stage"] == writing, columns].reset_index(drop=True)
    # Strings stay in Arrow: through numpy, 100,000 ids became Python objects and back.
    return pd.DataFrame(
        {
            "candidate": rows["agent_id"].astype(str),
            "unit_id": rows["unit_id"].astype(str),
            "valid": rows["valid"].fillna(False).astype(bool),
            **{g: rows[g].astype(str) for g in groups},
        }
    )


def readings_table(
    results: pd.DataFrame, picks: dict[str, int], authors: pd.DataFrame
) -> pd.DataFrame:
    """One row per document shown in an evaluation of the stages in ``picks`` (stage -> how
    many each reader picks, 0 for single readings): evaluation, cluster, position, pool size,
    k, whether it was picked (advanced), and its author's groups."""
    columns = ["stage", "reads", "advanced", "evaluation", "cluster", "valid", "variant"]
    rows = results.loc[results["stage"].isin(list(picks)), columns]
    rows = rows[rows["reads"].notna()]
    # Split, flattened and matched to authors in Arrow: a Python dict lookup per shown
    # document cost a third of this table at 100,000 applicants.
    shown = pc.split_pattern(pa.array(rows["reads"].astype(str)), "|")
    sizes = pc.list_value_length(shown).to_numpy().astype(np.int64)
    units = pc.list_flatten(shown)
    stage = rows["stage"].astype(str)
    per_reading = pd.DataFrame(
        {
            "stage": stage,
            # Ids are unique within a stage; readings of several stages mix.
            "evaluation": stage + "/" + rows["evaluation"].astype(str),
            "cluster": stage + "/" + rows["cluster"].astype(str),
            "size": sizes,
            "k": stage.map(picks).fillna(0).astype(int),
            "valid": rows["valid"].fillna(False).astype(bool),
            "variant": rows["variant"],
        }
    )
    frame = per_reading.take(np.repeat(np.arange(len(sizes)), sizes)).reset_index(drop=True)
    starts = np.cumsum(sizes) - sizes
    frame.insert(3, "position", np.arange(len(frame)) - np.repeat(starts, sizes) + 1)
    frame.insert(6, "chosen", _chosen(rows["advanced"], starts, sizes))
    author = pc.index_in(units, value_set=pa.array(authors["unit_id"]))
    candidate = pc.if_else(
        pc.is_valid(author), pc.take(pa.array(authors["candidate"]), author), units
    )
    frame["candidate"] = pd.Series(candidate, dtype="str")
    # A document whose author is not in the table keeps its unit id and no groups.
    row = author.fill_null(-1).to_numpy()
    for group in authors.columns.drop(["candidate", "unit_id", "valid"]):
        frame[group] = authors[group].array.take(row, allow_fill=True)
    return frame


def _chosen(advanced: pd.Series, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per shown document (readings flattened), whether its reading advanced its label."""
    try:
        # Split and read in Arrow (a tenth of a second in Python at 25,000 readings); labels
        # Arrow cannot read as integers (`" 2"`, hand-edited tables) are read one by one.
        labels = pc.split_pattern(pa.array(advanced, type=pa.string()), "|")
        parts = pc.list_flatten(labels)
        owner = np.repeat(np.arange(len(labels)), pc.list_value_length(labels).fill_null(0))
        given = pc.not_equal(parts, "").to_numpy(zero_copy_only=False)
        label = pc.cast(pc.filter(parts, given), pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _chosen_one_by_one(advanced.tolist(), starts, sizes)
    owner = owner[given]
    inside = (label >= 1) & (label <= sizes[owner])
    chosen = np.zeros(int(sizes.sum()), dtype=bool)
    chosen[starts[owner[inside]] + label[inside] - 1] = True
    return chosen


def _chosen_one_by_one(advanced: list[Any], starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    chosen = np.zeros(int(sizes.sum()), dtype=bool)
    for i, labels in enumerate(advanced):
        text = "" if pd.isna(labels) else str(labels)
        for label in {int(x) for x in text.split("|") if x}:
            if 1 <= label <= sizes[i]:
                chosen[starts[i] + label - 1] = True
    return chosen


def candidates_table(
    readings: pd.DataFrame, chain: list[str], authors: pd.DataFrame
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The stage table's input (candidates in valid evaluations of each stage) and what was
    left out, counted by stage and reason: nothing is dropped silently."""
    exclusions: list[dict[str, Any]] = []
    failed = int((~authors["valid"]).sum())
    if failed:
        exclusions.append({"stage": "(writing)", "reason": "document not written", "count": failed})
    # Who is where, as codes on one scale: sets of 100,000 names per stage cost more than
    # the rest of the table.
    codes, names = pd.factorize(
        pd.concat([authors["candidate"], readings["candidate"]], ignore_index=True),
        use_na_sentinel=False,
    )
    known = len(names)
    expected = _marked(codes[: len(authors)][authors["valid"].to_numpy(dtype=bool)], known)
    code = codes[len(authors) :]
    stage_of, valid_row = readings["stage"].to_numpy(), readings["valid"].to_numpy(dtype=bool)
    chosen = readings["chosen"].to_numpy(dtype=bool)
    frames = []
    for stage in chain:
        here = stage_of == stage
        valid_here, failed_here = here & valid_row, here & ~valid_row
        in_valid = _marked(code[valid_here], known)
        failed_eval = int((_marked(code[failed_here], known) & ~in_valid).sum())
        unmatched = int((expected & ~_marked(code[here], known)).sum())
        if failed_eval:
            exclusions.append(
                {"stage": stage, "reason": "in an evaluation that failed", "count": failed_eval}
            )
        if unmatched:
            exclusions.append(
                {
                    "stage": stage,
                    "reason": "not matched (pool left over, no partner)",
                    "count": unmatched,
                }
            )
        valid = readings[valid_here]
        if np.bincount(code[valid_here], minlength=known).max(initial=0) > 1:
            # A pair shows each candidate twice (both orders): the stage's rates count
            # showings, so the position effect cancels and one pick is one success. Who goes
            # on is who was picked in either showing, as the engine advances them.
            frames.append(
                valid.assign(
                    advanced=valid["chosen"],
                    author=valid["candidate"],
                    candidate=valid["candidate"] + "@" + valid["evaluation"],
                )
            )
        else:
            frames.append(valid.assign(advanced=valid["chosen"], author=valid["candidate"]))
        expected = _marked(code[valid_here & chosen], known)
    candidates = (
        pd.concat(frames, ignore_index=True) if frames else readings.iloc[0:0].assign(advanced=[])
    )
    return candidates, exclusions


def _marked(codes: np.ndarray, size: int) -> np.ndarray:
    """A mask over ``size`` codes, true at ``codes``."""
    mask = np.zeros(size, dtype=bool)
    mask[codes] = True
    return mask
