"""Kind ``pipeline``: where disparity enters a multi-stage selection and how it compounds.

Reads the results of a study whose readers evaluate documents other agents wrote (see
``simulator.populations``): per stage and group, who entered, who advanced, the stage selection
rate, impact ratio and DPD with tests adjusted across stages; the decomposition of the
end-to-end impact ratio into stage ratios; position effects and choice rates against chance for
pairs and pools; flip rates and McNemar's test for counterfactual (name-swapped) readings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.common.samples import few_pools
from biasim.simulator.kinds.base import AnalysisSpec, Section, slug
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
from biasim.simulator.kinds.sections.codebook import tables_of
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


#: The tables of its result, declared in pipeline.tables.yaml.
TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class Funnel:
    """One group column's funnel."""

    stages: Records = field(metadata=tabled(TABLES["stages"]))
    compounding: Records = field(metadata=tabled(TABLES["compounding"]))


@dataclass(kw_only=True)
class Counterfactual:
    """One counterfactual stage's paired readings."""

    axis: str = field(metadata=about("The persona column whose names are swapped."))
    pairs: Records = field(metadata=tabled(TABLES["pairs"]))


@dataclass(kw_only=True)
class PipelineResult:
    """What ``pipeline`` computes for one run; the summary, its schema and the renderings
    come from it."""

    writing_stage: str = field(metadata=about("The stage that writes."))
    stages: list[str] = field(metadata=about("The reading stages of the chain."))
    groups: list[str] = field(metadata=about("Persona columns compared."))
    adjust: str = field(metadata=about("Adjustment across stages."))
    applications: int = field(metadata=about("Documents written.", {"minimum": 0}))
    documents_failed: int = field(metadata=about("Documents that failed.", {"minimum": 0}))
    clusters: int | None = field(
        default=None, metadata=about("First-stage pools (the tests' unit); none without a chain.")
    )
    by_group: dict[str, Funnel] = field(
        default_factory=dict, metadata=about("Persona column -> the funnel and its compounding.")
    )
    position_effect: Records = field(
        default_factory=list, metadata=tabled(TABLES["position_effect"])
    )
    choice_rates: dict[str, dict[str, Records]] = field(
        default_factory=dict,
        metadata=tabled(
            TABLES["choice_rates"], "Stage -> persona column -> choice rates.", depth=2
        ),
    )
    counterfactual: dict[str, Counterfactual] = field(
        default_factory=dict, metadata=about("Counterfactual stage -> its axis and readings.")
    )
    validity: dict[str, Records] = field(default_factory=dict, metadata=validity.TABLED)
    exclusions: Records = field(default_factory=list, metadata=tabled(TABLES["exclusions"]))


class PipelineKind(PerRunKind, spec=PipelineSpec, result=PipelineResult):
    """Selection through the stages of a pipeline, by group."""

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
        section = Section(summary={})
        candidates, exclusions = candidates_table(readings, chain, authors)
        persons = ctx.study.market is not None
        if persons:
            candidates = with_persons(candidates)
        # The unit its pool tests and intervals draw: the first stage's pools (or pairs); none
        # where only counterfactual readings are analysed.
        first = candidates.loc[candidates["stage"] == chain[0], "cluster"] if chain else None
        pairs = [n for n in chain if stages[n].reads.matching == "pair"]  # type: ignore[union-attr]
        result = PipelineResult(
            writing_stage=writing,
            stages=chain,
            groups=spec.groups,
            adjust=spec.adjust,
            applications=len(authors),
            documents_failed=int((~authors["valid"]).sum()),
            clusters=None if first is None else int(first.nunique()),
            by_group={
                group: _group_funnel(section, ctx, spec, candidates, chain, pairs, authors, group)
                for group in (spec.groups if chain else [])
            },
            exclusions=TABLES["exclusions"].write(
                section.tables,
                ctx.name,
                pd.DataFrame(exclusions, columns=["stage", "reason", "count"]),
            ),
        )
        result.validity = _validity(
            section,
            ctx,
            spec,
            authors.assign(stage=writing),
            readings[readings["stage"].isin(chain)],
            persons=persons,
        )
        _add_position_effects(section, result, ctx, spec, readings)
        for name in spec.stages:
            reads = stages[name].reads
            assert reads is not None
            if reads.counterfactual is not None:
                result.counterfactual[name] = _counterfactual(
                    section, ctx, spec, readings, name, reads.counterfactual
                )
        section.summary = summary_of(result)
        return section

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

    def headline(self, summary: dict[str, Any]) -> str:
        return "(pipeline): selection by stage"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        chain = " -> ".join(summary["stages"])
        out = [
            f"{summary['applications']} applications ({summary['documents_failed']} failed to "
            "write)" + (f"; stages {chain}" if chain else "")
        ]
        for group, funnel in summary["by_group"].items():
            undefined = funnel["compounding"][0]["undefined"] if funnel["compounding"] else ""
            out.append(
                f"by {group}: end-to-end ratio undefined: {undefined}"
                if undefined
                else f"by {group}: {' x '.join(summary['stages'])} = end-to-end, exactly"
            )
        small = summary.get("clusters") is not None and few_pools(
            str(summary["name"]), summary["clusters"]
        )
        return [*out, small] if small else out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (
                slug(summary["name"], "funnel", group),
                f"Share of each {group} still in the pipeline after each stage",
            )
            for group in summary["by_group"]
        ]


