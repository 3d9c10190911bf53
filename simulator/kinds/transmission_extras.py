"""The transmission kind's outputs that the paper states in its text rather than in a results
table (seed 000): Table 12's rationales and their terms by the chosen letter's gender, the
overall mean (SD) of scores by gender, the jobs whose hiring bias is weaker than the association
bias ("11/30"), the change in women's hires when names are withheld, appendix A.4's probe
answers, and letters cut at ``max_tokens`` (never read, counted).
"""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from biasim.simulator.common.html import fmt
from biasim.simulator.kinds.base import Section, resolve_data_path, slug
from biasim.simulator.kinds.lazy import hiring_summaries, pd, terms, unit_terms

if TYPE_CHECKING:
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts
    from biasim.simulator.kinds.transmission_spec import TransmissionSpec


#: Built-in data files (``scenarios/data``), where a bare association file name is looked for.
BUILTIN_DATA = Path(str(resources.files("biasim.scenarios"))) / "data"
#: Why a reading is left out when one of the letters it shows was cut at ``max_tokens``.
TRUNCATED = "shows a letter cut at max_tokens"


def check(spec: TransmissionSpec, facts: StudyFacts, stages: dict[str, Any]) -> None:
    """The rationale field exists in every pair stage, probes are free-text single readings,
    and the association file exists with its columns."""
    if spec.rationale:
        for j, name in enumerate(spec.relative):
            facts.need_field(name, spec.rationale, ("rationale",), ("relative", j))
    for j, name in enumerate(spec.probes):
        stage = stages.get(name)
        if stage is None or stage.reads is None or stage.reads.matching != "single":
            facts.problem(("probes", j), f"`{name}` is not a single reading stage")
        elif stage.output:
            facts.problem(("probes", j), f"`{name}` has output fields: a probe is free text")
    if spec.association:
        _check_association(spec, facts)


def _check_association(spec: TransmissionSpec, facts: StudyFacts) -> None:
    assert spec.association is not None
    file, _ = facts.smap.locate((*facts.at, "association", "file"))
    path = shares_path(spec.association.file, Path(file).parent if file else None)
    if not path.is_file():
        facts.problem(
            ("association", "file"),
            f"no such file: {spec.association.file} (relative paths: the study's folder, "
            f"else a built-in data file of {BUILTIN_DATA})",
        )
        return
    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = next(csv.reader(handle), [])
    for key in ("item_column", "share_column"):
        column = getattr(spec.association, key)
        if column not in header:
            facts.problem(("association", key), f"{path.name} has no column `{column}`")


def shares_path(file: str, folder: Path | None) -> Path:
    """The association file: relative to the study's folder, else a built-in data file (so a
    study extending the built-in pipeline from elsewhere finds the paper's shares)."""
    path = resolve_data_path(file, folder)
    return path if path.is_file() else BUILTIN_DATA / Path(file).name


def readings(results: pd.DataFrame, stage: str, authors: pd.DataFrame) -> pd.DataFrame:
    """A reading stage's rows with the first letter's writer joined (the one letter of a single
    reading), and ``reads`` split into ``units``."""
    rows = results[results["stage"] == stage].copy()
    rows["units"] = rows["reads"].astype(str).str.split("|")
    first = authors.reindex(rows["units"].str[0]).drop(
        columns=["valid", "truncated", "writer_name"]
    )
    first.index = rows.index
    return rows.drop(columns=[c for c in first.columns if c in rows]).join(first)


def drop_truncated(
    rows: pd.DataFrame, ok: pd.Series, authors: pd.DataFrame, stage: str, excluded: list
) -> pd.Series:
    """``ok`` without the readings that show a letter cut at ``max_tokens`` (its end, where the
    name is signed, may be lost), counted in ``excluded``."""
    cut = set(authors.index[authors["truncated"]])
    shows = pd.Series(
        [bool(cut & set(u)) for u in rows["reads"].astype(str).str.split("|")], index=rows.index
    )
    excluded.append({"stage": stage, "reason": TRUNCATED, "count": int((ok & shows).sum())})
    return ok & ~shows


def showings(
    stage: str, rows: pd.DataFrame, hired: list[str], rationale: str | None
) -> pd.DataFrame:
    """One row per valid pair reading: the letters shown in order, the one hired, the label
    picked and (with ``rationale``) the reader's rationale."""
    return pd.DataFrame(
        {
            "stage": stage,
            "pair": rows["cluster"].astype(str).to_numpy(),
            "units": rows["reads"].astype(str).str.split("|").to_numpy(),
            "selected": rows["selected"].astype(int).to_numpy(),
            "hired": hired,
            "rationale": rows[rationale].to_numpy() if rationale else None,
        }
    )


