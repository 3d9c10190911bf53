"""``report.html`` of a run or a comparison: the study and its source, the models and their
parameters, each analysis (rendered by its kind), the answer outcomes per group, an audit when
one was made, and the limits a reviewer must know before reading any number."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.simulator.common.html import Column, HtmlSection, page
from biasim.simulator.common.results import older_summary
from biasim.simulator.common.rundir import write_atomic
from biasim.simulator.common.samples import SMALL_N, few_pools, small_sample
from biasim.simulator.kinds import get_kind
from biasim.simulator.report.audit_section import audit_html, audit_limits
from biasim.simulator.report.outputs import SYNTHETIC_NOTE, analysis_failure, units_text
from biasim.simulator.report.prompts_section import prompts_section

REPORT_HTML = "report.html"
_EMBEDDED = "SmolLM2"


def _figures(run_dir: Path) -> dict[str, bytes]:
    folder = run_dir / "figures"
    return {p.stem: p.read_bytes() for p in sorted(folder.glob("*.png"))} if folder.is_dir() else {}


def _tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    folder = run_dir / "tables"
    if not folder.is_dir():
        return {}
    return {p.stem: pd.read_csv(p, keep_default_na=False) for p in sorted(folder.glob("*.csv"))}


def _head(summary: dict[str, Any], study: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    parts = [f"<h1>{html.escape(str(summary.get('study', study.get('name', ''))))}</h1>"]
    if study.get("description"):
        parts.append(f"<p>{html.escape(str(study['description']))}</p>")
    if study.get("source"):
        parts.append(f'<p class="muted">Source: {html.escape(str(study["source"]))}</p>')
    if summary.get("synthetic"):
        parts.append(f'<p class="banner">{html.escape(SYNTHETIC_NOTE)}</p>')
    if "units" in summary:
        parts.append(f'<p class="muted">Units: {html.escape(units_text(summary))}</p>')
    if summary.get("edited"):
        # Said where the reader starts: every figure below is of the edited tables.
        edited = str(summary["edited"])
        parts.append(f'<p class="banner">{html.escape(edited[:1].upper() + edited[1:])}</p>')
    status = summary.get("status")
    if status and status != "complete":
        parts.append(
            f'<p class="banner">Run status: {html.escape(str(status))}. '
            f"{html.escape(str(summary.get('message') or ''))}</p>"
        )
    if failed := analysis_failure(summary):
        # Said where the reader starts, as a partial run is: a section missing below is this.
        parts.append(
            f'<p class="banner">An analysis failed: {html.escape(failed)}. Its tables are '
            "missing below; the other analyses are complete (biasim analyze run redoes them "
            "once it is fixed).</p>"
        )
    forced = summary.get("study_differences") or []
    if forced:
        items = "".join(f"<li>{html.escape(d)}</li>" for d in forced)
        parts.append(
            '<div class="banner">These runs are not of the same study (compared with '
            f"--force); what differs:<ul>{items}</ul></div>"
        )
    if len(runs) > 1:
        items = "".join(
            f"<li><b>{html.escape(r['label'])}</b>: {html.escape(r['path'])}</li>" for r in runs
        )
        parts.append(f"<p>Comparison of {len(runs)} runs, in this order:</p><ul>{items}</ul>")
    return "".join(parts)


def _penalties(info: dict[str, Any]) -> str:
    """``frequency, presence`` when either is set, else empty (the server's default)."""
    values = [info.get("frequency_penalty"), info.get("presence_penalty")]
    return "" if values == [None, None] else ", ".join(str(v or 0) for v in values)


def _models_section(runs: list[dict[str, Any]], summary: dict[str, Any]) -> HtmlSection:
    section = HtmlSection("Models and parameters")
    calls = _calls_by_role(summary)
    rows = []
    for run in runs:
        manifest = run.get("manifest") or {}
        used = _roles_in_use(manifest.get("study") or {})
        for role, info in manifest.get("roles", {}).items():
            name = role.split("[")[0]
            if used is not None and name not in used and not calls.get(name):
                continue  # declared but playing no stage (e.g. a formatter for no completion model)
            backend = info.get("backend") or {}
            rows.append(
                {
                    "run": run["label"],
                    "role": role,
                    "calls": calls.get(name, "") if len(runs) == 1 else "",
                    "backend": backend.get("backend"),
                    "model": backend.get("model"),
                    "synthetic": info.get("synthetic"),
                    "temperature": info.get("temperature"),
                    "top_p": info.get("top_p"),
                    "max_tokens": info.get("max_tokens"),
                    "penalties (frequency, presence)": _penalties(info),
                    "endpoint": info.get("endpoint", "chat"),
                    "base_seed": info.get("base_seed"),
                }
            )
    if rows:
        columns = [Column(k, spec="text") for k in rows[0]]
        if len(runs) == 1:
            columns = columns[1:]
        # Parameters come from the manifest, not the summary: shown as text, not data-path.
        section.raw(_plain_table(rows, columns))
    packages = (runs[0].get("manifest") or {}).get("packages", {}) if runs else {}
    if packages:
        listed = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))
        section.paragraph(f"Packages: {listed}.", muted=True)
    return section