def _group_funnel(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    candidates: pd.DataFrame,
    chain: list[str],
    pairs: list[str],
    authors: pd.DataFrame,
    group: str,
) -> Funnel:
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
    section.figures[slug(ctx.name, "funnel", group)] = figures.plot_funnel(
        table, group, title=f"Who is still in, by {group}"
    )
    return Funnel(
        stages=TABLES["stages"].named(key=group).write(section.tables, ctx.name, table),
        compounding=TABLES["compounding"]
        .named(key=group)
        .write(section.tables, ctx.name, compound),
    )


def _add_position_effects(
    section: Section,
    result: PipelineResult,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    readings: pd.DataFrame,
) -> None:
    """Per stage that picks: the picks by position shown, the first position's test against
    chance (adjusted across stages) and each group's choice rate against chance."""
    # A committee's or a selection rule's decision is not one reader's k picks, so the chance
    # of a position is not k / size: those stages are left out of these tests (each member's
    # own picks are in its rows, stage `<stage>.reader<j>`).
    combined = [s.name for s in ctx.study.stages if s.readers or s.selection]
    chosen = readings[readings["valid"] & (readings["k"] > 0) & ~readings["stage"].isin(combined)]
    # The tests tell evaluations apart, never read their ids: codes check and group faster
    # than 100,000 names, four times per stage.
    chosen = chosen.assign(evaluation=pd.factorize(chosen["evaluation"])[0])
    firsts = []
    for stage, shown in chosen.groupby("stage", sort=False):
        # Per stage: two stages may show the same format to different readers.
        rows = pipeline_stats.CheckedReadings.of(shown, spec.groups)
        positions = pipeline_stats.position_table(rows).assign(stage=stage)
        section.tables[slug(ctx.name, "positions", stage)] = positions
        firsts.append(pipeline_stats.first_position_test(rows, adjust="none").assign(stage=stage))
        result.choice_rates[str(stage)] = {
            group: TABLES["choice_rates"].records(pipeline_stats.choice_rates(rows, group))
            for group in spec.groups
        }
    if firsts:
        first = pd.concat(firsts, ignore_index=True)
        # Adjusted across the stages: one family of first-position tests per analysis.
        first["p_adjusted"] = multiple.adjust(first["p_value"].to_numpy(float), spec.adjust)
        result.position_effect = TABLES["position_effect"].records(first)


def _counterfactual(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    readings: pd.DataFrame,
    name: str,
    axis: str,
) -> Counterfactual:
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
    pairs = TABLES["pairs"].named(key=name).write(section.tables, ctx.name, table)
    return Counterfactual(axis=axis, pairs=pairs)


def _validity(
    section: Section,
    ctx: AnalysisContext,
    spec: PipelineSpec,
    authors: pd.DataFrame,
    readings: pd.DataFrame,
    *,
    persons: bool,
) -> dict[str, Records]:
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
    out = {}
    for group in spec.groups:
        table = validity.validity_records(
            frame, strata=["stage"], group=group, ok=frame["valid"].to_numpy(dtype=bool),
            unit_col="candidate", unit="person" if persons else "applicant",
            seed=ctx.study.seed,
        )  # fmt: skip
        out[group] = validity.TABLE.named(key=group).write(section.tables, ctx.name, table)
    return out


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
    rows = results.loc[results["stage"] == writing]
    rows = rows[columns].reset_index(drop=True)
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
