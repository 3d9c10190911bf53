"""The transmission kind's outputs that the paper states in its text rather than in a results
table (seed 000): Table 12's rationales and their terms by the chosen letter's gender, the
overall mean (SD) of scores by gender, the jobs whose hiring bias is weaker than the association
bias ("11/30"), the change in women's hires when names are withheld, appendix A.4's probe
answers, and letters cut at ``max_tokens`` (never read, counted); and :class:`Steps`, what
every step of the kind reads and where it writes (the declared result, the CSV files).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biasim.simulator.common.result_tables import Records, ResultTable
from biasim.simulator.kinds.base import Section, resolve_data_path, slug
from biasim.simulator.kinds.lazy import hiring_summaries, pd, terms, unit_terms
from biasim.simulator.kinds.transmission_result import (
    TABLES,
    TransmissionResult,
)

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


@dataclass
class Steps:
    """What each step of the kind reads (the run's rows, each letter's writer, the spec, the
    context) and where it writes (the result, the CSV tables and figures)."""

    results: pd.DataFrame
    authors: pd.DataFrame
    spec: TransmissionSpec
    ctx: AnalysisContext
    section: Section
    result: TransmissionResult

    def exclude(self, stage: str, reason: str, count: int) -> None:
        """Count answers (or letters) of ``stage`` left out for ``reason``."""
        self.result.excluded.append({"stage": stage, "reason": reason, "count": int(count)})

    def note(self, text: str) -> None:
        """Say what could not be computed, and why."""
        self.result.notes = [*(self.result.notes or []), text]

    def write(self, table: ResultTable, frame: pd.DataFrame) -> Records:
        """``frame`` as ``table``'s CSV file, and its records for the summary."""
        return table.write(self.section.tables, self.ctx.name, frame)

    def csv(self, stem: str, frame: pd.DataFrame) -> None:
        """``frame`` as the CSV file ``<name>_<stem>.csv`` (a table the summary does not
        hold row by row)."""
        self.section.tables[slug(self.ctx.name, stem)] = frame

    def usable(self, stage: str) -> pd.DataFrame:
        """A single reading stage's rows that count (a valid answer, no letter cut short),
        the first letter's writer joined; each reason left out counted."""
        rows = readings(self.results, stage, self.authors)
        ok = rows["valid"].fillna(False).astype(bool)
        self.exclude(stage, "no valid answer", (~ok).sum())
        return rows[self.drop_truncated(rows, ok, stage)]

    def drop_truncated(self, rows: pd.DataFrame, ok: pd.Series, stage: str) -> pd.Series:
        """``ok`` without the readings that show a letter cut at ``max_tokens`` (its end,
        where the name is signed, may be lost), counted."""
        cut = shows(rows, set(self.authors.index[self.authors["truncated"]]))
        self.exclude(stage, TRUNCATED, (ok & cut).sum())
        return ok & ~cut


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


def shows(rows: pd.DataFrame, letters: set[str]) -> pd.Series:
    """Whether each reading shows any of ``letters``."""
    return pd.Series(
        [bool(letters & set(u)) for u in rows["reads"].astype(str).str.split("|")],
        index=rows.index,
    )


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


def after_relative(shown: pd.DataFrame, by_job: pd.DataFrame, steps: Steps) -> None:
    """The pair stages' summaries beyond the shares: redaction, rationales, association."""
    _redaction(shown, steps)
    if steps.spec.rationale:
        _rationales(shown, steps)
    if steps.spec.association:
        _association(by_job, steps)


def _redaction(shown: pd.DataFrame, steps: Steps) -> None:
    """Each letter of ``positive``: its share of hires named against its share redacted."""
    spec, authors = steps.spec, steps.authors
    stages = {s.name: s for s in steps.ctx.study.stages}
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
    steps.result.redaction_change = steps.write(TABLES["redaction_change"], pd.DataFrame([change]))


def _rationales(shown: pd.DataFrame, steps: Steps) -> None:
    """Table 12 (each rationale with its job and where the woman's letter stood) and the
    rationale terms by the hired letter's group, the hired letter as the unit, within job."""
    spec, authors = steps.spec, steps.authors
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
    steps.csv("rationales", table.drop(columns="_text"))
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
            steps.note(f"{stage} rationale terms: {exc}")
            continue
        scans.append(scan.assign(stage=stage, unit="hired letter"))
    if scans:
        found = pd.concat(scans, ignore_index=True)
        steps.result.rationale_terms = _term_records(TABLES["rationale_terms"], found, steps)
        steps.result.rationale_terms_tested = len(found)


def _term_records(table: ResultTable, found: pd.DataFrame, steps: Steps) -> Records:
    """Every term tested as the CSV file of ``table``; the significant ones, their stage
    first (it names the row), for the summary."""
    steps.csv(table.key, table.csv(found))
    significant = found[found["significant"]]
    return table.records(significant[["stage", *[c for c in found.columns if c != "stage"]]])


def _writer_names(authors: pd.DataFrame) -> list[str]:
    """Every writer's name: removed from readers' texts before their terms are compared (a
    name is as distinctive of its gender as a word can be, and says nothing of the reasons)."""
    return sorted(set(authors["writer_name"].dropna().astype(str)) - {""})


def _association(by_job: pd.DataFrame, steps: Steps) -> None:
    """The jobs whose hiring bias is weaker than their association bias, per stage."""
    spec = steps.spec
    assert spec.association is not None
    given = pd.read_csv(shares_path(spec.association.file, steps.ctx.data_dir))
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
    steps.result.weaker_than_association = [
        {"stage": stage, **{k: int(v) for k, v in row.items()}} for stage, row in counts.iterrows()
    ]
    steps.result.association_source = spec.association.source or spec.association.file
    steps.csv("weaker_than_association", table)


def overall(scores: pd.DataFrame, steps: Steps) -> None:
    """The overall mean (SD) of every score by group (section 4.1)."""
    table = hiring_summaries.overall_scores(scores, steps.spec.group)
    steps.result.overall_scores = steps.write(TABLES["overall_scores"], table)


def probes(steps: Steps) -> None:
    """Appendix A.4's probes ("How would you describe them in 3 words?" ...): each answer's
    terms by the writer's group, the letter as the unit (its answers pooled), within job."""
    spec = steps.spec
    names = _writer_names(steps.authors)
    scans, answers = [], []
    for stage in spec.probes:
        rows = steps.usable(stage).assign(letter=lambda d: d["units"].str[0])
        text, _ = terms.strip_names(rows["text"], names)
        rows = rows.assign(_text=text)
        answers.append(rows[["stage", "letter", spec.cluster, spec.group, "text"]])
        if rows[spec.group].nunique() == 2:
            scan = unit_terms.unit_term_test(
                rows, "_text", spec.group, "letter", positive=spec.positive, strata=spec.cluster
            )
            scans.append(scan.assign(stage=stage, unit="letter"))
    steps.csv("probe_answers", pd.concat(answers, ignore_index=True))
    if scans:
        found = pd.concat(scans, ignore_index=True)
        steps.result.probe_terms = _term_records(TABLES["probe_terms"], found, steps)
    steps.result.probes = list(spec.probes)
