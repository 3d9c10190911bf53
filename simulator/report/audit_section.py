"""The audit section of ``report.html``: an LL144 audit attached to a run, as tables and limits.

``biasim audit`` (:mod:`biasim.simulator.tools.audit`) computes the audit and stores it in the
run's ``summary.json``; the page renders it from there, so the report never imports the tool.
"""

from __future__ import annotations

import html
from typing import Any

from biasim.simulator.common.html import Column, HtmlSection

_TITLES = {
    "sex": "Sex categories",
    "race_ethnicity": "Race/ethnicity categories",
    "intersectional": "Intersectional categories (sex x race/ethnicity)",
}


def merged_note(audit: dict[str, Any]) -> str | None:
    """Which category labels were merged because they differ only in case or whitespace."""
    merged = audit.get("merged") or {}
    parts = [
        f"{column}: `{label}` from {', '.join(f'`{s}`' for s in spellings)}"
        for column, labels in merged.items()
        for label, spellings in labels.items()
    ]
    if not parts:
        return None
    return (
        "Category labels that differ only in case or whitespace were counted as one: "
        + "; ".join(parts)
        + "."
    )


def audit_limits(audit: dict[str, Any]) -> list[str]:
    """What a reader of the audit tables must know: who counts as an individual, what was left
    out, and categories too small to serve as the reference of the impact ratios."""
    found = []
    distinct = audit.get("n_distinct_applicants")
    if distinct is not None and distinct < audit["n_assessed"]:
        found.append(
            f"The audit counts {audit['n_assessed']} decisions about {distinct} distinct "
            "simulated applicants (names): each decision is one assessment, so the counts per "
            "category are decisions, and the information about each category rests on "
            "fewer people than the counts suggest."
        )
    if audit["n_missing_outcome"]:
        found.append(
            f"{audit['n_missing_outcome']} rows have no outcome (e.g. an invalid answer) and "
            "are in no calculation."
        )
    for note in (audit["source"].get("partial"), merged_note(audit)):
        if note:
            found.append(note[0].upper() + note[1:] + ("" if note.endswith(".") else "."))
    unknown = {k: v for k, v in audit["unknown"].items() if v}
    if unknown:
        listed = ", ".join(f"{k.replace('_', '/')}: {v}" for k, v in unknown.items())
        found.append(f"Individuals of unknown category, left out of that table: {listed}.")
    for key, rows in audit["tables"].items():
        rate = audit["metric"]
        ranked = [r for r in rows if r.get("impact_ratio") == 1 and r.get("under_2pct")]
        for row in ranked:
            found.append(
                f"In the {key.replace('_', '/')} table the highest {rate.replace('_', ' ')} "
                f"belongs to a category under 2% of the data (n = {row['n']}): every other "
                "impact ratio is relative to it; --exclude-small leaves it out, as the rules "
                "allow."
            )
    return found


def audit_html(audit: dict[str, Any]) -> HtmlSection:
    """The audit as a report section (its numbers point into ``summary.audit``)."""
    section = HtmlSection("Bias audit (NYC Local Law 144)", ("audit",))
    source = audit["source"]
    dates = source.get("date_range")
    section.paragraph(
        f"Data: {source['kind']} - {source['description']} Date range: "
        + (f"{dates[0]} to {dates[1]}" if dates else "not given")
        + f" ({source.get('date_basis')})."
    )
    metric = "selection rate" if audit["metric"] == "selection_rate" else "scoring rate"
    section.raw(
        "<p>Individuals assessed: "
        + section.number("n_assessed", audit["n_assessed"], "int")
        + "; with no outcome (not in any calculation): "
        + section.number("n_missing_outcome", audit["n_missing_outcome"], "int")
        + f". Impact ratio = a category's {html.escape(metric)} / the highest {html.escape(metric)}"
        + "; categories under "
        + section.number("threshold", audit["threshold"], ".0%")
        + " of the data are flagged"
        + (
            " and excluded from the impact ratios (their counts and rates are still shown)."
            if audit["exclude_small"]
            else " (pass --exclude-small to leave them out of the impact ratios, as the rules "
            "allow)."
        )
        + "</p>"
    )
    rate = audit["metric"]
    count = "n_selected" if rate == "selection_rate" else "n_above_median"
    by = list(audit["columns"].get("by") or [])
    for key, rows in audit["tables"].items():
        cats = [c for c in (audit["columns"]["sex"], audit["columns"]["race_ethnicity"]) if c]
        cats = cats if key == "intersectional" else [audit["columns"][key]]
        section.table(
            rows,
            key=("tables", key),
            title=_TITLES[key],
            columns=[
                *[Column(c) for c in [*by, *cats]],
                Column("n", "individuals", "int"),
                Column(count, "selected" if rate == "selection_rate" else "above median", "int"),
                Column(rate, metric, ".3f"),
                Column("impact_ratio", "impact ratio", ".3f"),
                Column("share", "share of data", ".1%"),
                Column("below_four_fifths", "below 4/5", "text"),
                Column("under_2pct", "under 2%", "text"),
                Column("excluded", "excluded", "text"),
            ],
        )
        section.raw(
            '<p class="muted">Unknown category (not in this table): '
            + section.number(("unknown", key), audit["unknown"].get(key), "int")
            + "</p>"
        )
    return section