def after_relative(
    shown: pd.DataFrame,
    by_job: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    """The pair stages' summaries beyond the shares: redaction, rationales, association."""
    _redaction(shown, authors, spec, ctx, section)
    if spec.rationale:
        _rationales(shown, authors, spec, ctx, section)
    if spec.association:
        _association(by_job, spec, ctx, section)


def _redaction(
    shown: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    stages = {s.name: s for s in ctx.study.stages}
    redacted = [s for s in spec.relative if stages[s].reads.author == "redacted"]
    named = [s for s in spec.relative if s not in redacted]
    if not (redacted and named):
        return
    letters = shown.explode("units").rename(columns={"units": "letter"})
    letters = letters[
        authors.reindex(letters["letter"])[spec.group].astype(str).to_numpy() == spec.positive
    ]
    shares = (
        letters.assign(
            won=letters["letter"] == letters["hired"],
            job=authors.reindex(letters["letter"])[spec.cluster].astype(str).to_numpy(),
        )
        .groupby(["stage", "job", "letter"])["won"]
        .mean()
        .rename("share")
        .reset_index()
    )
    change = hiring_summaries.redaction_change(shares, named[0], redacted[0])
    change["significant"] = bool(change["p_value"] < spec.alpha)
    section.summary["redaction_change"] = change
    section.tables[slug(ctx.name, "redaction_change")] = pd.DataFrame([change])


def _rationales(
    shown: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    """Table 12 (each rationale with its job and where the woman's letter stood) and the
    rationale terms by the hired letter's group, the hired letter as the unit, within job."""
    hired = authors.reindex(shown["hired"])
    group_of = authors[spec.group].astype(str).to_dict()
    positive_at = [
        next((i + 1 for i, u in enumerate(units) if group_of.get(u) == spec.positive), None)
        for units in shown["units"]
    ]
    text, _ = terms.strip_names(shown["rationale"], _writer_names(authors))
    table = pd.DataFrame(
        {
            "stage": shown["stage"],
            spec.cluster: hired[spec.cluster].to_numpy(),
            f"{spec.positive}_applicant": positive_at,
            "hired_applicant": shown["selected"],
            f"hired_{spec.group}": hired[spec.group].astype(str).to_numpy(),
            "hired_letter": shown["hired"],
            "rationale": shown["rationale"],
            "_text": text,
        }
    )
    section.tables[slug(ctx.name, "rationales")] = table.drop(columns="_text")
    scans = []
    for stage, part in table.groupby("stage", sort=False):
        try:
            scan = unit_terms.unit_term_test(
                part,
                "_text",
                f"hired_{spec.group}",
                "hired_letter",
                positive=spec.positive,
                strata=spec.cluster,
            )
        except ValueError as exc:  # a letter hired under two groups cannot happen; say so
            section.summary.setdefault("notes", []).append(f"{stage} rationale terms: {exc}")
            continue
        scans.append(scan.assign(stage=stage, unit="hired letter"))
    if scans:
        found = pd.concat(scans, ignore_index=True)
        section.tables[slug(ctx.name, "rationale_terms")] = found
        section.summary["rationale_terms"] = found[found["significant"]].to_dict("records")
        section.summary["rationale_terms_tested"] = len(found)


def _writer_names(authors: pd.DataFrame) -> list[str]:
    """Every writer's name: removed from readers' texts before their terms are compared (a
    name is as distinctive of its gender as a word can be, and says nothing of the reasons)."""
    return sorted(set(authors["writer_name"].dropna().astype(str)) - {""})


def _association(
    by_job: pd.DataFrame, spec: TransmissionSpec, ctx: AnalysisContext, section: Section
) -> None:
    assert spec.association is not None
    given = pd.read_csv(shares_path(spec.association.file, ctx.data_dir))
    shares = given.rename(
        columns={
            spec.association.item_column: "item",
            spec.association.share_column: "association_share",
        }
    )
    table = hiring_summaries.weaker_than_association(by_job, shares, alpha=spec.alpha)
    counts = table.groupby("stage", sort=False).agg(
        jobs=("item", "size"),
        observed=("observed", "sum"),
        weaker=("weaker", "sum"),
        missing=("association_share", lambda s: int(s.isna().sum())),
    )
    section.summary["weaker_than_association"] = [
        {"stage": stage, **{k: int(v) for k, v in row.items()}} for stage, row in counts.iterrows()
    ]
    section.summary["association_source"] = spec.association.source or spec.association.file
    section.tables[slug(ctx.name, "weaker_than_association")] = table


def overall(
    scores: pd.DataFrame, spec: TransmissionSpec, ctx: AnalysisContext, section: Section
) -> None:
    """The overall mean (SD) of every score by group (section 4.1)."""
    table = hiring_summaries.overall_scores(scores, spec.group)
    section.summary["overall_scores"] = table.to_dict("records")
    section.tables[slug(ctx.name, "overall_scores")] = table


def probes(
    results: pd.DataFrame,
    authors: pd.DataFrame,
    spec: TransmissionSpec,
    ctx: AnalysisContext,
    section: Section,
) -> None:
    """Appendix A.4's probes ("How would you describe them in 3 words?" ...): each answer's
    terms by the writer's group, the letter as the unit (its answers pooled), within job."""
    names = _writer_names(authors)
    scans, answers = [], []
    for stage in spec.probes:
        rows = readings(results, stage, authors)
        ok = rows["valid"].fillna(False).astype(bool)
        section.summary.setdefault("excluded", []).append(
            {"stage": stage, "reason": "no valid answer", "count": int((~ok).sum())}
        )
        ok = drop_truncated(rows, ok, authors, stage, section.summary["excluded"])
        rows = rows[ok].assign(letter=lambda d: d["units"].str[0])
        text, _ = terms.strip_names(rows["text"], names)
        rows = rows.assign(_text=text)
        answers.append(rows[["stage", "letter", spec.cluster, spec.group, "text"]])
        if rows[spec.group].nunique() == 2:
            scan = unit_terms.unit_term_test(
                rows, "_text", spec.group, "letter", positive=spec.positive, strata=spec.cluster
            )
            scans.append(scan.assign(stage=stage, unit="letter"))
    section.tables[slug(ctx.name, "probe_answers")] = pd.concat(answers, ignore_index=True)
    if scans:
        found = pd.concat(scans, ignore_index=True)
        section.tables[slug(ctx.name, "probe_terms")] = found
        section.summary["probe_terms"] = found[found["significant"]].to_dict("records")
    section.summary["probes"] = list(spec.probes)


#: The extras' tables in the HTML report, in order.
HTML_TABLES = (
    ("overall_scores", "Overall scores by group (section 4.1)"),
    ("weaker_than_association", "Jobs whose hiring bias is weaker than the association bias"),
    ("rationale_terms", "Rationale terms by the hired letter's group (Table 12; unit: letter)"),
    ("probe_terms", "Appendix A.4 probe answers: terms by the writer's group (unit: letter)"),
)


def print_lines(summary: dict[str, Any], console: Console) -> None:
    """The extras' lines of the terminal summary."""
    group = summary.get("positive")
    for row in summary.get("overall_scores", []):
        console.print(
            f"  scores of {row[next(iter(row))]} writers' letters, all traits: mean "
            f"{row['mean']:.1f} (SD {row['sd']:.2f}) over {row['n_scores']} scores"
        )
    for row in summary.get("weaker_than_association", []):
        console.print(
            f"  {row['stage']}: {row['weaker']} of {row['jobs']} jobs have a hiring bias "
            f"weaker than the association bias ({row['observed']} with a hiring bias at alpha; "
            f"association: {summary.get('association_source')})"
        )
    change = summary.get("redaction_change")
    if change:
        console.print(
            f"  {group} letters hired {change['share_named']:.3f} with names, "
            f"{change['share_redacted']:.3f} redacted: change {change['difference']:+.3f} "
            f"(95% CI {change['ci_low']:+.3f} to {change['ci_high']:+.3f}, p "
            f"{fmt(change['p_value'], 'p')}; each {group} letter against itself, "
            f"{change['letters']} letters; unit: job, {change['n_units']} units)"
        )
    if "rationale_terms_tested" in summary:
        found = ", ".join(
            f"{r['term']} ({r['stage']}, {r['difference']:+.2f})"
            for r in summary.get("rationale_terms", [])
        )
        console.print(
            f"  rationale terms by hired {group}: {summary['rationale_terms_tested']} tested "
            f"(unit: hired letter, within job), FDR-significant: {found or 'none'}"
        )
    if summary.get("probes"):
        console.print(
            f"  probes {', '.join(summary['probes'])}: "
            f"{len(summary.get('probe_terms', []))} terms differ by writer (unit: letter)"
        )
    if summary.get("letters_truncated"):
        console.print(
            f"  {summary['letters_truncated']} letters cut at max_tokens: never read (excluded "
            "and counted below)"
        )
