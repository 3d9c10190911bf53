"""The ``transmission`` kind's result, declared once: its tables (what each column is and how it
is shown) and the typed dataclass holding them. The summary, its JSON Schema, the console, the
page and the CSV files' column order all come from these declarations
(``simulator/common/results.py``); the kind adds its sentences (:func:`lines`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import Records, ResultTable
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds import letter_evaluation
from biasim.simulator.kinds.lazy import ceiling_effects
from biasim.simulator.kinds.sections.columns import interval


def _share(counted: str, what: str) -> tuple[Column, ...]:
    """How many were ``counted``, the share of them that ``what``, and its Wilson interval
    (hires by category and job, the position effect, the gender guesses)."""
    return (
        Column("n", counted, "int", description=f"{counted.capitalize()}."),
        Column("share", "share", ".3f", description=f"Share that {what}."),
        interval("ci_low", "ci_high", "Wilson interval."),
    )


def _units(unit: str) -> tuple[Column, ...]:
    """A test's unit and how many of them it counted."""
    return (
        Column("unit", "unit", description=f"The test's unit ({unit})."),
        Column("n_units", "units", "int", description="How many."),
    )


#: The shares of hires and their two intervals (by category and by job).
_HIRES = (
    *_share("decisions", "hire the letter of `positive`"),
    interval("boot_low", "boot_high", "Bootstrap over pairs."),
    Column("calls", "pairs", "int", description="Pairs the bootstrap resamples."),
)
HIRES_BY_CATEGORY = ResultTable(
    key="hires_by_category",
    title="hires going to {positive}, by job category (Table 4, Exp. 5)",
    columns=_HIRES,
    description="Share of comparisons won by `positive`, per stage and category.",
    note="each pair of letters is read in both orders; the second 95% CI: bootstrap over pairs",
)
HIRES_BY_JOB = ResultTable(
    key="hires_by_job",
    title="hires going to {positive}, by job (Figure 4)",
    columns=(
        Column("item", "job", description="The job."),
        *_HIRES,
        Column("pairs", "pair units", "int", description="Pairs of letters read."),
        Column("split", "split", "int", description="Pairs hired differently in the two orders."),
        Column("sign_p", "p", "p", description="Sign test on the pairs hired alike."),
        *_units("pair"),
        Column("deviates", "deviates", "bool", description="`sign_p` below `alpha`."),
    ),
    description="The same per job, with its test.",
    console=False,
)
DEVIATING_JOBS = ResultTable(
    key="deviating_jobs",
    title="jobs that deviate from chance",
    columns=(
        Column("deviate", "deviate", "int", description="Jobs whose sign test rejects chance."),
        Column("jobs", "jobs", "int", description="Jobs tested."),
    ),
    description="Jobs deviating from chance, per stage.",
    note="sign test on the pairs hired alike in both orders, at `alpha`",
    file=None,
)
POSITION = ResultTable(
    key="position",
    title="Applicant 1 hired (position effect)",
    columns=(
        *_share("decisions", "hire the letter shown first"),
        Column("p_value", "p", "p", description="Exact test against 0.5."),
        *_units("call"),
    ),
    description="Share won by the letter shown first.",
    note="each pair is shown in both orders, so the position effect cancels in the shares",
    file=None,
)
REDACTION_CHANGE = ResultTable(
    key="redaction_change",
    title="change in hires when names are withheld",
    columns=(
        Column("n_units", "units", "int", description="Jobs (the test's unit)."),
        Column("letters", "letters", "int", description="Letters of `positive` compared."),
        Column("share_named", "share named", ".3f", description="Their share of hires named."),
        Column("share_redacted", "redacted", ".3f", description="Their share redacted."),
        Column("difference", "change", "+.3f", description="Named minus redacted."),
        interval("ci_low", "ci_high", "Its interval."),
        Column("p_value", "p", "p", description="One-sample t over the jobs' differences."),
        Column("significant", "significant", "bool", description="p below `alpha`."),
    ),
    description="Named vs redacted: each letter of `positive` against itself, in the stages "
    "`named` and `redacted`, the test over its `unit`.",
    note="each {positive} letter's share of hires named against its own share redacted",
)
#: A term's use by the letters of one group and the rest (rationales, probe answers).
_TERMS = (
    Column("term", "term", description="The term."),
    Column("units_group", "letters, group", "int", description="Letters of `positive`."),
    Column("units_rest", "letters, rest", "int", description="The other letters."),
    Column("share_group", "share, group", ".3f", description="Share of them using it."),
    Column("share_rest", "share, rest", ".3f", description="Share of the others."),
    Column("difference", "difference", "+.3f", description="Group minus rest."),
    Column("p_value", "p", "p", description="Permutation test within job."),
    Column("q_value", "q (BH)", ".3f", description="Benjamini-Hochberg across the terms."),
    Column("unit", "unit", description="The test's unit."),
)
RATIONALE_TERMS = ResultTable(
    key="rationale_terms",
    title="rationale terms by the hired letter's group (Table 12)",
    columns=_TERMS,
    description="Rationale terms used more by one group (FDR-significant ones).",
    note="every term tested: the rationale_terms CSV table",
    file=None,  # the CSV file holds every term tested, the summary the significant ones
)
PROBE_TERMS = replace(
    RATIONALE_TERMS,
    key="probe_terms",
    title="probe answer terms by the writer's group (appendix A.4)",
    description="Probe answer terms used more by one group (FDR-significant ones).",
    note="every term tested: the probe_terms CSV table",
)
WEAKER = ResultTable(
    key="weaker_than_association",
    title="jobs whose hiring bias is weaker than the association bias",
    columns=(
        Column("jobs", "jobs", "int", description="Jobs compared."),
        Column("observed", "hiring bias", "int", description="Jobs with a hiring bias."),
        Column("weaker", "weaker", "int", description="Jobs whose bias is weaker."),
        Column("missing", "no share", "int", description="Jobs the association file lacks."),
    ),
    description="Jobs whose hiring share is weaker than association's, per stage.",
    note="association: {association_source}; per job: the weaker_than_association CSV table",
    file=None,  # the CSV file holds the jobs, the summary their counts
)
EFFECTS = replace(
    letter_evaluation.EFFECTS,
    labels_from=(),
    note="fractional logit with job fixed effects, p from permuting the group across letters "
    "within job (tested) / the paper's beta regression with a random job intercept (not "
    "calibrated near the score ceiling)",
)
TYPE_EFFECTS = replace(
    EFFECTS,
    key="type_effects",
    title="effect on each trait type (Table 8)",
    description="Each trait type's effect.",
)
TRAIT_MEANS = replace(letter_evaluation.TRAIT_MEANS, title="trait means by job (Table 6)")
TRAIT_TYPES = replace(
    letter_evaluation.TRAIT_TYPE_TABLE, title="trait types by job (Table 9)", file=""
)
OVERALL_SCORES = ResultTable(
    key="overall_scores",
    title="scores over every trait, by group (section 4.1)",
    columns=(
        Column("n_scores", "scores", "int", description="Scores."),
        Column("letters", "letters", "int", description="Letters scored."),
        Column("mean", "mean", ".1f", description="Their mean."),
        Column("sd", "sd", ".2f", description="Their SD."),
    ),
    description="Scores per group over every letter.",
)
PREDICTIONS = ResultTable(
    key="predictions",
    title="letters guessed '{predicted}' (Table 10)",
    columns=_share("letters", "were guessed `predicted`"),
    description="Share of letters whose author is predicted `predicted`.",
)
EXCLUDED = ResultTable(
    key="excluded",
    title="excluded",
    columns=(
        Column("reason", "reason", description="Why."),
        Column("count", "count", "int", description="Letters or answers left out."),
    ),
    description="Letters and answers left out, by stage and reason.",
    says_nothing=lambda r: r["count"] == 0,
    why="none left out",
)
REDACTION_LEAKS = ResultTable(
    key="redaction_leaks",
    title="letters that keep a name after redaction",
    columns=(
        Column("reason", "reason", description="Why."),
        Column("letters", "letters", "int", description="Letters of the writers' group."),
    ),
    description="Redacted letters that still name the author.",
    note="any writer's name, any case: the comparisons showing them are excluded",
    file=None,
)


