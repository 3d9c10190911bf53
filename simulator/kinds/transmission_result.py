"""The ``transmission`` kind's result, declared once: its tables (what each column is and how it
is shown, in its codebook ``transmission_result.tables.yaml``) and the typed dataclass holding
them. The summary, its JSON Schema, the console, the page and the CSV files' column order all
come from these declarations (``simulator/common/results.py``); the kind adds its sentences
(:func:`lines`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds import letter_evaluation
from biasim.simulator.kinds.lazy import ceiling_effects
from biasim.simulator.kinds.sections.codebook import tables_of

#: The tables of its result, declared in transmission_result.tables.yaml.
TABLES = tables_of(__name__)
EXCLUDED = replace(TABLES["excluded"], says_nothing=lambda r: r["count"] == 0)
#: The trait tables are letter_evaluation's, retitled (the paper's numbering).
EFFECTS = replace(
    letter_evaluation.TABLES["effects"],
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
TRAIT_MEANS = replace(letter_evaluation.TABLES["trait_means"], title="trait means by job (Table 6)")
TRAIT_TYPES = replace(
    letter_evaluation.TABLES["trait_types"], title="trait types by job (Table 9)", file=""
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
    hires_by_category: Records | None = field(
        default=None, metadata=tabled(TABLES["hires_by_category"])
    )
    hires_by_job: Records | None = field(default=None, metadata=tabled(TABLES["hires_by_job"]))
    deviating_jobs: Records | None = field(default=None, metadata=tabled(TABLES["deviating_jobs"]))
    position: Records | None = field(default=None, metadata=tabled(TABLES["position"]))
    redaction_change: Records | None = field(
        default=None, metadata=tabled(TABLES["redaction_change"])
    )
    rationale_terms: Records | None = field(
        default=None, metadata=tabled(TABLES["rationale_terms"])
    )
    rationale_terms_tested: int | None = field(default=None, metadata=about("Terms tested."))
    association_source: str | None = field(default=None, metadata=about("What is compared."))
    weaker_than_association: Records | None = field(
        default=None, metadata=tabled(TABLES["weaker_than_association"])
    )
    effects: Records | None = field(default=None, metadata=tabled(EFFECTS))
    trait_means: Records | None = field(default=None, metadata=tabled(TRAIT_MEANS))
    overall_scores: Records | None = field(default=None, metadata=tabled(TABLES["overall_scores"]))
    trait_type_members: dict[str, list[str]] | None = field(
        default=None, metadata=about("Trait type -> its traits.")
    )
    type_effects: Records | None = field(default=None, metadata=tabled(TYPE_EFFECTS))
    trait_types: Records | None = field(default=None, metadata=tabled(TRAIT_TYPES))
    predicted: str | None = field(default=None, metadata=about("The prediction counted."))
    predictions: Records | None = field(default=None, metadata=tabled(TABLES["predictions"]))
    probes: list[str] | None = field(default=None, metadata=about("The probe stages."))
    probe_terms: Records | None = field(default=None, metadata=tabled(TABLES["probe_terms"]))
    excluded: Records = field(default_factory=list, metadata=tabled(EXCLUDED))
    redaction_leaks: Records | None = field(
        default=None, metadata=tabled(TABLES["redaction_leaks"])
    )


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
