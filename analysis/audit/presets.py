"""Audit formats (``biasim audit --format NAME``): which rule an audit answers, the tables it
adds to the selection (or scoring) rate tables every format shares, the sections it cites and
what the data cannot show. Each preset is registered by name in
:data:`biasim.registry.AUDIT_FORMATS`; the audit tool and the report read only what a preset
puts into the audit, so neither imports a preset.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from biasim.analysis.audit.eeoc import eeoc_columns

#: What no outcome table shows, whatever the rule: said by every preset.
NOT_SHOWN = (
    "Whether the tool is job-related and consistent with business necessity, or valid for the "
    "job: the tables show who was selected, not whether the selection measures what the job "
    "needs, nor why any difference arises."
)


@dataclass(frozen=True)
class AuditContext:
    """What a preset needs to know about the data beside the tables.

    Attributes:
        by: The stratum columns leading every table.
        categories: Per table key, its category column(s).
        repeated: Applicants decided more than once within a stratum (0 in a decisions file,
            whose rows are taken as one applicant each).
        unit_note: How the data defines an applicant, for the tests' unit.
        names: ``(distinct names, applicants)`` of a run whose applicants carry names; None
            for a decisions file.
    """

    by: list[str]
    categories: dict[str, list[str]]
    repeated: int = 0
    unit_note: str = ""
    names: tuple[int, int] | None = None


@dataclass(frozen=True)
class AuditPreset:
    """One audit format.

    Attributes:
        name: The ``--format`` name.
        label: Short name for table titles (``LL144``).
        title: The report section's title.
        cites: ``(what, section)`` pairs: which section of the rule each table answers.
        cannot_show: Plain statements of what the data cannot show.
        columns: Columns the preset adds, as ``(key, label, spec)`` for the renderers (spec as
            :func:`biasim.simulator.common.html.fmt`, or ``ci`` with the upper key after it).
        needs_selection: Whether the rule is about selections (a score alone is refused).
        assessment: The fields of the impact assessment or technical file the rule asks for,
            as ``(field, section, fact)``: ``fact`` names what the audit fills it with (a key
            of :func:`assessment_rows`' facts), None where only the deployer can.
    """

    name: str
    label: str
    title: str
    cites: tuple[tuple[str, str], ...]
    cannot_show: tuple[str, ...] = (NOT_SHOWN,)
    columns: tuple[tuple[str, ...], ...] = ()
    needs_selection: bool = False
    assessment: tuple[tuple[str, str, str | None], ...] = ()

    def extend(
        self, tables: dict[str, pd.DataFrame], context: AuditContext
    ) -> tuple[dict[str, pd.DataFrame], list[str]]:
        """The tables with this preset's columns, and notes on reading them."""
        return tables, []


class EEOCPreset(AuditPreset):
    """The Uniform Guidelines' adverse-impact reading (29 CFR 1607.4(D))."""

    def extend(
        self, tables: dict[str, pd.DataFrame], context: AuditContext
    ) -> tuple[dict[str, pd.DataFrame], list[str]]:
        out = {
            key: eeoc_columns(table, context.by, context.categories[key])
            for key, table in tables.items()
        }
        notes = [
            "Fisher's exact test and the two-standard-deviation z compare each category with "
            "the highest-rate category of its table; unit of exchangeability: the applicant "
            f"({context.unit_note}). With more than two categories the reference is chosen by "
            "the data and the p-values are not corrected for that choice or for the number of "
            "categories."
        ]
        if context.names and context.names[0] < context.names[1]:
            notes.append(
                f"The {context.names[1]} applicants carry {context.names[0]} distinct names, and "
                "the tests treat applicants as independent: a tool that reacts to one name "
                "moves all its applicants at once, so the p-values speak of these names, not of "
                "the groups' names in general (for that they would be too small)."
            )
        if context.repeated:
            for table in out.values():
                table["fisher_p"] = float("nan")
                table["two_sd_z"] = float("nan")
            notes.append(
                f"{context.repeated} applicant(s) were decided more than once within a stratum: "
                "their decisions are not independent, so no Fisher p or z is given (they would "
                "be too small); the rates, ratios and shortfalls stand."
            )
        return out, notes


def _ci(key: str) -> tuple[str, ...]:
    return (f"{key}_ci_low", "impact ratio 95% CI", "ci", f"{key}_ci_high")


LL144 = AuditPreset(
    name="ll144",
    label="LL144",
    title="Bias audit (NYC Local Law 144)",
    cites=(
        ("selection or scoring rates and impact ratios per category", "6 RCNY 5-301(a), (b)"),
        ("intersectional categories; categories under 2% of the data", "6 RCNY 5-301(a), (d)"),
    ),
)

EEOC = EEOCPreset(
    name="eeoc",
    label="EEOC",
    title="Adverse impact (EEOC Uniform Guidelines, 29 CFR 1607.4(D))",
    cites=(
        ("impact ratio against the highest-rate group; the four-fifths rule", "29 CFR 1607.4(D)"),
        (
            "statistical significance (Fisher, two standard deviations), practical significance "
            "(shortfall, one-person flip)",
            "29 CFR 1607.4(D), second and third sentences",
        ),
        ("selection rates by sex and race/ethnicity", "29 CFR 1607.4(A), (B); 1607.16(R)"),
    ),
    cannot_show=(
        NOT_SHOWN.replace("the job needs,", "the job needs (validity, 29 CFR 1607.5 and 1607.14),"),
        "Whether applicants were discouraged from applying, or whether the applicant pool is "
        "atypical (29 CFR 1607.4(D)): the data hold only those decided.",
    ),
    columns=(
        ("reference", "reference group", "text"),
        _ci("impact_ratio"),
        ("two_sd_z", "z (SDs)", ".2f"),
        ("fisher_p", "Fisher p", "p"),
        ("shortfall", "shortfall", "int"),
        ("flip_changes_conclusion", "one-person flip", "text"),
    ),
    needs_selection=True,
)


def assessment_rows(preset: AuditPreset, facts: dict[str, str]) -> list[dict[str, str | None]]:
    """The preset's assessment fields, each with the audit's fact or None (the deployer's).

    Args:
        preset: The audit format.
        facts: What the audit can state: ``system``, ``dates``, ``data``, ``groups``,
            ``metrics`` and ``results``.
    """
    return [
        {"field": name, "section": section, "value": facts.get(fact) if fact else None}
        for name, section, fact in preset.assessment
    ]


COLORADO = EEOCPreset(
    name="colorado",
    label="Colorado",
    title="Impact assessment (Colorado AI Act, SB 24-205, C.R.S. 6-1-1701 to 6-1-1707)",
    cites=(
        (
            "analysis of known or foreseeable risks of algorithmic discrimination: outcome rates "
            "and impact ratios by group",
            "C.R.S. 6-1-1703(3)(b)(II)",
        ),
        (
            "metrics used to evaluate the system and its known limitations",
            "C.R.S. 6-1-1703(3)(b)(V)",
        ),
    ),
    cannot_show=(
        *EEOC.cannot_show,
        "The system's purpose, benefits, transparency measures, post-deployment monitoring and "
        "the deployer's risk-management program (C.R.S. 6-1-1703(2), (3)(b)(I), (VI), (VII)).",
    ),
    columns=EEOC.columns,
    needs_selection=True,
    assessment=(
        ("purpose, intended uses, deployment context, benefits", "6-1-1703(3)(b)(I)", None),
        ("risks of algorithmic discrimination found", "6-1-1703(3)(b)(II)", "results"),
        ("steps taken to mitigate those risks", "6-1-1703(3)(b)(II)", None),
        ("categories of data processed as inputs and outputs", "6-1-1703(3)(b)(III)", "data"),
        ("metrics used to evaluate performance", "6-1-1703(3)(b)(V)", "metrics"),
        ("groups examined", "6-1-1703(3)(b)(II)", "groups"),
        ("system assessed and when", "6-1-1703(3)(a)", "system"),
        ("period of the data", "6-1-1703(3)(a)", "dates"),
        ("transparency measures", "6-1-1703(3)(b)(VI)", None),
        ("post-deployment monitoring and user safeguards", "6-1-1703(3)(b)(VII)", None),
    ),
)

CALIFORNIA = EEOCPreset(
    name="california",
    label="California",
    title="Anti-bias testing (California FEHA regulations on automated-decision systems, "
    "Cal. Code Regs. tit. 2, 11008 ff.)",
    cites=(
        (
            "anti-bias testing: its results and scope are evidence relevant to a claim or defense",
            "Cal. Code Regs. tit. 2, 11009(f)",
        ),
        ("adverse impact under the Uniform Guidelines the regulations adopt", "tit. 2, 11017(e)"),
        ("automated-decision system data kept four years", "tit. 2, 11013(c)"),
    ),
    cannot_show=(
        *EEOC.cannot_show,
        "Whether a less discriminatory alternative would serve the employer's goals as well, "
        "and whether the system screens out applicants needing an accommodation (disability).",
    ),
    columns=EEOC.columns,
    needs_selection=True,
    assessment=(
        ("system tested and when (the test's recency)", "11009(f)", "system"),
        ("scope of the test: groups examined", "11009(f)", "groups"),
        ("results of the test", "11009(f)", "results"),
        ("metrics", "11009(f)", "metrics"),
        ("data tested (inputs and outputs)", "11013(c)", "data"),
        ("period of the data", "11013(c)", "dates"),
        ("response to the results", "11009(f)", None),
        ("records kept four years, and where", "11013(c)", None),
    ),
)

EU_AI_ACT = EEOCPreset(
    name="eu-ai-act",
    label="EU AI Act",
    title="Bias examination of a high-risk hiring system (Regulation (EU) 2024/1689, Annex III "
    "point 4(a))",
    cites=(
        (
            "examination of possible biases affecting fundamental rights or leading to "
            "discrimination",
            "Art. 10(2)(f)-(g)",
        ),
        (
            "validation and testing: metrics of potentially discriminatory impacts",
            "Annex IV point 2(g)",
        ),
        ("accuracy, robustness, known limitations", "Art. 15; Annex IV point 3"),
    ),
    cannot_show=(
        *EEOC.cannot_show,
        "The risk-management system, data governance of the training data, human oversight "
        "and the deployer's information to workers (Art. 9, 10(2)(a)-(e), 14, 26(7)).",
    ),
    columns=EEOC.columns,
    needs_selection=True,
    assessment=(
        ("intended purpose", "Annex IV point 1(a)", None),
        ("system tested", "Annex IV point 2(g)", "system"),
        ("test data and their characteristics", "Annex IV point 2(g)", "data"),
        ("groups examined for bias", "Art. 10(2)(f)", "groups"),
        ("metrics of discriminatory impact", "Annex IV point 2(g)", "metrics"),
        ("test results", "Annex IV point 2(g)", "results"),
        ("dates of the test data", "Annex IV point 2(g)", "dates"),
        ("measures to detect, prevent and mitigate the biases found", "Art. 10(2)(g)", None),
        ("human oversight measures", "Art. 14; Annex IV point 2(e)", None),
    ),
)
