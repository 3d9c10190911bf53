"""Kind ``letter_evaluation``: relative and absolute evaluations of cover letters (seed 000,
Experiments 3-4).

A relative evaluation shows two letters and the reader hires Applicant 1 or 2; the study records
what each shown letter is (``first_is``, ``second_is``: strong / weak, male / female), so the
kind reports per experiment the share of hires going to one of them (e.g. the strong letter, or
the woman's) with a sign test against 0.5 over pairs (a pair's readings, both orders and every
reader, are one unit), per job and overall, and the share going to
Applicant 1 (the position effect). With a third answer, "both equally qualified" (supplemental
experiment 8), how often it was given is reported per experiment and job beside the share among
the decided pairs. An absolute evaluation scores one letter on the 13 dimensions;
the kind reports per job the means and SDs by what the letter is (Table 6), the effect of that
on each trait (the paper's beta regression with a random job intercept, and a Gaussian mixed
model on the logit, Table 8) at the paper's alpha, and scores excluded by reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from biasim.analysis.studies.bias_transmission.answer_lines import PAIRED
from biasim.analysis.studies.bias_transmission.trait_dimensions import DIMENSIONS, TRAIT_TYPES
from biasim.simulator.common.html import format_p
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import (
    association,
    ceiling_effects,
    multiple,
    parity,
    pd,
    traits,
    transmission_figures,
    unit_stats,
)
from biasim.simulator.kinds.sections import validity
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.study.fields import Strict

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


#: Recorded variables naming what each shown letter is.
FIRST, SECOND = "first_is", "second_is"


class RelativeSpec(Strict):
    """The stage where a reader hires one of two applicants."""

    stage: str
    field: str = Field("hire", description="Choice field answering `1` or `2`.")
    tie: str | None = Field(
        None,
        description='A third choice of `field` meaning "both equally qualified" '
        "(supplemental experiment 8): counted as an outcome of its own, neither a hire nor "
        "an exclusion.",
    )


class AbsoluteSpec(Strict):
    """The stage where a reader scores one letter."""

    stage: str
    traits: list[str] = Field(
        default_factory=lambda: list(DIMENSIONS), description="Integer score fields."
    )


class Compared(Strict):
    """What an experiment compares."""

    share_of: str = Field(description="Whose share of hires is reported (e.g. `strong`).")
    reference: str = Field(description="The group the other is compared against in scores.")


def trait_types_field() -> Any:
    """The `trait_types` option shared by the letter kinds (Tables 8-9's trait types)."""
    return Field(
        default_factory=lambda: {k: list(v) for k, v in TRAIT_TYPES.items()},
        description="Trait type -> its dimensions, each type scored as their mean per letter "
        "(Tables 8-9). The default grouping is biasim's assumption: the paper does not list it.",
    )


def check_trait_types(types: dict[str, list[str]], known: list[str], facts: StudyFacts) -> None:
    """Report a trait type's member that is not one of the scored traits."""
    for kind, members in types.items():
        for j, member in enumerate(members):
            if member not in known:
                facts.problem(("trait_types", kind, j), f"`{member}` is not one of the traits")


class LetterEvaluationSpec(AnalysisSpec):
    """Relative and absolute letter evaluations, per experiment."""

    kind: Literal["letter_evaluation"]
    by: str = Field(description="Recorded variable naming the experiment (e.g. `experiment`).")
    relative: RelativeSpec | None = None
    absolute: AbsoluteSpec | None = None
    cluster: str = Field("job_title", description="Recorded variable naming the job.")
    compared: dict[str, Compared] = Field(
        min_length=1, description="Experiment -> what it compares (values of `first_is`)."
    )
    alpha: float = Field(0.001, gt=0, lt=1, description="Level of every test (the paper's).")
    trait_types: dict[str, list[str]] = trait_types_field()
    pair: list[str] = Field(
        default_factory=list,
        description="Design factors or recorded variables that, with `by` and `cluster`, tell "
        "one pair of letters from another whatever order they are shown in. A pair's readings "
        "(both orders, every reader) are one unit of the hire test: they lean together when "
        "the letters differ in quality. Empty: each job's readings are one pair.",
    )


#: The tables of its result, declared in letter_evaluation.tables.yaml.
TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class LetterEvaluationResult:
    """What ``letter_evaluation`` computes; the summary, its schema and renderings come from
    it."""

    alpha: float = field(metadata=about("Level of the tests."))
    by: str = field(metadata=about("Design factor analysed apart (experiments)."))
    cluster: str = field(metadata=about("Column the tests permute within (jobs)."))
    relative: Records | None = field(default=None, metadata=tabled(TABLES["relative"]))
    relative_by_job: Records | None = field(
        default=None, metadata=tabled(TABLES["relative_by_job"])
    )
    validity: dict[str, Records] | None = field(default=None, metadata=validity.TABLED)
    effects: Records | None = field(default=None, metadata=tabled(TABLES["effects"]))
    trait_means: Records | None = field(default=None, metadata=tabled(TABLES["trait_means"]))
    scores_excluded: Records | None = field(
        default=None, metadata=tabled(TABLES["scores_excluded"])
    )
    trait_types: Records | None = field(default=None, metadata=tabled(TABLES["trait_types"]))
    trait_type_members: dict[str, list[str]] | None = field(
        default=None, metadata=about("Trait type -> its traits.")
    )
    trait_types_excluded: Records | None = field(
        default=None, metadata=tabled(TABLES["trait_types_excluded"])
    )


class LetterEvaluationKind(AnalysisKind, spec=LetterEvaluationSpec, result=LetterEvaluationResult):
    """Hires between two letters and scores of one, per experiment."""

    title = "Letter evaluations: relative and absolute"

    def check(self, spec: LetterEvaluationSpec, facts: StudyFacts) -> None:
        recorded = set(facts.config.design.record)
        for path, name in (("by",), spec.by), (("cluster",), spec.cluster):
            if name not in recorded:
                facts.problem(path, f"`{name}` is not a recorded variable (design.record)")
        for name in (FIRST, SECOND) if spec.relative else (FIRST,):
            if name not in recorded:
                facts.problem(("compared",), f"record `{name}` (what each shown letter is)")
        values = {
            v.get(spec.by)
            for levels in facts.config.design.factors.values()
            for v in levels.values()
        }
        for experiment in spec.compared:
            if experiment not in values:
                facts.problem(
                    ("compared", experiment), f"no factor level sets {spec.by}={experiment}"
                )
        if spec.relative is None and spec.absolute is None:
            facts.problem(("relative",), "give `relative`, `absolute` or both")
        if spec.relative is not None:
            facts.need_field(
                spec.relative.stage, spec.relative.field, ("relative", "field"), ("relative",)
            )
            answer = facts.stage_fields.get(spec.relative.stage, {}).get(spec.relative.field)
            tie = spec.relative.tie
            if tie is not None and answer is not None and tie not in (answer.choices or []):
                facts.problem(
                    ("relative", "tie"), f"`{tie}` is not a choice of `{spec.relative.field}`"
                )
        if spec.absolute is not None:
            for j, trait in enumerate(spec.absolute.traits):
                facts.need_field(
                    spec.absolute.stage, trait, ("absolute", "traits", j), ("absolute",)
                )
            check_trait_types(spec.trait_types, spec.absolute.traits, facts)
        for j, name in enumerate(spec.pair):
            facts.need_column(name, ("pair", j))

    def compute(
        self, results: pd.DataFrame, spec: LetterEvaluationSpec, ctx: AnalysisContext
    ) -> Section:
        section = Section(summary={})
        result = LetterEvaluationResult(alpha=spec.alpha, by=spec.by, cluster=spec.cluster)
        if spec.relative is not None:
            _relative(results, spec, ctx, section, result)
        if spec.absolute is not None:
            _absolute(results, spec, ctx, section, result)
        section.summary = summary_of(result)
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Per experiment the hire share's sign test against 0.5 over pairs, and whether
        any trait moves: Holm's smallest adjusted p over the tested model's permutation p of
        each trait, on the trait rows' unit (the paper's beta regression is not calibrated near
        the ceiling)."""
        by = summary.get("by")
        out: dict[str, Tested] = {}
        for row in summary.get("relative", []):
            out[f"{row[by]}: {row['share_of']} hired (vs 0.5)"] = unit_stats.Tested.of(
                row, "p_value"
            )
        tested: dict[str, list[dict[str, Any]]] = {}
        for row in summary.get("effects", []):
            if row["model"] == ceiling_effects.MODEL:
                tested.setdefault(str(row[by]), []).append(row)
        for experiment, rows in tested.items():
            fitted = [r["p_value"] for r in rows if r["p_value"] is not None]
            fitted = [p for p in fitted if not math.isnan(p)]
            name = f"{experiment}: any trait effect (holm over {len(rows)} fits)"
            p = min(1.0, min(fitted) * len(rows)) if fitted else None
            out[name] = unit_stats.Tested.family(p, rows)
        return out

    def headline(self, summary: dict[str, Any]) -> str:
        return "(letter_evaluation)"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        by = summary["by"]
        out = [_hire_line(row, by) for row in summary.get("relative", [])]
        out += [_tie_line(row, by) for row in summary.get("relative", []) if "ties" in row]
        if summary.get("effects") is not None:
            out += _effect_lines(summary)
        if summary.get("trait_type_members"):
            lost = sum(r["excluded"] for r in summary.get("trait_types_excluded", []))
            out.append(
                "trait types (Tables 8-9) are the mean of their dimensions per letter, grouped "
                "as biasim assumes: "
                + "; ".join(
                    f"{k} = {', '.join(v)}" for k, v in summary["trait_type_members"].items()
                )
                + f"; letters without every member score: {lost}"
            )
        return out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        if not summary.get("trait_types"):
            return []
        name = slug(summary.get("name"), "trait_differences")
        return [(name, "Mean score differences per job")]


def _hire_line(row: dict[str, Any], by: str) -> str:
    return (
        f"{row[by]}: {row['share_of']} hired in {row['share']:.3f} of {row['n']} (p "
        f"{format_p(row['p_value'])} vs 0.5, sign test over the {row['n_units']} of "
        f"{row['pairs']} pairs that lean); Applicant 1 hired in {row['first_share']:.3f}, "
        f"where position alone gives {row['share_of']} {row['position_share']:.3f}"
    )


def _tie_line(row: dict[str, Any], by: str) -> str:
    return (
        f'{row[by]}: "equally qualified" in {row["ties"]} of {row["ties"] + row["n"]} valid '
        f"answers ({row['tie_share']:.3f}); the share above is of the {row['n']} decided"
    )


def _effect_lines(summary: dict[str, Any]) -> list[str]:
    """Per level of ``by``: the traits the tested model finds moved, the fits that warned, and
    the scores excluded."""
    by, effects = summary["by"], summary["effects"]
    out = []
    for level in dict.fromkeys(r[by] for r in effects):
        tested = [r for r in effects if r[by] == level and r["model"] == ceiling_effects.MODEL]
        moved = [r["trait"] for r in tested if r["significant"]]
        out.append(
            f"{level}: {len(moved)} of {len(tested)} traits moved at alpha {summary['alpha']} "
            "(fractional logit, labels permuted within job; see the effects table)"
            + (f": {', '.join(moved)}" if moved else "")
        )
    warned = [r for r in effects if r.get("warning")]
    if warned:
        out.append(
            f"{len(warned)} of {len(effects)} fits warned (e.g. a job variance estimated at "
            "0, expected when jobs do not differ); see the effects table"
        )
    total = sum(r["excluded"] for r in summary.get("scores_excluded", []))
    out.append(f"scores excluded: {total}" + (" (see the exclusions table)" if total else ""))
    return out


def _relative(
    results: pd.DataFrame,
    spec: LetterEvaluationSpec,
    ctx: AnalysisContext,
    section: Section,
    result: LetterEvaluationResult,
) -> None:
    assert spec.relative is not None
    rows = results[results["stage"] == spec.relative.stage]
    field = spec.relative.field
    answered = rows["valid"].astype(bool) & rows[field].isin(["1", "2"])
    tied = rows["valid"].astype(bool) & (rows[field] == spec.relative.tie)
    chosen = np.where(rows[field] == "1", rows[FIRST], rows[SECOND])
    table = rows.assign(
        value=chosen, first=np.where(rows[field] == "1", "first", "second"), outcome=PAIRED
    )[answered]
    overall, by_job = [], []
    for experiment, compared in spec.compared.items():
        part = table[table[spec.by] == experiment]
        if part.empty:
            continue
        share = association.share_table(part, [spec.by], compared.share_of, alpha=spec.alpha)
        first = association.share_table(
            part.assign(value=part["first"]), [spec.by], "first", alpha=spec.alpha
        )
        jobs = association.share_table(
            part, [spec.by, spec.cluster], compared.share_of, alpha=spec.alpha, method="holm"
        )
        share, jobs = _pair_tests(part, share, jobs, spec, compared.share_of)
        record = share.iloc[0].to_dict()
        here = rows[spec.by] == experiment
        first_share = float(first["share"].iloc[0])
        record.update(
            share_of=compared.share_of,
            first_share=first_share,
            first_p=float(first["p_value"].iloc[0]),
            position_share=_position_share(part, compared.share_of, first_share),
            excluded=int((~answered[here] & ~tied[here]).sum()),
        )
        if spec.relative.tie is not None:
            # The third answer is a result, reported beside the decided pairs' share.
            counts = np.array([tied[here].sum()]), np.array([answered[here].sum()])
            record.update({k: v[0].item() for k, v in _ties(*counts).items()})
            ties = rows[here & tied].groupby(spec.cluster).size()
            jobs = jobs.assign(ties=jobs[spec.cluster].map(ties).fillna(0).astype(int))
            jobs = jobs.assign(**_ties(jobs["ties"].to_numpy(), jobs["n"].to_numpy()))
        overall.append(record)
        by_job.append(jobs.assign(share_of=compared.share_of))
    result.validity = _relative_validity(rows, (answered | tied).to_numpy(), spec, ctx, section)
    jobs_table = pd.concat(by_job, ignore_index=True) if by_job else pd.DataFrame()
    result.relative = TABLES["relative"].write(section.tables, ctx.name, pd.DataFrame(overall))
    result.relative_by_job = TABLES["relative_by_job"].write(section.tables, ctx.name, jobs_table)


def _pair_tests(
    part: pd.DataFrame,
    share: pd.DataFrame,
    jobs: pd.DataFrame,
    spec: LetterEvaluationSpec,
    positive: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The share tables with their tests replaced by the sign test over pairs, overall and per
    job (Holm across the jobs). A binomial test on answers took every reading as independent:
    under a null with letter quality varying (sd 3 on the logit) it rejected 8 % of data sets
    with both orders shown and 30 % with 3 readers per order."""
    keys = [spec.by, spec.cluster, *spec.pair]
    picks = part.assign(
        pair=part[keys].astype(str).agg("\x1f".join, axis=1),
        position=np.where(part["first"] == "first", 1, 2),
    )
    tested = ["pairs", "sign_p", "unit", "n_units", "smallest_p"]
    out = []
    for table, by in ((share, [spec.by]), (jobs, [spec.by, spec.cluster])):
        signs = association.consistent_pair_test(picks, by, positive)
        merged = table.drop(columns=["unit", "n_units"]).merge(
            signs[[*by, *tested]], on=by, how="left"
        )
        merged["p_value"] = merged.pop("sign_p")
        merged["p_adjusted"] = merged.groupby(by[:-1] or (lambda _: 0), sort=False)[
            "p_value"
        ].transform(_holm_tested)
        merged["deviates"] = merged["p_adjusted"] < spec.alpha
        out.append(merged)
    return out[0], out[1]


