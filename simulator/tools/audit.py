"""``biasim audit --format NAME``: the tables of a bias audit under a rule, a preset of
:data:`biasim.registry.AUDIT_FORMATS` (``ll144``, ``eeoc``), from a run or from a CSV of
decisions made elsewhere. Every preset starts from the tables a New York City Local Law 144
bias audit publishes (DCWP rules, 6 RCNY 5-300/5-301): selection (or scoring) rates and impact
ratios per sex, race/ethnicity and intersectional category, individuals per category, unknown
categories, categories under 2 % of the data flagged (and excluded from the impact ratios when
the auditor chooses), and the data's date range; a preset adds its own columns, citations and
limits. Written as CSV, audit.json and a section of report.html."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.analysis.audit.external import na_like
from biasim.analysis.audit.ll144 import (
    INTERSECTIONAL,
    RACE_ETHNICITY,
    SEX,
    date_range,
    ll144_tables,
)
from biasim.analysis.audit.presets import AuditContext, AuditPreset, assessment_rows
from biasim.analysis.audit.scores import rank_positions, sweep_figure, threshold_sweep
from biasim.registry import AUDIT_FORMATS
from biasim.simulator.common.csvfiles import check_group_count, read_csv, write_csv
from biasim.simulator.common.csvlimits import CsvLimits
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.results_digests import edits_note
from biasim.simulator.common.rundir import (
    RESULTS_PARQUET,
    SUMMARY,
    partial_note,
    read_manifest,
    read_run_json,
    write_json,
    write_summary,
)

SEX_NAMES = ("sex", "gender")
RACE_NAMES = ("race_ethnicity", "race", "ethnicity")
TRUE_VALUES = frozenset({"1", "true", "yes", "selected"})
FALSE_VALUES = frozenset({"0", "false", "no", "not_selected"})


@dataclass
class AuditOptions:
    """What ``biasim audit`` was asked for (options named as on the command line)."""

    sex_col: str | None = None
    race_col: str | None = None
    selected_col: str | None = None
    outcome_col: str | None = None
    positive: str | None = None
    score_col: str | None = None
    date_col: str | None = None
    by: list[str] = field(default_factory=list)
    exclude_small: bool = False
    analysis: str | None = None
    limits: CsvLimits = field(default_factory=CsvLimits)
    stage: str | None = None
    accept_edits: bool = False
    audit_format: str = "ll144"


def _pick(columns: list[str], given: str | None, names: tuple[str, ...]) -> str | None:
    if given:
        return given
    lowered = {c.lower(): c for c in columns}
    return next((lowered[n] for n in names if n in lowered), None)


def _chosen_analysis(study: Any, options: AuditOptions, results: pd.DataFrame, folder: Any):
    """The analysis audited and its decisions: ``--analysis``, else in a study with policies
    the first analysis that decides under every policy, else the first that decides."""
    from biasim.simulator.kinds import AnalysisContext, get_kind

    candidates = []
    for i, spec in enumerate(study.config.analyses):
        name = spec.name or f"analysis{i + 1}"
        if options.analysis in (None, name):
            candidates.append((i, spec, name))
    if options.analysis is None and study.config.policies:
        every_policy = [c for c in candidates if "policy" in get_kind(c[1].kind).audit_strata(c[1])]
        candidates = every_policy + [c for c in candidates if c not in every_policy]
    for i, spec, name in candidates:
        ctx = AnalysisContext(study.config, name, folder)
        plugin = get_kind(spec.kind)
        if options.stage is None:
            frame = plugin.selections(results, spec, ctx)
        else:
            frame = plugin.stage_selections(results, spec, ctx, options.stage)
        if frame is not None:
            return name, spec.kind, frame, i
    return None


def _frame_from_run(run_dir: Path, options: AuditOptions) -> tuple[pd.DataFrame, dict[str, Any]]:
    from biasim.simulator.engine.runner import load_run, study_folder
    from biasim.simulator.kinds import get_kind

    study, results = load_run(run_dir, accept_edits=options.accept_edits, command="audit")
    chosen = _chosen_analysis(study, options, results, study_folder(study))
    if chosen is None:
        what = f"no analysis named `{options.analysis}`" if options.analysis else "no analysis"
        decides = (
            f"decides at a stage (--stage {options.stage})"
            if options.stage
            else ("decides anything")
        )
        raise InputError(
            [Problem(str(run_dir), None, "--analysis", f"{what} of this run {decides}")]
        )
    name, kind, frame, index = chosen
    manifest = read_manifest(run_dir)
    sessions = manifest.get("sessions", [])
    dates = [s.get(k) for s in sessions for k in ("started", "finished") if s.get(k)]
    source = {
        "kind": "test data",
        "description": (
            f"simulated decisions of run {run_dir} (study {study.config.name}, analysis "
            f"{name} of kind {kind}{_which_stage(kind, options)}"
            f"{_which_policies(study.config, frame)}); each row is one simulated "
            "applicant's decision by the model(s) named below. Local Law 144 allows test data "
            "when historical data are not available; say so in any published summary."
        ),
        "date_range": date_range(dates),
        "date_basis": "when the run's model calls were made",
        "analysis": name,
    }
    source["n_distinct_names"] = int(frame["persona_name"].nunique())
    for field_name, note in (
        ("partial", partial_note(run_dir, manifest)),
        ("edited", edits_note(manifest)),
    ):
        if note:
            source[field_name] = note
    strata = [c for c in get_kind(kind).audit_strata(study.config.analyses[index]) if c]
    for column in strata:
        if column not in options.by and frame[column].nunique() > 1:
            options.by.append(column)
    if "model_label" not in options.by and frame["model_label"].nunique() > 1:
        options.by = ["model_label", *options.by]
    if study.config.market is not None and options.stage is None:
        frame = _market_hires(frame, run_dir)
        source["description"] += (
            "; selected = hired (of those the last stage advanced, the openings' fill, as "
            "market.csv counts hires)"
        )
    if study.config.market is not None and "cycle" not in options.by:
        # Each cycle's decision-makers are drawn from that cycle's workforce: a table pooled
        # over cycles would mix different deciders. Replicate markets' same cycle pool.
        options.by = ["cycle", *options.by]
        source["description"] += (
            "; a labour market over cycles: one row per cycle, each cycle's decisions pooled "
            "over the replicate markets"
        )
    # An individual is a simulated person, whatever number of policies read its document.
    individual = frame["agent_id"].astype(str)
    frame = frame.assign(_selected=frame["selected"], _individual=individual)
    if options.score_col:
        frame = frame.assign(_score=_run_scores(frame, run_dir, options.score_col))
    return frame, source


def _market_hires(frame: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """A market's applicants end to end: ``selected`` when hired (the run's hires table, the
    list market.csv's ``hires`` counts), not when advanced at the last stage, which may pass
    more than there are openings; NA where the document was not written, as before."""
    from biasim.simulator.study.market import HIRES_CSV, NO_SWITCH
    from biasim.simulator.study.policies import BASE

    path = run_dir / HIRES_CSV
    if not path.is_file():
        raise InputError(
            [
                Problem(
                    str(path),
                    None,
                    "",
                    "a market run's hires table is missing (runs before it existed): run "
                    f"`biasim run --resume {run_dir}` to write it again from the call store",
                )
            ]
        )
    hires = pd.read_csv(path, dtype={"agent_id": str, "policy": str, "off": str})
    hires = hires[hires["off"] == NO_SWITCH]
    ids = frame["agent_id"].astype(str)
    if "policy" in frame.columns:
        hired = set(zip(hires["policy"], hires["agent_id"], strict=True))
        keys = zip(frame["policy"].astype(str), ids, strict=True)
        flags = pd.Series([key in hired for key in keys], index=frame.index)
    else:
        flags = ids.isin(set(hires.loc[hires["policy"] == BASE, "agent_id"]))
    return frame.assign(selected=flags.astype("boolean").where(frame["selected"].notna()))


def _run_scores(frame: pd.DataFrame, run_dir: Path, column: str) -> pd.Series:
    """The tool's score of each decision audited (``--score-col`` on a run): a numeric output
    field of the stage; NaN where the answer was invalid, as its decision is."""
    numeric = column in frame and pd.api.types.is_numeric_dtype(frame[column])
    if not numeric:
        have = [c for c in frame.columns if pd.api.types.is_float_dtype(frame[c])]
        raise InputError(
            [
                Problem(
                    "--score-col",
                    None,
                    "",
                    f"`{column}` is no numeric output of the decisions audited in {run_dir}"
                    f"; numeric columns: {', '.join(have) or 'none'}",
                )
            ]
        )
    return frame[column].astype(float).where(frame["_selected"].notna())


def _which_policies(config: Any, frame: pd.DataFrame) -> str:
    """Which policies' decisions were audited, when the study has policies."""
    if not config.policies:
        return ""
    if "policy" in frame.columns:
        return ", every policy side by side: " + ", ".join(map(str, frame["policy"].unique()))
    return (
        ", under policy `base` only: its policies "
        + ", ".join(f"`{p}`" for p in config.policies)
        + " are audited by an analysis of kind policy_effect (--analysis)"
    )