def _calls_by_role(summary: dict[str, Any]) -> dict[str, int]:
    """Calls each role made (the persona writer plays no stage but makes calls)."""
    calls: dict[str, int] = {}
    for row in (summary.get("accounting") or {}).get("by_role", []):
        calls[row["role"]] = calls.get(row["role"], 0) + int(row.get("calls") or 0)
    return calls


def _usd(value: Any) -> str:
    return "unknown (no price for the model)" if value is None else f"${value:.4f}"


def _cost_section(summary: dict[str, Any]) -> HtmlSection:
    """What the run billed per role and model (every session of it), and its limit."""
    section = HtmlSection("Cost")
    cost = summary["cost"]
    tokens = {(r["role"], r["model"]): r for r in summary.get("accounting", {}).get("by_role", [])}
    rows = []
    for entry in cost.get("by_role", []):
        counts = tokens.get((entry["role"], entry["model"]), {})
        rows.append(
            {
                "role": entry["role"],
                "model": f"{entry['backend']}:{entry['model']}",
                "calls": counts.get("calls"),
                "prompt tokens": counts.get("prompt_tokens"),
                "output tokens": counts.get("completion_tokens"),
                "cost": _usd(entry["usd"]),
            }
        )
    if rows:
        section.raw(_plain_table(rows, [Column(k, spec="text") for k in rows[0]]))
    limit = cost.get("limit_usd")
    section.paragraph(
        f"Total billed: {_usd(cost.get('total_usd'))}"
        + (f" of a limit of ${limit:.4f}" if limit is not None else "")
        + ". Each call is priced at its reported token counts; the prices and their source "
        "are in manifest.json under roles.",
        muted=True,
    )
    return section


def _roles_in_use(study: dict[str, Any]) -> set[str] | None:
    """Roles that play a stage: each stage's role, and its formatter when one of that role's
    models is a completion model; None when the study does not say."""
    stages = study.get("stages")
    if not isinstance(stages, list):
        return None
    roles = study.get("roles") or {}
    # A role without models may be played by each compared model (simulator.casting): count
    # their variants too, so a formatter is not hidden when a completion model wrote personas.
    compared = [m for r in roles.values() for m in r.get("models") or [] if isinstance(m, dict)]
    used = set()
    for stage in stages:
        used.add(stage.get("role"))
        role = roles.get(stage.get("role")) or {}
        own = role.get("models") or ([] if role.get("shared") else compared)
        variants = [role, *[m for m in own if isinstance(m, dict)]]
        completion = any(v.get("structured_output") is False for v in variants)
        if completion and stage.get("completion"):
            used.add(stage["completion"].get("formatter"))
    return used


def _plain_table(rows: list[dict[str, Any]], columns: list[Column]) -> str:
    head = "".join(f'<th class="t">{html.escape(c.label or c.key)}</th>' for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="t">{html.escape(str(r.get(c.key, "")))}</td>' for c in columns)
        + "</tr>"
        for r in rows
    )
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _outcomes_section(summary: dict[str, Any]) -> HtmlSection:
    section = HtmlSection("Answer outcomes by group", path=("outcomes_by_group",))
    section.paragraph(
        "Share of each group's units answered, invalid (broke the requested structure after a "
        "re-ask), error (the call failed) and skipped (an earlier stage gave no valid answer). "
        "A difference here is itself a bias signal."
    )
    for axis, rows in summary.get("outcomes_by_group", {}).items():
        section.table(
            rows,
            key=axis,
            title=f"by {axis}",
            columns=[
                *([Column("model_label", "model")] if rows and "model_label" in rows[0] else []),
                Column(axis),
                Column("n", "units", "int"),
                Column("answered_rate", "answered", ".1%"),
                Column("invalid_rate", "invalid", ".1%"),
                Column("error_rate", "error", ".1%"),
                Column("skipped_rate", "skipped", ".1%"),
            ],
        )
    return section