def _holm_tested(p: pd.Series) -> np.ndarray:
    """Holm over the tests that ran (a job with no leaning pair has no test: NaN)."""
    out = p.to_numpy(dtype=float).copy()
    ran = ~np.isnan(out)
    out[ran] = multiple.holm(out[ran])
    return out


def _position_share(part: pd.DataFrame, share_of: str, first_share: float) -> float:
    """The share ``share_of`` would be hired in if position alone decided, at the position
    rate seen: Applicant 1 picked at ``first_share`` whatever the letters say. Where the order
    is counterbalanced this is 0.5, so a share near it says nothing about the letters when
    ``first_share`` is near 0 or 1."""
    shown_first = float((part[FIRST] == share_of).mean())
    shown_second = float((part[SECOND] == share_of).mean())
    return first_share * shown_first + (1 - first_share) * shown_second


def _relative_validity(
    rows: pd.DataFrame,
    ok: np.ndarray,
    spec: LetterEvaluationSpec,
    ctx: AnalysisContext,
    section: Section,
) -> dict[str, Records]:
    """Valid hiring answers by the group of the letter shown first, per experiment. Each call
    is one answer (unit: answer); a letter pair shown in both orders puts correlated answers
    in both groups, which makes the test conservative, not anti-conservative."""
    table = validity.validity_records(
        rows, strata=[spec.by], group=FIRST, ok=ok, unit_col=None, unit="answer",
        seed=ctx.study.seed,
    )  # fmt: skip
    section.tables[slug(ctx.name, "validity", FIRST)] = table
    return {FIRST: validity.TABLE.records(table)}