def _which_stage(kind: str, options: AuditOptions) -> str:
    """Which decisions of a pipeline were audited, in words."""
    if options.stage:
        return f", the decisions of stage {options.stage} among those who entered it"
    if kind == "pipeline":
        return ", selected = advanced at the last stage, of every applicant (end to end)"
    return ""


#: A column the audit takes as the selected flag when no outcome option names one.
SELECTED_NAMES = ("selected",)


def _frame_from_csv(path: Path, options: AuditOptions) -> tuple[pd.DataFrame, dict[str, Any]]:
    df = read_csv(path, "decisions CSV", options.limits)
    outcome = [o for o in ("--selected-col", "--outcome-col", "--score-col") if _opt(options, o)]
    if not outcome:
        found = _pick(list(df.columns), None, SELECTED_NAMES)
        if found is not None:
            options.selected_col, outcome = found, ["--selected-col"]
    if len(outcome) != 1:
        raise InputError(
            [
                Problem(
                    "--selected-col",
                    None,
                    "",
                    "give exactly one of --selected-col (1/0, true/false), --outcome-col "
                    "(with --positive) or --score-col",
                )
            ]
        )
    named = [options.selected_col, options.outcome_col, options.score_col, options.date_col]
    absent = [c for c in [*named, *options.by] if c and c not in df.columns]
    if absent:
        raise InputError(
            [
                Problem(str(path), 1, c, f"no such column; columns: {', '.join(df.columns)}")
                for c in absent
            ]
        )
    if options.score_col:
        scores = pd.to_numeric(df[options.score_col], errors="coerce")
        bad = ~na_like(df[options.score_col]) & scores.isna()
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2
            value = df[options.score_col][bad].iloc[0]
            raise InputError(
                [Problem(str(path), line, options.score_col, f"`{value}` is not a number")]
            )
        df = df.assign(_score=scores)
    else:
        df = df.assign(_selected=_selected(df, path, options))
    dates = None
    if options.date_col:
        try:
            dates = date_range(df[options.date_col])
        except ValueError as exc:
            raise InputError([Problem(str(path), None, options.date_col, str(exc))]) from None
    source = {
        "kind": "decisions file",
        "description": f"decisions read from {path} ({len(df)} rows)",
        "date_range": dates,
        "date_basis": f"column {options.date_col}"
        if options.date_col
        else "not given (--date-col)",
    }
    return df, source


