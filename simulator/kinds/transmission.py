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

from biasim.analysis.studies.bias_transmission.answer_lines import PAIRED
from biasim.analysis.text.redaction import names_after_redaction
from biasim.simulator.common.results import summary_of
from biasim.simulator.kinds import transmission_extras as extras
from biasim.simulator.kinds import transmission_result
from biasim.simulator.kinds.base import AnalysisKind, Section, slug
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
from biasim.simulator.kinds.transmission_result import (
    EFFECTS,
    EXCLUDED,
    TABLES,
    TRAIT_MEANS,
    TRAIT_TYPES,
    TYPE_EFFECTS,
    TransmissionResult,
)
from biasim.simulator.kinds.transmission_spec import TransmissionSpec

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class TransmissionKind(AnalysisKind, spec=TransmissionSpec, result=TransmissionResult):
    """Hires, scores and gender guesses of letters written by name."""

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
        section = Section(summary={})
        authors = _authors(results, spec)
        result = TransmissionResult(
            positive=spec.positive,
            alpha=spec.alpha,
            category=spec.category,
            letters=len(authors),
            letters_failed=int((~authors["valid"]).sum()),
            letters_truncated=int(authors["truncated"].sum()),
        )
        steps = extras.Steps(results, authors, spec, ctx, section, result)
        if spec.relative:
            _relative(steps)
        if spec.absolute:
            _absolute(steps)
        if spec.predictions:
            _predictions(steps)
        if spec.probes:
            extras.probes(steps)
        counted = pd.DataFrame(result.excluded, columns=["stage", "reason", "count"])
        result.excluded = steps.write(EXCLUDED, counted)
        section.summary = summary_of(result)
        return section

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
        for change in summary.get("redaction_change", []):
            if change.get("p_value") is not None:
                tests["hires change when names are withheld"] = unit_stats.Tested.of(
                    change, "p_value"
                )
        fits = [r for r in summary.get("effects", []) if r["model"] == ceiling_effects.MODEL]
        fitted = [r["p_value"] for r in fits if r["p_value"] is not None]
        fitted = [p for p in fitted if not math.isnan(p)]
        if fitted:
            name = f"any trait effect (holm over {len(fits)} fits)"
            tests[name] = unit_stats.Tested.family(min(1.0, min(fitted) * len(fits)), fits)
        return tests

    def headline(self, summary: dict[str, Any]) -> str:
        return (
            f"(transmission): {summary['letters']} letters ({summary['letters_failed']} "
            "failed to be written)"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        return transmission_result.lines(summary)

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        name = summary.get("name")
        return [
            (slug(name, "hires"), "Share of hires per job with 95% CIs over pairs"),
            (slug(name, "trait_differences"), "Mean score differences per job"),
        ]


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


def _relative(steps: extras.Steps) -> None:
    """The comparison stages (``relative``): whose letter is hired, by group, category and job,
    the jobs that deviate, and the share of hires shown first."""
    spec, result = steps.spec, steps.result
    picks, showings = [], []
    for stage in spec.relative:
        rows = _usable_comparisons(stage, steps)
        hired = [
            units[int(label) - 1]
            for units, label in zip(
                rows["reads"].astype(str).str.split("|"), rows["selected"], strict=True
            )
        ]
        showings.append(extras.showings(stage, rows, hired, spec.rationale))
        picks.append(_hires(stage, rows, steps.authors.reindex(hired), spec))
    table = pd.concat(picks, ignore_index=True)
    if table.empty:
        steps.note("no comparison gave a valid answer: nothing to count")
        return
    by_category, by_job = _hires_by_category_and_job(table, spec, steps.ctx)
    deviating = (
        by_job.groupby("stage", sort=False)["deviates"]
        .agg(["sum", "size"])
        .reset_index()
        .rename(columns={"sum": "deviate", "size": "jobs"})
    )
    result.hires_by_category = steps.write(TABLES["hires_by_category"], by_category)
    result.hires_by_job = steps.write(TABLES["hires_by_job"], by_job)
    result.deviating_jobs = TABLES["deviating_jobs"].records(deviating)
    # Applicant 1's share of hires: each pair is shown in both orders, so the order effect is
    # measured and cancels in the shares above (counting showings is conservative here: the
    # two showings of a pair tend to pick the same letter, hence opposite positions).
    first = table.assign(_all="all", value=table["position"].map({1: "first", 2: "second"}))
    result.position = TABLES["position"].records(
        association.share_table(first, ["stage", "_all"], "first", alpha=spec.alpha).drop(
            columns="_all"
        )
    )
    extras.after_relative(pd.concat(showings, ignore_index=True), by_job, steps)
    steps.section.figures[slug(steps.ctx.name, "hires")] = transmission_figures.plot_item_shares(
        by_job.assign(ci_low=by_job["boot_low"], ci_high=by_job["boot_high"]),
        panel="stage",
        category=spec.category,
        positive=spec.positive,
        measure="hires going to a {positive} applicant",
        interval="95% CI over pairs",
    )


def _usable_comparisons(stage: str, steps: extras.Steps) -> pd.DataFrame:
    """The comparisons of ``stage`` that count: a valid pick, no letter that keeps a name after
    redaction (a stage reading letters redacted), none cut short; each reason left out
    counted."""
    rows = steps.results[steps.results["stage"] == stage]
    ok = rows["valid"].fillna(False).astype(bool) & rows["selected"].notna()
    steps.exclude(stage, "no valid answer", (~ok).sum())
    reads = {s.name: s.reads for s in steps.ctx.study.stages}[stage]
    if reads is not None and reads.author == "redacted":
        leak = extras.shows(rows, _leaks(stage, steps))
        steps.exclude(stage, "shows a letter that keeps a name after redaction", (ok & leak).sum())
        ok &= ~leak
    return rows[steps.drop_truncated(rows, ok, stage)]


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
    by = ["stage", *([spec.category] if spec.category else [])]
    by_category, by_job = (
        association.category_table(
            table, keys, spec.positive, n_boot=spec.n_boot, seed=ctx.study.seed
        )
        for keys in (by, [*by, "item"])
    )
    signs = association.consistent_pair_test(table, ["stage", "item"], spec.positive)
    by_job = by_job.merge(signs, on=["stage", "item"], how="left")
    by_job["deviates"] = by_job["sign_p"] < spec.alpha
    return by_category, by_job


def _leaks(stage: str, steps: extras.Steps) -> set[str]:
    """The letters that still name someone once redacted (any writer's name in the study),
    counted per group in the summary: a redacted comparison showing one is left out."""
    results, spec = steps.results, steps.spec
    writing = results[(results["stage"] == spec.writing) & results["valid"].fillna(False)]
    own = writing["persona_name"].fillna("").astype(str)
    found = names_after_redaction(
        writing["text"].fillna("").astype(str).tolist(),
        own.tolist(),
        sorted(set(own) - {""}),
    )
    leaked = writing.assign(_found=found)[[bool(f) for f in found]]
    groups = steps.authors.reindex(leaked["unit_id"])[spec.group].astype(str)
    counts = groups.value_counts().sort_index()
    steps.result.redaction_leaks = (steps.result.redaction_leaks or []) + [
        {"stage": stage, spec.group: group, "reason": "a name survives redaction", "letters": n}
        for group, n in zip(counts.index, counts.astype(int).tolist(), strict=True)
    ] or None
    return set(leaked["unit_id"].astype(str))


def _absolute(steps: extras.Steps) -> None:
    """The scores of single letters: Table 6's means, Table 8's effects, the overall scores."""
    spec, result = steps.spec, steps.result
    assert spec.absolute is not None
    rows = steps.usable(spec.absolute)
    keys = [spec.cluster, spec.group]
    rows = rows.assign(letter=rows["units"].str[0])
    scores, dropped = traits.long_scores(rows, spec.traits, [*keys, "letter"])
    dropped = dropped.groupby([*keys, "trait", "reason"], as_index=False)["excluded"].sum()
    for reason, count in dropped.groupby("reason")["excluded"].sum().items():
        steps.exclude(spec.absolute, f"score {reason}", count)
    steps.csv("scores_excluded", dropped)
    if scores.empty:
        steps.note("no usable score: no trait effects")
        return
    means = traits.trait_means(scores, keys)
    effects = _effects(scores, steps)
    wide = means.pivot_table(index=[spec.cluster, "trait"], columns=spec.group, values="mean")
    others = [c for c in wide.columns if c != spec.reference]
    if others and spec.reference in wide.columns:  # both groups have scores
        differences = wide.reset_index().assign(
            stage=spec.absolute,
            difference=lambda d: d[others[0]] - d[spec.reference],
            label=f"{others[0]} - {spec.reference}",
        )
        steps.section.figures[slug(steps.ctx.name, "trait_differences")] = (
            transmission_figures.plot_trait_differences(
                differences.dropna(subset=["difference"]), panel="stage", cluster=spec.cluster
            )
        )
    result.effects = steps.write(EFFECTS, effects)
    result.trait_means = steps.write(TRAIT_MEANS, means)
    extras.overall(scores, steps)
    if spec.trait_types:
        _trait_types(rows, steps)


def _effects(scores: pd.DataFrame, steps: extras.Steps) -> pd.DataFrame:
    """Each trait's (or trait type's) effect of the writer's group, letters permuted within
    job."""
    spec = steps.spec
    return traits.group_effects(
        scores,
        group=spec.group,
        reference=spec.reference,
        cluster=spec.cluster,
        alpha=spec.alpha,
        unit="letter",
        seed=steps.ctx.study.seed,
    )


def _trait_types(rows: pd.DataFrame, steps: extras.Steps) -> None:
    """Table 9 (each job's trait-type means by group) and the trait types' rows of Table 8."""
    spec, result = steps.spec, steps.result
    assert spec.absolute is not None
    by = [spec.cluster, *dict.fromkeys(c for c in [spec.category, *spec.describe] if c)]
    scores, dropped = traits.type_scores(rows, spec.trait_types, [*by, spec.group, "letter"])
    steps.exclude(spec.absolute, f"trait type: {traits.MEMBER_EXCLUDED}", dropped["excluded"].sum())
    result.trait_type_members = spec.trait_types
    others = sorted(set(scores[spec.group]) - {spec.positive})
    if scores.empty or not others:
        steps.note("no trait-type table: one group scored")
        return
    table = traits.type_table(scores, by, spec.group, spec.positive, others[0])
    result.type_effects = steps.write(TYPE_EFFECTS, _effects(scores, steps))
    result.trait_types = steps.write(TRAIT_TYPES, table)


def _predictions(steps: extras.Steps) -> None:
    """Table 10: the share of letters guessed to be by ``predicted``, over every job, per job
    category and per writer's real group."""
    spec = steps.spec
    out = []
    for stage, field in spec.predictions.items():
        rows = steps.usable(stage).assign(_hit=lambda d, f=field: d[f] == spec.predicted)
        subsets = [("all jobs", rows)]
        if spec.category:
            subsets += [(f"{v} jobs", part) for v, part in rows.groupby(spec.category)]
        subsets += [(f"written by {v}", part) for v, part in rows.groupby(spec.group)]
        for subset, part in subsets:
            k, n = int(part["_hit"].sum()), len(part)
            low, high = parity.wilson_interval(np.array(k), np.array(n)) if n else (np.nan, np.nan)
            share = k / n if n else float("nan")
            out.append(
                {"stage": stage, "subset": subset, "n": n, "share": share}
                | {"ci_low": float(low), "ci_high": float(high)}
            )
    steps.result.predicted = spec.predicted
    steps.result.predictions = steps.write(TABLES["predictions"], pd.DataFrame(out))
