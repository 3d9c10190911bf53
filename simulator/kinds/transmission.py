"""Kind ``transmission``: does an association become an outcome? (seed 000, Experiment 5)

Reads a study whose writers wrote letters signed by name and whose readers compared a man's and
a woman's letter (both orders), scored single letters and guessed their writers' gender. Per
reading stage it reports the share of hires going to one group by job category (Table 4's
Experiment 5 rows) and per job (Figure 4), with intervals from a bootstrap over pairs and a sign
test on the pairs hired alike in both orders; per trait the means by job and group (Table 6) and
the group's effect (Table 8); per prediction stage the share of letters guessed to be by a woman,
by job category and by the writer's real group (Table 10).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.text import Text

from biasim.analysis.studies.bias_transmission.answer_lines import PAIRED
from biasim.analysis.text.redaction import names_after_redaction
from biasim.simulator.common.html import HtmlSection, format_p
from biasim.simulator.kinds import transmission_extras as extras
from biasim.simulator.kinds.base import AnalysisKind, Section, slug, summary_table
from biasim.simulator.kinds.lazy import (
    association,
    ceiling_effects,
    parity,
    pd,
    traits,
    transmission_figures,
    unit_stats,
)
from biasim.simulator.kinds.letter_evaluation import check_trait_types
from biasim.simulator.kinds.sections.trait_effects import print_trait_effects
from biasim.simulator.kinds.transmission_spec import TransmissionSpec

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class TransmissionKind(AnalysisKind):
    """Hires, scores and gender guesses of letters written by name."""

    name = "transmission"
    spec = TransmissionSpec
    title = "Bias transmission: hires, scores and guesses of letters written by name"

    def reads_counterfactual_sets(self, spec: TransmissionSpec) -> bool:
        """Its tables count letters as the readers read them, and no reader reads a twin
        (tests/e2e/test_counterfactual_variants.py: the tables equal the pipeline's)."""
        return True

    def check(self, spec: TransmissionSpec, facts: StudyFacts) -> None:
        stages = {s.name: s for s in facts.config.stages}
        facts.need_stage(spec.writing, ("writing",))
        facts.need_axes([spec.group], ("group",))
        recorded = set(facts.config.design.record)
        named = [(("category",), spec.category), (("cluster",), spec.cluster)]
        named += [(("describe", j), c) for j, c in enumerate(spec.describe)]
        for path, name in named:
            if name is not None and name not in recorded:
                facts.problem(path, f"`{name}` is not a recorded variable (design.record)")
        check_trait_types(spec.trait_types, spec.traits, facts)
        for j, name in enumerate(spec.relative):
            stage = stages.get(name)
            if stage is None or stage.reads is None or stage.reads.matching != "pair":
                facts.problem(("relative", j), f"`{name}` is not a pair reading stage")
        single = [(("absolute",), spec.absolute)] if spec.absolute else []
        single += [(("predictions", n), n) for n in spec.predictions]
        for path, name in single:
            stage = stages.get(name)
            if stage is None or stage.reads is None or stage.reads.matching != "single":
                facts.problem(path, f"`{name}` is not a single reading stage")
        if spec.absolute:
            for j, trait in enumerate(spec.traits):
                facts.need_field(spec.absolute, trait, ("traits", j), ("absolute",))
        for name, field in spec.predictions.items():
            facts.need_field(name, field, ("predictions", name), ("predictions", name))
        extras.check(spec, facts, stages)

    def compute(
        self, results: pd.DataFrame, spec: TransmissionSpec, ctx: AnalysisContext
    ) -> Section:
        section = Section(
            summary={"positive": spec.positive, "alpha": spec.alpha, "category": spec.category}
        )
        authors = _authors(results, spec)
        section.summary["letters"] = len(authors)
        section.summary["letters_failed"] = int((~authors["valid"]).sum())
        section.summary["letters_truncated"] = int(authors["truncated"].sum())
        if spec.relative:
            _relative(results, authors, spec, ctx, section)
        if spec.absolute:
            _absolute(results, authors, spec, ctx, section)
        if spec.predictions:
            _predictions(results, authors, spec, ctx, section)
        if spec.probes:
            extras.probes(results, authors, spec, ctx, section)
        return section

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        count = {"type": "integer", "minimum": 0}
        tables = {
            "excluded": "Letters and answers left out, by stage and reason.",
            "hires_by_category": "Share of comparisons won by `positive`, per category.",
            "hires_by_job": "The same per job, with its test.",
            "deviating_jobs": "Jobs deviating from chance, per stage.",
            "position": "Share won by the letter shown first.",
            "rationale_terms": "Rationale terms used more by one group (significant ones).",
            "weaker_than_association": "Jobs whose hiring share is weaker than association's.",
            "effects": "Each trait's effect, its model and test.",
            "trait_means": "Trait means per job and group.",
            "overall_scores": "Scores per group over every letter.",
            "type_effects": "Each trait type's effect.",
            "trait_types": "Trait types per job.",
            "predictions": "Share of letters whose author is predicted `predicted`.",
            "probe_terms": "Probe answer terms used more by one group.",
            "redaction_leaks": "Redacted letters that still name the author.",
        }
        return {
            "type": "object",
            "required": ["positive", "alpha", "category", "letters"],
            "properties": {
                "positive": {"type": ["string", "null"], "description": "The value counted."},
                "alpha": {"type": "number", "description": "Level of the tests."},
                "category": {"type": ["string", "null"], "description": "Job grouping column."},
                "letters": {**count, "description": "Letters written."},
                "letters_failed": {**count, "description": "Letters that failed."},
                "letters_truncated": {**count, "description": "Letters cut at `max_tokens`."},
                **{key: summary_table(what) for key, what in tables.items()},
                "redaction_change": {"type": "object", "description": "Named vs redacted."},
                "rationale_terms_tested": {**count, "description": "Terms tested."},
                "association_source": {"type": "string", "description": "What is compared."},
                "trait_type_members": {
                    "type": ["object", "null"],
                    "description": "Trait type -> its traits.",
                },
                "predicted": {"type": "string", "description": "The prediction counted."},
                "probes": {"type": "array", "description": "The probe stages."},
                "notes": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "What could not be computed, and why.",
                },
            },
        }

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Per reading stage: whether any job's hires lean to one group (Holm over the jobs'
        sign tests on pairs) and Applicant 1's share against 0.5 (calls); the change when
        names are withheld (jobs); whether any trait moves (Holm over the tested model's
        fits, on the trait rows' unit)."""
        tests: dict[str, Tested] = {}
        jobs: dict[str, list[dict[str, Any]]] = {}
        for row in summary.get("hires_by_job", []):
            if row.get("sign_p") is not None and not math.isnan(row["sign_p"]):
                jobs.setdefault(str(row["stage"]), []).append(row)
        for stage, rows in jobs.items():
            p = min(1.0, min(r["sign_p"] for r in rows) * len(rows))
            name = f"{stage}: any job's hires lean (holm over {len(rows)} jobs)"
            tests[name] = unit_stats.Tested.family(p, rows, "sign_p")
        for row in summary.get("position", []):
            tests[f"{row['stage']}: Applicant 1 hired (vs 0.5)"] = unit_stats.Tested.of(
                row, "p_value"
            )
        change = summary.get("redaction_change")
        if change and change.get("p_value") is not None:
            tests["hires change when names are withheld"] = unit_stats.Tested.of(change, "p_value")
        fits = [r for r in summary.get("effects", []) if r["model"] == ceiling_effects.MODEL]
        fitted = [r["p_value"] for r in fits if r["p_value"] is not None]
        fitted = [p for p in fitted if not math.isnan(p)]
        if fitted:
            name = f"any trait effect (holm over {len(fits)} fits)"
            tests[name] = unit_stats.Tested.family(min(1.0, min(fitted) * len(fits)), fits)
        return tests

    def print(self, summary: dict[str, Any], console: Console) -> None:
        name, positive = summary.get("name"), summary["positive"]
        console.print(
            Text(str(name), style="bold") + f" (transmission): {summary['letters']} letters "
            f"({summary['letters_failed']} failed to be written)"
        )
        for row in summary.get("hires_by_category", []):
            console.print(
                f"  {row['stage']} {row.get(summary['category'], '')}: {positive} hired in "
                f"{row['share']:.3f} (95% CI over pairs {row['boot_low']:.3f}-"
                f"{row['boot_high']:.3f}) of {row['n']} decisions"
            )
        for row in summary.get("position", []):
            console.print(
                f"  {row['stage']}: Applicant 1 hired in {row['share']:.3f} of {row['n']} "
                f"(position effect; p {format_p(row['p_value'])} vs 0.5, each pair in both orders)"
            )
        for note in summary.get("notes", []):
            console.print(f"  {note}")
        for row in summary.get("deviating_jobs", []):
            console.print(
                f"  {row['stage']}: {row['deviate']}/{row['jobs']} jobs deviate from chance "
                f"(sign test on pairs hired alike in both orders, alpha {summary['alpha']})"
            )
        extras.print_lines(summary, console)
        _print_effects(summary, console)
        for row in summary.get("predictions", []):
            console.print(
                f"  {row['stage']} {row['subset']}: {row['share']:.1%} guessed "
                f"'{summary.get('predicted')}' of {row['n']}"
            )
        for row in summary.get("excluded", []):
            console.print(f"  excluded at {row['stage']}: {row['reason']} {row['count']}")
        for row in summary.get("redaction_leaks", []):
            group = next(v for k, v in row.items() if k not in ("stage", "reason", "letters"))
            console.print(
                f"  {row['stage']}: {row['letters']} letters by {group} writers keep a name "
                "after redaction (any writer's name, any case); their comparisons are excluded"
            )

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        for key, title in (
            ("hires_by_category", "Hires by job category (Table 4, Exp. 5)"),
            ("hires_by_job", "Hires by job (Figure 4)"),
            ("position", "Position effect"),
            ("effects", "Effects on each trait (Table 8)"),
            ("trait_means", "Trait means by job (Table 6)"),
            ("type_effects", "Effects on each trait type (Table 8)"),
            ("trait_types", "Trait types by job (Table 9)"),
            ("predictions", "Gender guesses (Table 10)"),
            ("excluded", "Excluded"),
            ("redaction_leaks", "Letters keeping a name after redaction"),
            *extras.HTML_TABLES,
        ):
            if summary.get(key):
                section.table(summary[key], key=key, title=title)
        if summary.get("redaction_change"):
            section.table(
                [summary["redaction_change"]],
                key="redaction_change",
                title="Change in hires when names are withheld (unit: job)",
            )
        name = summary.get("name")
        section.figure(slug(name, "hires"), "Share of hires per job with 95% CIs over pairs")
        section.figure(slug(name, "trait_differences"), "Mean score differences per job")


def _print_effects(summary: dict[str, Any], console: Console) -> None:
    """Table 8's rows: the tested model (letters permuted within job) with its mark, the paper's
    beta regression beside it."""
    for key, what in (("effects", "trait"), ("type_effects", "trait type")):
        print_trait_effects(
            summary.get(key, []),
            [],
            f"Effect on each {what}'s score (tested * | the paper's beta regression)",
            console,
        )
    if summary.get("effects"):
        console.print(
            "  (tested: fractional logit with job fixed effects, p from permuting gender across "
            "letters within job; the paper's beta regression (random job intercept) is not "
            "calibrated near the score "
            "ceiling; a trait type is the mean of its dimensions per letter, grouped as biasim "
            "assumes: "
            + "; ".join(
                f"{k} = {', '.join(v)}" for k, v in summary.get("trait_type_members", {}).items()
            )
            + ")"
        )


def _authors(results: pd.DataFrame, spec: TransmissionSpec) -> pd.DataFrame:
    """One row per letter: its unit id, whether it was written, its writer's group and job."""
    rows = results[results["stage"] == spec.writing]
    columns = [spec.group, spec.cluster, *([spec.category] if spec.category else [])]
    columns += [c for c in spec.describe if c not in columns]
    authors = rows[["unit_id", *columns]].copy()
    authors["valid"] = rows["valid"].fillna(False).astype(bool).to_numpy()
    names = rows["persona_name"] if "persona_name" in rows else pd.Series("", index=rows.index)
    authors["writer_name"] = names.fillna("").astype(str).to_numpy()
    # A letter cut at max_tokens may have lost its end (the signature): never read, counted.
    truncated = rows["truncated"] if "truncated" in rows else pd.Series(False, index=rows.index)
    authors["truncated"] = truncated.fillna(False).astype(bool).to_numpy()
    return authors.set_index("unit_id")


def _relative(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    """The comparison stages (``relative``): whose letter is hired, by group, category and job,
    the jobs that deviate, and the share of hires shown first."""
    picks, excluded, showings = [], [], []
    stages = {s.name: s for s in ctx.study.stages}
    for stage in spec.relative:
        reads = stages[stage].reads
        redacted = reads is not None and reads.author == "redacted"
        rows = _usable_comparisons(results, authors, spec, stage, redacted, section, excluded)
        hired = [
            units[int(label) - 1]
            for units, label in zip(
                rows["reads"].astype(str).str.split("|"), rows["selected"], strict=True
            )
        ]
        showings.append(extras.showings(stage, rows, hired, spec.rationale))
        picks.append(_hires(stage, rows, authors.reindex(hired), spec))
    section.summary.setdefault("excluded", []).extend(excluded)
    table = pd.concat(picks, ignore_index=True)
    if table.empty:
        section.summary["notes"] = ["no comparison gave a valid answer: nothing to count"]
        return
    by_category, by_job = _hires_by_category_and_job(table, spec, ctx)
    deviating = (
        by_job.groupby("stage", sort=False)["deviates"]
        .agg(["sum", "size"])
        .reset_index()
        .rename(columns={"sum": "deviate", "size": "jobs"})
    )
    section.summary["hires_by_category"] = by_category.to_dict("records")
    section.summary["hires_by_job"] = by_job.to_dict("records")
    section.summary["deviating_jobs"] = deviating.to_dict("records")
    # Applicant 1's share of hires: each pair is shown in both orders, so the order effect is
    # measured and cancels in the shares above (counting showings is conservative here: the
    # two showings of a pair tend to pick the same letter, hence opposite positions).
    first = table.assign(_all="all", value=table["position"].map({1: "first", 2: "second"}))
    section.summary["position"] = (
        association.share_table(first, ["stage", "_all"], "first", alpha=spec.alpha)
        .drop(columns="_all")
        .to_dict("records")
    )
    extras.after_relative(
        pd.concat(showings, ignore_index=True), by_job, authors, spec, ctx, section
    )
    section.tables[slug(ctx.name, "hires_by_category")] = by_category
    section.tables[slug(ctx.name, "hires_by_job")] = by_job
    section.figures[slug(ctx.name, "hires")] = transmission_figures.plot_item_shares(
        by_job.assign(ci_low=by_job["boot_low"], ci_high=by_job["boot_high"]),
        panel="stage",
        category=spec.category,
        positive=spec.positive,
        measure="hires going to a {positive} applicant",
        interval="95% CI over pairs",
    )


def _usable_comparisons(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    stage: str,
    redacted: bool,
    section: Section,
    excluded: list[dict[str, Any]],
) -> pd.DataFrame:
    """The comparisons of ``stage`` that count: a valid pick, no letter that keeps a name after
    redaction (a ``redacted`` stage), none cut short; each reason left out is added to
    ``excluded`` with its count."""
    rows = results[results["stage"] == stage]
    ok = rows["valid"].fillna(False).astype(bool) & rows["selected"].notna()
    excluded.append({"stage": stage, "reason": "no valid answer", "count": int((~ok).sum())})
    if redacted:
        leaked = _leaks(results, authors, spec, stage, section)
        shows_leak = pd.Series(
            [bool(leaked & set(u)) for u in rows["reads"].astype(str).str.split("|")],
            index=rows.index,
        )
        excluded.append(
            {
                "stage": stage,
                "reason": "shows a letter that keeps a name after redaction",
                "count": int((ok & shows_leak).sum()),
            }
        )
        ok &= ~shows_leak
    ok = extras.drop_truncated(rows, ok, authors, stage, excluded)
    return rows[ok]


def _hires(
    stage: str, rows: pd.DataFrame, who: pd.DataFrame, spec: TransmissionSpec
) -> pd.DataFrame:
    """One row per comparison of ``stage``: the pair, the job, the hired letter's group (the
    writer ``who`` wrote it) and the position it was shown in."""
    return pd.DataFrame(
        {
            "stage": stage,
            "unit_id": rows["cluster"].astype(str).to_numpy(),
            "pair": rows["cluster"].astype(str).to_numpy(),
            "item": who[spec.cluster].to_numpy(),
            "value": who[spec.group].astype(str).to_numpy(),
            "outcome": PAIRED,
            "position": rows["selected"].astype(int).to_numpy(),
            **({spec.category: who[spec.category].to_numpy()} if spec.category else {}),
        }
    )


def _hires_by_category_and_job(
    table: pd.DataFrame, spec: TransmissionSpec, ctx: AnalysisContext
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The share of hires going to the ``positive`` group by stage (and category), and by job
    with the test of a consistent sign over its pairs (``deviates`` below ``alpha``)."""
    by_category = association.category_table(
        table,
        ["stage", *([spec.category] if spec.category else [])],
        spec.positive,
        n_boot=spec.n_boot,
        seed=ctx.study.seed,
    )
    by_job = association.category_table(
        table,
        ["stage", *([spec.category] if spec.category else []), "item"],
        spec.positive,
        n_boot=spec.n_boot,
        seed=ctx.study.seed,
    )
    signs = association.consistent_pair_test(table, ["stage", "item"], spec.positive)
    by_job = by_job.merge(signs, on=["stage", "item"], how="left")
    by_job["deviates"] = by_job["sign_p"] < spec.alpha
    return by_category, by_job


def _leaks(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    stage: str,
    section: Section,
) -> set[str]:
    """The letters that still name someone once redacted (any writer's name in the study),
    counted per group in the summary: a redacted comparison showing one is left out."""
    writing = results[(results["stage"] == spec.writing) & results["valid"].fillna(False)]
    own = writing["persona_name"].fillna("").astype(str)
    found = names_after_redaction(
        writing["text"].fillna("").astype(str).tolist(),
        own.tolist(),
        sorted(set(own) - {""}),
    )
    leaked = writing.assign(_found=found)[[bool(f) for f in found]]
    groups = authors.reindex(leaked["unit_id"])[spec.group].astype(str)
    for group, count in groups.value_counts().sort_index().items():
        section.summary.setdefault("redaction_leaks", []).append(
            {
                "stage": stage,
                spec.group: group,
                "reason": "a name survives redaction",
                "letters": int(count),
            }
        )
    return set(leaked["unit_id"].astype(str))


def _absolute(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    assert spec.absolute is not None
    rows = extras.readings(results, spec.absolute, authors)
    valid = rows["valid"].fillna(False).astype(bool)
    section.summary.setdefault("excluded", []).append(
        {"stage": spec.absolute, "reason": "no valid answer", "count": int((~valid).sum())}
    )
    valid = extras.drop_truncated(rows, valid, authors, spec.absolute, section.summary["excluded"])
    keys = [spec.cluster, spec.group]
    rows = rows.assign(letter=rows["units"].str[0])
    scores, dropped = traits.long_scores(rows[valid], spec.traits, [*keys, "letter"])
    dropped = dropped.groupby([*keys, "trait", "reason"], as_index=False)["excluded"].sum()
    for row in dropped.groupby("reason")["excluded"].sum().items():
        section.summary["excluded"].append(
            {"stage": spec.absolute, "reason": f"score {row[0]}", "count": int(row[1])}
        )
    section.tables[slug(ctx.name, "scores_excluded")] = dropped
    if scores.empty:
        section.summary.setdefault("notes", []).append("no usable score: no trait effects")
        return
    means = traits.trait_means(scores, keys)
    effects = traits.group_effects(
        scores,
        group=spec.group,
        reference=spec.reference,
        cluster=spec.cluster,
        alpha=spec.alpha,
        unit="letter",
        seed=ctx.study.seed,
    )
    wide = means.pivot_table(index=[spec.cluster, "trait"], columns=spec.group, values="mean")
    others = [c for c in wide.columns if c != spec.reference]
    if others and spec.reference in wide.columns:  # both groups have scores
        differences = wide.reset_index().assign(
            stage=spec.absolute,
            difference=lambda d: d[others[0]] - d[spec.reference],
            label=f"{others[0]} - {spec.reference}",
        )
        section.figures[slug(ctx.name, "trait_differences")] = (
            transmission_figures.plot_trait_differences(
                differences.dropna(subset=["difference"]), panel="stage", cluster=spec.cluster
            )
        )
    section.summary["effects"] = effects.to_dict("records")
    section.summary["trait_means"] = means.to_dict("records")
    extras.overall(scores, spec, ctx, section)
    section.tables[slug(ctx.name, "effects")] = effects
    section.tables[slug(ctx.name, "trait_means")] = means
    if spec.trait_types:
        _trait_types(rows[valid], spec, ctx, section)


def _trait_types(
    rows: pd.DataFrame, spec: TransmissionSpec, ctx: AnalysisContext, section: Section
) -> None:
    """Table 9 (each job's trait-type means by group) and the trait types' rows of Table 8."""
    by = [spec.cluster, *dict.fromkeys(c for c in [spec.category, *spec.describe] if c)]
    scores, dropped = traits.type_scores(rows, spec.trait_types, [*by, spec.group, "letter"])
    section.summary["excluded"].append(
        {
            "stage": spec.absolute,
            "reason": f"trait type: {traits.MEMBER_EXCLUDED}",
            "count": int(dropped["excluded"].sum()),
        }
    )
    section.summary["trait_type_members"] = spec.trait_types
    others = sorted(set(scores[spec.group]) - {spec.positive})
    if scores.empty or not others:
        section.summary.setdefault("notes", []).append("no trait-type table: one group scored")
        return
    table = traits.type_table(scores, by, spec.group, spec.positive, others[0])
    effects = traits.group_effects(
        scores,
        group=spec.group,
        reference=spec.reference,
        cluster=spec.cluster,
        alpha=spec.alpha,
        unit="letter",
        seed=ctx.study.seed,
    )
    section.summary["type_effects"] = effects.to_dict("records")
    section.summary["trait_types"] = table.to_dict("records")
    section.tables[slug(ctx.name, "trait_types")] = table
    section.tables[slug(ctx.name, "type_effects")] = effects


def _predictions(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    out = []
    for stage, field in spec.predictions.items():
        rows = extras.readings(results, stage, authors)
        valid = rows["valid"].fillna(False).astype(bool)
        section.summary.setdefault("excluded", []).append(
            {"stage": stage, "reason": "no valid answer", "count": int((~valid).sum())}
        )
        valid = extras.drop_truncated(rows, valid, authors, stage, section.summary["excluded"])
        rows = rows[valid].assign(_hit=lambda d, f=field: d[f] == spec.predicted)
        subsets = [("all jobs", rows)]
        if spec.category:
            subsets += [(f"{v} jobs", part) for v, part in rows.groupby(spec.category)]
        subsets += [(f"written by {v}", part) for v, part in rows.groupby(spec.group)]
        for subset, part in subsets:
            k, n = int(part["_hit"].sum()), len(part)
            low, high = parity.wilson_interval(np.array(k), np.array(n)) if n else (np.nan, np.nan)
            out.append(
                {
                    "stage": stage,
                    "subset": subset,
                    "n": n,
                    "share": k / n if n else float("nan"),
                    "ci_low": float(low),
                    "ci_high": float(high),
                }
            )
    table = pd.DataFrame(out)
    section.summary["predicted"] = spec.predicted
    section.summary["predictions"] = out
    section.tables[slug(ctx.name, "predictions")] = table