def _opt(options: AuditOptions, flag: str) -> Any:
    return getattr(options, flag.removeprefix("--").replace("-", "_"))


def _selected(df: pd.DataFrame, path: Path, options: AuditOptions) -> pd.Series:
    """The selected flag: a 1/0 or true/false column, or outcome == positive."""
    if options.outcome_col:
        positive = options.positive
        values = df[options.outcome_col].mask(na_like(df[options.outcome_col], [positive]))
        if positive is None:
            raise InputError(
                [Problem("--positive", None, "", "required with --outcome-col (e.g. accept)")]
            )
        if positive not in set(values.dropna()):
            seen = sorted(set(values.dropna()))[:10]
            raise InputError(
                [
                    Problem(
                        str(path),
                        None,
                        options.outcome_col,
                        f"no row has `{positive}`; values: {seen}",
                    )
                ]
            )
        return (values == positive).astype("boolean").where(values.notna())
    column = options.selected_col or ""
    text = df[column].mask(na_like(df[column])).str.strip().str.lower()
    known = text.isin(TRUE_VALUES | FALSE_VALUES) | text.isna()
    if not known.all():
        line = int((~known).to_numpy().nonzero()[0][0]) + 2
        raise InputError(
            [
                Problem(
                    str(path),
                    line,
                    column,
                    f"`{df[column][~known].iloc[0]}` is not 1/0, true/false or yes/no",
                )
            ]
        )
    return text.isin(TRUE_VALUES).astype("boolean").where(text.notna())


