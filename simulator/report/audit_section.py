"""The audit sections of ``report.html``: each audit attached to a run (LL144, EEOC or another
preset of ``biasim audit --format``), as tables, the sections they answer and limits.

``biasim audit`` (:mod:`biasim.simulator.tools.audit`) computes the audit and stores it in the
run's ``summary.json``; the page renders it from there, so the report never imports the tool.
"""

from __future__ import annotations

import html
from typing import Any

from biasim.simulator.common.html import Column, HtmlSection, fmt

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


def headcount(audit: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Who the audit counts, as ``(text, key)`` parts: a part with a key is the value of
    ``audit[key]``. The console and the report both print these parts, so their counts agree.

    Individuals are distinct people (a run's simulated applicants, however many policies read
    them); assessments are the decisions about them."""
    assessments = [(fmt(audit["n_assessed"], "int"), "n_assessed"), (" assessments", None)]
    if "n_individuals" not in audit:  # an audit written before individuals were counted
        return [("Assessments: ", None), *assessments[:1], *_no_outcome(audit)]
    parts: list[tuple[str, str | None]] = [
        ("Individuals assessed: ", None),
        (fmt(audit["n_individuals"], "int"), "n_individuals"),
    ]
    policies = audit.get("policies") or []
    if len(policies) > 1:
        listed = ", ".join(policies)
        parts += [(f", each read under {len(policies)} policies ({listed}): ", None), *assessments]
    elif audit["n_assessed"] != audit["n_individuals"]:
        parts += [(", in ", None), *assessments]
    return [*parts, *_no_outcome(audit)]


def _no_outcome(audit: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [
        ("; assessments with no outcome (in no calculation): ", None),
        (fmt(audit["n_missing_outcome"], "int"), "n_missing_outcome"),
    ]


#: An impact-assessment field no decision table fills.
DEPLOYER = "to be completed by the deployer (not in these data)"


def assessment_lines(audit: dict[str, Any]) -> list[str]:
    """The impact-assessment fields of the audit's preset, filled or left to the deployer."""
    return [
        f"Assessment - {row['field']} ({row['section']}): {row['value'] or DEPLOYER}"
        for row in audit.get("assessment", [])
    ]


def preset_lines(audit: dict[str, Any]) -> list[str]:
    """The sections of the rule each table answers and what the data cannot show, as the
    audit's preset states them (none for an audit written before presets)."""
    cites = [f"{what}: {section}" for what, section in audit.get("cites", [])]
    lines = ["Sections answered - " + "; ".join(cites) + "."] if cites else []
    return lines + [f"Not shown by these data: {text}" for text in audit.get("cannot_show", [])]


def audit_limits(audit: dict[str, Any]) -> list[str]:
    """What a reader of the audit tables must know: who counts as an individual, what was left
    out, and categories too small to serve as the reference of the impact ratios."""
    found = []
    names = audit.get("n_distinct_names")
    if names is not None and names < audit.get("n_individuals", names):
        found.append(
            f"The {audit['n_individuals']} simulated applicants carry {names} distinct names "
            "(a name is shared by several applicants): the information about each category "
            "rests on fewer names than the counts of individuals suggest."
        )
    policies = audit.get("policies") or []
    if len(policies) > 1:
        found.append(
            f"Each individual was read under {len(policies)} policies: the tables count each "
            "policy's individuals separately, side by side; a category's counts are not to be "
            "summed across policies."
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


def audit_html(audit: dict[str, Any], key: str) -> HtmlSection:
    """The audit as a report section (its numbers point into ``summary.audits[key]``)."""
    title = audit.get("title", "Bias audit (NYC Local Law 144)") + (
        f": {key}" if key != "." else ""
    )
    section = HtmlSection(title, ("audits", key))
    where = key  # the loops below reuse `key` for table keys
    source = audit["source"]
    dates = source.get("date_range")
    section.paragraph(
        f"Data: {source['kind']} - {source['description']} Date range: "
        + (f"{dates[0]} to {dates[1]}" if dates else "not given")
        + f" ({source.get('date_basis')})."
    )
    metric = "selection rate" if audit["metric"] == "selection_rate" else "scoring rate"
    counted = "".join(
        section.number(key, audit[key], "int") if key else html.escape(text)
        for text, key in headcount(audit)
    )
    section.raw(
        f"<p>{counted}. Impact ratio = a category's {html.escape(metric)} / the highest "
        + html.escape(metric)
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
                *[Column(*c) for c in audit.get("shown_columns", [])],
            ],
        )
        section.raw(
            '<p class="muted">Unknown category (not in this table): '
            + section.number(("unknown", key), audit["unknown"].get(key), "int")
            + "</p>"
        )
    _score_html(section, audit, by, where)
    if audit.get("assessment"):
        section.table(
            [{**row, "value": row["value"] or DEPLOYER} for row in audit["assessment"]],
            key=("assessment",),
            title="Impact assessment fields",
            columns=[Column("field"), Column("section"), Column("value", "from this audit")],
        )
    for line in [*audit.get("notes", []), *preset_lines(audit)]:
        section.paragraph(line)
    return section


_SCORE_TITLES = {
    "positions": "Ranking by score: positions, top-k rate, Mann-Whitney test",
    "sweep": "Threshold sweep: impact ratio at each cut-off",
}


def _score_html(section: HtmlSection, audit: dict[str, Any], by: list[str], where: str) -> None:
    """The score tables of an audit of a tool that scores (``--score-col``); the sweep's
    figure is named where the audit wrote it."""
    for name, rows in (audit.get("score_tables") or {}).items():
        kind, key = name.split("_", 1)
        category = audit["columns"][key]
        if kind == "positions":
            columns = [
                Column("n", "individuals", "int"),
                Column("mean_position", "mean position", ".1f"),
                Column("median_position", "median position", ".1f"),
                Column("mean_score", "mean score", ".3g"),
                Column("top_k", "k", "int"),
                Column("top_k_rate", "top-k rate", ".3f"),
                Column("top_k_rate_ci_low", "top-k rate 95% CI", "ci", "top_k_rate_ci_high"),
                Column("mann_whitney_p", "Mann-Whitney p", "p"),
            ]
        else:
            columns = [
                Column("cutoff", "cut-off", ".3g"),
                Column("n", "individuals", "int"),
                Column("n_selected", "selected", "int"),
                Column("selection_rate", "selection rate", ".3f"),
                Column("impact_ratio", "impact ratio", ".3f"),
                Column("impact_ratio_ci_low", "impact ratio 95% CI", "ci", "impact_ratio_ci_high"),
            ]
        section.table(
            rows,
            key=("score_tables", name),
            title=f"{_SCORE_TITLES[kind]} ({category})",
            columns=[*[Column(c) for c in [*by, category]], *columns],
        )
        if kind == "sweep":
            figure = f"{where.rstrip('/')}/{audit['format']}_{name}.png".removeprefix("./")
            section.paragraph(f"Figure of this sweep: {figure}.", muted=True)