def limits(summary: dict[str, Any]) -> list[str]:
    """What a reader must know before trusting the numbers of this report."""
    found = []
    if summary.get("synthetic"):
        found.append(
            "The synthetic responder is not a language model: its answers were drawn from "
            "probabilities declared in the study file. They test the pipeline and the power of "
            "the analyses, and say nothing about any model."
        )
    if any(_EMBEDDED in m for m in summary.get("models", [])):
        found.append(
            "SmolLM2-135M (the embedded default) is a 135M-parameter model that barely reads "
            "the scenarios; its answers show the pipeline working, not the biases of the "
            "models the seed papers audit."
        )
    smallest = _smallest_group(summary)
    if smallest is not None and smallest < SMALL_N:
        found.append(small_sample(f"the smallest group has {smallest} valid answers"))
    found += [line for name, pools in _pools(summary) if (line := few_pools(name, pools))]
    counts = summary.get("status_counts") or {}
    units = sum(counts.values())
    excluded = units - counts.get("answered", 0)
    if counts and excluded:
        found.append(
            f"{excluded} of {units} units ({excluded / units:.1%}) have no valid answer "
            "(invalid, error or skipped); they are excluded from the rates and counted per "
            "group above."
        )
    if summary.get("policy_applicants"):
        found.append(
            f"{summary['policy_applicants']} letters were written by applicants only a market "
            "policy's trajectory drew: the analyses, of the base trajectory, leave them out "
            "(results.parquet keeps them; market.csv and the policies' tests count them)."
        )
    if summary.get("status") not in (None, "complete"):
        found.append(f"The run is {summary['status']}: not every unit was answered.")
    if summary.get("analyses"):
        found.append(
            "Each p-value tests the hypothesis stated beside its table; adjusted p-values are "
            "adjusted over the family named there, not over the whole report."
        )
    for key, audit in _audits(summary).items():
        found += [(f"Audit {key}: " if key != "." else "") + note for note in audit_limits(audit)]
    return found


def _pools(summary: dict[str, Any]) -> list[tuple[str, int]]:
    """(analysis, units) of each pipeline and policy experiment: its first-stage pools (pairs,
    or applicants read alone), the unit its tests and intervals resample."""
    return [
        (str(a.get("name")), int(a["clusters"]))
        for a in summary.get("analyses", [])
        if a.get("kind") in ("pipeline", "policy_effect") and a.get("clusters") is not None
    ]


def _kind_html(kind: Any, analysis: dict[str, Any], section: HtmlSection) -> None:
    """The kind's rendering of its summary; a summary an older biasim wrote (a key this kind
    now reads is missing: ``biasim audit`` redraws a run's page from it) is said to be one,
    with the command that writes it again, instead of failing the whole page."""
    try:
        kind.html(analysis, section)
    except KeyError as exc:
        section.parts.clear()
        section.paragraph(older_summary(exc))


def _audits(summary: dict[str, Any]) -> dict[str, Any]:
    """The audits attached to the run, by where their tables are; a summary written before
    audits had a directory each holds one, under ``audit``, whose tables are in ``audit/``."""
    if summary.get("audit") and not summary.get("audits"):
        return {"audit": summary["audit"]}
    return summary.get("audits") or {}


def _smallest_group(summary: dict[str, Any]) -> int | None:
    sizes = []
    for analysis in summary.get("analyses", []):
        sizes += [g.get("n_valid") for g in analysis.get("groups", []) if isinstance(g, dict)]
        for part in (analysis.get("models") or {}).values():
            if isinstance(part, dict):
                sizes += [r.get("n") for r in part.get("rates", [])]
    sizes = [int(s) for s in sizes if s is not None]
    return min(sizes) if sizes else None