@dataclass(kw_only=True)
class TransmissionResult:
    """What ``transmission`` computes; the summary, its schema and renderings come from it."""

    positive: str = field(metadata=about("The value counted."))
    alpha: float = field(metadata=about("Level of the tests."))
    category: str | None = field(metadata=about("Job grouping column."))
    letters: int = field(metadata=about("Letters written.", {"minimum": 0}))
    letters_failed: int = field(metadata=about("Letters that failed.", {"minimum": 0}))
    letters_truncated: int = field(metadata=about("Letters cut at `max_tokens`.", {"minimum": 0}))
    notes: list[str] | None = field(
        default=None, metadata=about("What could not be computed, and why.")
    )
    hires_by_category: Records | None = field(default=None, metadata=tabled(HIRES_BY_CATEGORY))
    hires_by_job: Records | None = field(default=None, metadata=tabled(HIRES_BY_JOB))
    deviating_jobs: Records | None = field(default=None, metadata=tabled(DEVIATING_JOBS))
    position: Records | None = field(default=None, metadata=tabled(POSITION))
    redaction_change: Records | None = field(default=None, metadata=tabled(REDACTION_CHANGE))
    rationale_terms: Records | None = field(default=None, metadata=tabled(RATIONALE_TERMS))
    rationale_terms_tested: int | None = field(default=None, metadata=about("Terms tested."))
    association_source: str | None = field(default=None, metadata=about("What is compared."))
    weaker_than_association: Records | None = field(default=None, metadata=tabled(WEAKER))
    effects: Records | None = field(default=None, metadata=tabled(EFFECTS))
    trait_means: Records | None = field(default=None, metadata=tabled(TRAIT_MEANS))
    overall_scores: Records | None = field(default=None, metadata=tabled(OVERALL_SCORES))
    trait_type_members: dict[str, list[str]] | None = field(
        default=None, metadata=about("Trait type -> its traits.")
    )
    type_effects: Records | None = field(default=None, metadata=tabled(TYPE_EFFECTS))
    trait_types: Records | None = field(default=None, metadata=tabled(TRAIT_TYPES))
    predicted: str | None = field(default=None, metadata=about("The prediction counted."))
    predictions: Records | None = field(default=None, metadata=tabled(PREDICTIONS))
    probes: list[str] | None = field(default=None, metadata=about("The probe stages."))
    probe_terms: Records | None = field(default=None, metadata=tabled(PROBE_TERMS))
    excluded: Records = field(default_factory=list, metadata=tabled(EXCLUDED))
    redaction_leaks: Records | None = field(default=None, metadata=tabled(REDACTION_LEAKS))