def bias_audit(source: Path, options: AuditOptions) -> dict[str, Any]:
    """The audit of a run directory or a decisions CSV under ``options.audit_format``, as
    JSON-able data with its tables.

    Raises:
        InputError: Unreadable input, a missing column, no sex or race category, or a score
            given to a format about selections.
    """
    preset: AuditPreset = AUDIT_FORMATS.load(options.audit_format)
    is_run = source.is_dir()
    if is_run and not (source / RESULTS_PARQUET).is_file():
        raise InputError(f"{source}: not a finished run directory (no {RESULTS_PARQUET})")
    frame, about = (_frame_from_run if is_run else _frame_from_csv)(source, options)
    columns = list(frame.columns)
    sex = _pick(columns, options.sex_col, SEX_NAMES)
    race = _pick(columns, options.race_col, RACE_NAMES)
    for flag, name in (("--sex-col", options.sex_col), ("--race-col", options.race_col)):
        if name and name not in columns:
            raise InputError([Problem(flag, None, "", f"no column `{name}`")])
    if sex is None and race is None:
        raise InputError(
            [
                Problem(
                    "--sex-col",
                    None,
                    "",
                    "no sex or race/ethnicity column found (looked for "
                    f"{', '.join(SEX_NAMES + RACE_NAMES)}); name them with --sex-col / "
                    "--race-col",
                )
            ]
        )
    if not is_run:
        categories = [c for c in (sex, race, *options.by) if c]
        check_group_count(frame, categories, source, options.limits.max_groups)
    # A run whose tool scores and decides is audited on its decisions where the rule reads
    # selections, on its scores otherwise; the score tables are added either way.
    scoring = "_score" in frame and not (preset.needs_selection and "_selected" in frame)
    if scoring and preset.needs_selection:
        why = "reads selection rates; a score alone selects no one (give --selected-col, or "
        raise InputError(
            [Problem("--format", None, "", f"{preset.name} {why}--outcome-col with --positive)")]
        )
    try:
        audit = ll144_tables(
            frame,
            sex_col=sex,
            race_col=race,
            selected_col=None if scoring else "_selected",
            score_col="_score" if scoring else None,
            by=options.by,
            exclude_small=options.exclude_small,
        )
    except ValueError as exc:
        raise InputError([Problem(str(source), None, "", str(exc))]) from None
    context = _context(frame, about, options, (sex, race), audit)
    tables, notes = preset.extend(audit.tables, context)
    score_frames, score_notes = _score_tables(frame, context) if "_score" in frame else ({}, [])
    facts = _facts(about, context, tables, options) if preset.assessment else {}
    return {
        "assessment": assessment_rows(preset, facts),
        "format": preset.name,
        "label": preset.label,
        "title": preset.title,
        "cites": [list(c) for c in preset.cites],
        "cannot_show": list(preset.cannot_show),
        "notes": [*notes, *score_notes],
        "score_tables": {k: t.to_dict("records") for k, t in score_frames.items()},
        "shown_columns": [list(c) for c in preset.columns],
        **_tables_record(source, options, frame, about, (audit, tables, score_frames)),
        "columns": {
            "outcome": options.selected_col or options.outcome_col or options.score_col,
            "sex": sex,
            "race_ethnicity": race,
            "by": options.by,
        },
    }