def _ties(ties: np.ndarray, decided: np.ndarray) -> dict[str, np.ndarray]:
    """How often "equally qualified" was answered among valid answers, with its Wilson interval."""
    valid = ties + decided
    with np.errstate(divide="ignore", invalid="ignore"):
        low, high = parity.wilson_interval(ties, valid)
        share = ties / valid
    return {"ties": ties, "tie_share": share, "tie_low": low, "tie_high": high}


def _absolute(
    results: pd.DataFrame,
    spec: LetterEvaluationSpec,
    ctx: AnalysisContext,
    section: Section,
    result: LetterEvaluationResult,
) -> None:
    assert spec.absolute is not None
    rows = results[results["stage"] == spec.absolute.stage]
    keys = [spec.by, spec.cluster, FIRST]
    valid = rows[rows["valid"].astype(bool)]
    scores, excluded = traits.long_scores(valid, spec.absolute.traits, keys)
    failed = rows[~rows["valid"].astype(bool)].groupby(keys).size()
    for key, count in failed.items():
        excluded.loc[len(excluded)] = [*key, "(all)", "invalid answer", int(count)]
    means = traits.trait_means(scores, keys)
    types, types_dropped = traits.type_scores(valid, spec.trait_types, keys)
    effects, differences, type_rows = [], [], []
    for experiment, compared in spec.compared.items():
        part = scores[scores[spec.by] == experiment] if not scores.empty else scores
        if part.empty:
            continue
        fit = traits.group_effects(
            part, group=FIRST, reference=compared.reference, cluster=spec.cluster, alpha=spec.alpha
        )
        effects.append(fit.assign(**{spec.by: experiment}))
        typed = types[types[spec.by] == experiment] if not types.empty else types
        others = sorted(set(typed[FIRST]) - {compared.share_of})
        if others:
            # Table 9's rows and Table 8's trait-type rows, for this experiment.
            type_rows.append(
                traits.type_table(
                    typed, [spec.by, spec.cluster], FIRST, compared.share_of, others[0]
                )
            )
            effects.append(
                traits.group_effects(
                    typed,
                    group=FIRST,
                    reference=compared.reference,
                    cluster=spec.cluster,
                    alpha=spec.alpha,
                ).assign(**{spec.by: experiment, "trait": lambda d: d["trait"] + " traits"})
            )
        wide = (
            means[means[spec.by] == experiment]
            .pivot_table(index=[spec.cluster, "trait"], columns=FIRST, values="mean")
            .reset_index()
        )
        others = [c for c in wide.columns[2:] if c != compared.reference]
        if not others or compared.reference not in wide.columns:
            continue  # one group has no scores: nothing to subtract
        other = others[0]
        differences.append(
            wide.assign(
                **{spec.by: experiment},
                difference=wide[other] - wide[compared.reference],
                label=f"{other} - {compared.reference}",
            )[[spec.by, spec.cluster, "trait", "difference", "label"]]
        )
    effects_table = pd.concat(effects, ignore_index=True) if effects else pd.DataFrame()
    result.effects = TABLES["effects"].write(section.tables, ctx.name, effects_table)
    result.trait_means = TABLES["trait_means"].write(section.tables, ctx.name, means)
    result.scores_excluded = TABLES["scores_excluded"].write(section.tables, ctx.name, excluded)
    # One table per experiment: each compares its own two groups (strong/weak, female/male).
    result.trait_types = [r for t in type_rows for r in TABLES["trait_types"].records(t)]
    result.trait_type_members = spec.trait_types
    result.trait_types_excluded = TABLES["trait_types_excluded"].write(
        section.tables, ctx.name, types_dropped
    )
    for table in type_rows:
        experiment = table[spec.by].iloc[0]
        section.tables[slug(ctx.name, "trait_types", experiment)] = TABLES["trait_types"].csv(table)
    if differences:
        diff = pd.concat(differences, ignore_index=True)
        section.tables[slug(ctx.name, "trait_differences")] = diff
        section.figures[slug(ctx.name, "trait_differences")] = (
            transmission_figures.plot_trait_differences(diff, panel=spec.by, cluster=spec.cluster)
        )