def lines(summary: dict[str, Any]) -> list[str]:
    """The sentences said before the tables, on the console and the page alike: what could
    not be computed, the traits that move, the terms tested (found or not) and the letters
    never read."""
    out = list(summary.get("notes", [])) + _effect_lines(summary)
    group = summary.get("positive")
    if "rationale_terms_tested" in summary:
        found = len(summary.get("rationale_terms", []))
        out.append(
            f"rationale terms by hired {group}: {summary['rationale_terms_tested']} tested "
            f"(unit: hired letter, within job), {found} FDR-significant"
        )
    if summary.get("probes"):
        out.append(
            f"probes {', '.join(summary['probes'])}: "
            f"{len(summary.get('probe_terms', []))} terms differ by writer (unit: letter)"
        )
    if summary.get("letters_truncated"):
        out.append(
            f"{summary['letters_truncated']} letters cut at max_tokens: never read (excluded "
            "and counted in the exclusions table)"
        )
    return out


def _effect_lines(summary: dict[str, Any]) -> list[str]:
    """The traits the tested model finds moved, and how the trait types are grouped."""
    tested = [r for r in summary.get("effects", []) if r["model"] == ceiling_effects.MODEL]
    out = []
    if tested:
        moved = [r["trait"] for r in tested if r["significant"]]
        out.append(
            f"{len(moved)} of {len(tested)} traits moved at alpha {summary['alpha']} (fractional "
            "logit, the group permuted across letters within job; see the effects table)"
            + (f": {', '.join(moved)}" if moved else "")
        )
    members = summary.get("trait_type_members")
    if members:
        out.append(
            "a trait type is the mean of its dimensions per letter, grouped as biasim assumes: "
            + "; ".join(f"{k} = {', '.join(v)}" for k, v in members.items())
        )
    return out