def _score_tables(
    frame: pd.DataFrame, context: AuditContext
) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Rank positions, top-k rates and the threshold sweep per sex and race/ethnicity column,
    and what a reader must know about them."""
    known = frame[frame["_score"].notna()]
    out = {}
    for key in (SEX, RACE_ETHNICITY):
        if key in context.categories:
            [column] = context.categories[key]
            out[f"positions_{key}"] = rank_positions(known, "_score", column, by=context.by)
            out[f"sweep_{key}"] = threshold_sweep(known, "_score", column, by=context.by)
    notes = [
        "Scores: position 1 is the highest score of the stratum (ties share their mean "
        "position); the top k is the best tenth, and the rate's interval is Wilson's. The "
        "Mann-Whitney p compares a category's scores with everyone else's in the stratum; unit "
        f"of exchangeability: the applicant ({context.unit_note}). The threshold sweep selects "
        "at or above each decile of the scores, with the impact ratio's 95 % interval (Katz)."
    ]
    if context.repeated:
        for name, table in out.items():
            if name.startswith("positions_"):
                table["mann_whitney_p"] = float("nan")
        notes.append(
            f"{context.repeated} applicant(s) were scored more than once within a stratum: no "
            "Mann-Whitney p is given (it would be too small)."
        )
    return out, notes


def _context(
    frame: pd.DataFrame, about: dict[str, Any], options: AuditOptions, columns, audit
) -> AuditContext:
    """What a preset needs beside the tables: strata, category columns, the applicants."""
    sex, race = columns
    is_run = "n_distinct_names" in about
    categories = {SEX: [sex], RACE_ETHNICITY: [race], INTERSECTIONAL: [sex, race]}
    return AuditContext(
        by=list(options.by),
        categories={key: cols for key, cols in categories.items() if key in audit.tables},
        repeated=_repeated(frame, options.by),
        unit_note="a simulated applicant of the run" if is_run else "one row of the file",
        names=(about["n_distinct_names"], _individuals(frame, audit.n_assessed))
        if is_run
        else None,
    )


def _facts(
    about: dict[str, Any],
    context: AuditContext,
    tables: dict[str, pd.DataFrame],
    options: AuditOptions,
) -> dict[str, str]:
    """What the audit can state in an impact assessment, each in one sentence."""
    dates = about.get("date_range")
    groups = "; ".join(
        f"{key.replace('_', '/')}: "
        + ", ".join(dict.fromkeys(" x ".join(map(str, r)) for r in t[cols].itertuples(index=False)))
        for key, t in tables.items()
        if (cols := context.categories[key])
    )
    outcome = options.selected_col or options.outcome_col or "selected"
    columns = dict.fromkeys(c for cols in context.categories.values() for c in cols)
    metrics = (
        "selection rate, impact ratio against the highest-rate group with its 95 % "
        "interval, two-standard-deviation z, Fisher's exact p (unit: the applicant), shortfall "
        "and one-person flip (29 CFR 1607.4(D))"
    )
    return {
        "system": about["description"],
        "dates": f"{dates[0]} to {dates[1]} ({about['date_basis']})" if dates else "not given",
        "data": f"{about['kind']}: one decision per applicant; inputs the applicant's "
        f"category columns ({', '.join(columns)}); "
        f"output the decision ({outcome})",
        "groups": groups + (f"; separately by {', '.join(context.by)}" if context.by else ""),
        "metrics": metrics,
        "results": _lowest_ratio(tables),
    } | ({"metrics": metrics + _SCORE_METRICS} if options.score_col else {})


#: The score measures an assessment lists when the audit read the tool's score.
_SCORE_METRICS = (
    "; of the tool's score: mean and median rank position, top-decile rate with its Wilson "
    "interval, Mann-Whitney p (unit: the applicant), impact ratio across cut-offs"
)


def _lowest_ratio(tables: dict[str, pd.DataFrame]) -> str:
    """The lowest impact ratio of an EEOC-style audit, its interval and how many rows are
    under 4/5."""
    rows = pd.concat([t.assign(_table=k) for k, t in tables.items()], ignore_index=True)
    rows = rows[rows["impact_ratio"].notna()]
    if rows.empty:
        return "no impact ratio could be computed (no category had a selection)"
    low = rows.loc[rows["impact_ratio"].idxmin()]
    interval = ""
    if pd.notna(low["impact_ratio_ci_high"]):
        interval = f" [95 % CI {low['impact_ratio_ci_low']:.3f}, {low['impact_ratio_ci_high']:.3f}]"
    table = low["_table"].replace("_", "/")
    return (
        f"lowest impact ratio {low['impact_ratio']:.3f}{interval} in the {table} table "
        f"(reference {low['reference']}); {int((rows['impact_ratio'] < 0.8).sum())} of "
        f"{len(rows)} ratios under 4/5, {int((rows['impact_ratio_ci_high'] < 0.8).sum())} with "
        "the whole interval under 4/5"
    )


def _tables_record(
    source: Path, options: AuditOptions, frame: pd.DataFrame, about: dict[str, Any], audit_tables
) -> dict[str, Any]:
    """The counts and tables every format shares, as the audit's JSON-able fields."""
    audit, tables, score_frames = audit_tables
    excluded = {
        key: table[table["excluded"].astype(bool)].drop(columns=["excluded"]).to_dict("records")
        for key, table in audit.tables.items()
    }
    names = about.pop("n_distinct_names", None)
    return {
        "source": {"path": str(source), **about},
        "metric": audit.metric,
        "median_score": audit.median_score,
        "n_total": audit.n_total,
        "n_missing_outcome": audit.n_missing_outcome,
        "n_assessed": audit.n_assessed,
        "n_individuals": _individuals(frame, audit.n_assessed),
        "policies": list(map(str, frame["policy"].unique())) if "policy" in frame else None,
        "n_distinct_names": names,
        "unknown": audit.unknown,
        "merged": audit.merged,
        "threshold": audit.threshold,
        "exclude_small": audit.exclude_small,
        "excluded": {k: v for k, v in excluded.items() if v},
        "tables": {k: t.to_dict("records") for k, t in tables.items()},
        "_frames": {**tables, "counts": audit.counts, **score_frames},
    }