def render(
    summary: dict[str, Any],
    study: dict[str, Any],
    runs: list[dict[str, Any]],
    figures: dict[str, bytes],
    tables: dict[str, pd.DataFrame] | None = None,
) -> str:
    """The report page.

    Args:
        summary: The summary (as written to summary.json).
        study: The resolved study (from the manifest).
        runs: ``{label, path, manifest}`` of each run shown (one for a run).
        figures: Figure name -> PNG bytes.
        tables: Table name -> the CSV written (each is listed under its analysis).
    """
    sections: list[tuple[str, HtmlSection]] = []
    if runs:
        sections.append(("models", _models_section(runs, summary)))
        asked = prompts_section(runs[0].get("manifest") or {}, summary)
        if asked is not None:
            sections.append(("prompts", asked))
    if summary.get("cost"):
        sections.append(("cost", _cost_section(summary)))
    sections += _analysis_sections(summary, study, figures, tables or {})
    if summary.get("outcomes_by_group"):
        sections.append(("outcomes", _outcomes_section(summary)))
    for i, (key, audit) in enumerate(_audits(summary).items()):
        sections.append((f"audit-{i}" if i else "audit", audit_html(audit, key)))
    notes = HtmlSection("Limits")
    notes.raw(
        '<ul class="limits">'
        + "".join(f"<li>{html.escape(t)}</li>" for t in limits(summary))
        + "</ul>"
    )
    sections.append(("limits", notes))
    title = f"biasim report: {summary.get('study', '')}"
    return page(title, _head(summary, study, runs), sections)


def _analysis_sections(
    summary: dict[str, Any],
    study: dict[str, Any],
    figures: dict[str, bytes],
    tables: dict[str, pd.DataFrame],
) -> list[tuple[str, HtmlSection]]:
    """One section per analysis (its kind's rendering, then every figure and table it wrote),
    and one for outputs named after no analysis."""
    drawn = []
    source = str(study.get("source") or "")
    for i, analysis in enumerate(summary.get("analyses", [])):
        kind = get_kind(analysis["kind"])
        mine = {k: v for k, v in figures.items() if _belongs(k, analysis["name"])}
        section = HtmlSection(f"{kind.title}: {analysis['name']}", ("analyses", i), mine, source)
        _kind_html(kind, analysis, section)
        drawn.append((i, analysis["name"], section))
    # Analyses sharing a name (the kinds over one stage's decisions) each list the figures they
    # drew; the first of the name lists every other output of it, once.
    # (A table and a figure may share a stem: they are placed apart.)
    placed = {name for _, _, section in drawn for name in section.shown}
    placed_tables: set[str] = set()
    sections = []
    for i, name, section in drawn:
        own_figures = {k: v for k, v in section.figures.items() if k not in placed}
        own_figures |= {k: v for k, v in section.figures.items() if k in section.shown}
        own_tables = {
            k: v for k, v in tables.items() if _belongs(k, name) and k not in placed_tables
        }
        _written_outputs(section, own_figures, own_tables)
        placed |= set(own_figures)
        placed_tables |= set(own_tables)
        sections.append((f"analysis-{i}", section))
    rest = HtmlSection(
        "Other outputs", figures={k: v for k, v in figures.items() if k not in placed}
    )
    _written_outputs(
        rest, rest.figures, {k: v for k, v in tables.items() if k not in placed_tables}
    )
    if rest.parts:
        sections.append(("other-outputs", rest))
    return sections


def _belongs(output: str, analysis: str) -> bool:
    """Whether a figure or table file stem is one of ``analysis``'s (named after it)."""
    return output == analysis or output.startswith(f"{analysis}_")


#: Rows of a written table shown inline; the CSV has them all.
TABLE_ROWS = 40


def _written_outputs(
    section: HtmlSection, figures: dict[str, bytes], tables: dict[str, pd.DataFrame]
) -> None:
    """Every figure the kind did not draw, then every table it wrote, folded (a reviewer
    opens what they need without leaving the page)."""
    for name in figures:
        if name not in section.shown:
            section.figure(name, name.replace("_", " "))
    if not tables:
        return
    section.heading("Tables written")
    for name, table in tables.items():
        shown = table.head(TABLE_ROWS)
        columns = [Column(str(c), spec="text") for c in shown.columns]
        rows = [{str(k): v for k, v in r.items()} for r in shown.to_dict("records")]
        more = f", first {TABLE_ROWS} shown" if len(table) > TABLE_ROWS else ""
        section.raw(
            f'<details class="table-file"><summary>tables/{html.escape(name)}.csv '
            f"({len(table)} row{'' if len(table) == 1 else 's'}{more})</summary>"
            f"{_plain_table(rows, columns)}</details>"
        )


def write_report(
    out: Path,
    summary: dict[str, Any],
    study: dict[str, Any],
    runs: list[dict[str, Any]],
) -> Path:
    """Write ``report.html`` into ``out`` with the figures found in ``out/figures`` and the
    tables in ``out/tables``."""
    text = render(summary, study, runs, _figures(out), _tables(out))
    path = out / REPORT_HTML
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path