def _repeated(frame: pd.DataFrame, by: list[str]) -> int:
    """Applicants with more than one decision within a stratum (a run's replicates); a
    decisions file's rows are one applicant each."""
    if "_individual" not in frame:
        return 0
    known = frame[frame["_selected"].notna()] if "_selected" in frame else frame
    counts = known.groupby([*by, "_individual"], observed=True).size()
    return int((counts > 1).sum())


def _individuals(frame: pd.DataFrame, n_assessed: int) -> int:
    """Distinct individuals with a known outcome: simulated applicants of a run (one however
    many policies read them); the rows of a decisions file, one individual each."""
    if "_individual" not in frame:
        return n_assessed
    known = frame["_score"].notna() if "_score" in frame else frame["_selected"].notna()
    return int(frame.loc[known, "_individual"].nunique())


def write_audit(result: dict[str, Any], out: Path) -> list[Path]:
    """The CSV tables and ``audit.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, table in result["_frames"].items():
        path = out / f"{result['format']}_{key}.csv"
        write_csv(path, table)
        written.append(path)
    for key, table in result["_frames"].items():
        if key.startswith("sweep_") and not table.empty:
            path = out / f"{result['format']}_{key}.png"
            column = result["columns"][key.removeprefix("sweep_")]
            written.append(sweep_figure(table, column, path, f"Threshold sweep by {column}"))
    path = out / "audit.json"
    write_json(path, public(result))
    return [*written, path]


def public(result: dict[str, Any]) -> dict[str, Any]:
    """The audit without its DataFrames (for JSON)."""
    return {k: v for k, v in result.items() if not k.startswith("_")}


def audit_dir(run_dir: Path, result: dict[str, Any], stage: str | None) -> Path:
    """Where an audit of a run is written by default: one directory per analysis and stage
    audited (``RUN/audit/policies``, ``RUN/audit/policies-screen``), so audits never overwrite
    each other."""
    name = result["source"]["analysis"] + (f"-{stage}" if stage else "")
    return run_dir / "audit" / name


def attach_to_run(run_dir: Path, result: dict[str, Any], target: Path) -> Path:
    """Add the audit to the run's summary.json (``audits``, keyed by where its tables are) and
    redraw its report.html."""
    from biasim.simulator.report.page import write_report

    summary = read_run_json(run_dir / SUMMARY, required=False)
    try:
        key = str(target.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        key = str(target)
    summary.setdefault("audits", {})[key] = public(result)
    manifest = read_manifest(run_dir)
    summary.pop("edited", None)
    if note := edits_note(manifest):
        summary["edited"] = note
    page = write_report(
        run_dir,
        summary,
        manifest["study"],
        [{"label": "", "path": str(run_dir), "manifest": manifest}],
    )
    write_summary(run_dir, summary)
    return page
