"""Turns a results table into the evidence a reviewer asks for: JSON, CSV tables, PNG figures,
printed tables and ``report.html``. Each analysis kind (``simulator.kinds``) computes and renders
its own part; this module runs them and adds what every report has (outcomes per group, the
synthetic banner, the models). ``biasim analyze`` and ``biasim compare`` call the same code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from biasim.analysis import figures
from biasim.analysis.stats.parity import status_rates
from biasim.simulator.common.csvfiles import write_csv
from biasim.simulator.common.results import older_summary
from biasim.simulator.common.rundir import FILE_MODE
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds import AnalysisContext, Section, get_kind, slug
from biasim.simulator.llm.structured import OUTSIDE_CHOICES
from biasim.simulator.study.config import StudyConfig, analysis_name
from biasim.simulator.study.counterfactual import work_units
from biasim.simulator.study.market import APPLIES_IN, in_base

SYNTHETIC_NOTE = (
    "SYNTHETIC RESPONDER - not a language model. These answers were drawn from probabilities "
    "declared in the study file; they test the pipeline and power, not a model."
)
TABLES_DIR = "tables"
#: The summary's list of analyses whose compute raised (each kind, name and error).
FAILED_ANALYSES = "failed_analyses"
FIGURES_DIR = "figures"

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Evidence:
    """Everything the analyses of a run produced."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)


def base_summary(
    df: pd.DataFrame, study: StudyConfig, models: list[str] | None = None
) -> dict[str, Any]:
    """What every report states whatever its analyses: the study, whether the answers are
    synthetic, unit outcomes, the models in report order, and outcome rates per group (per
    model when there are several, since one model may fail a group more than another)."""
    if "members" in df:
        # A committee's decided row is no unit of work (its members' rows are): the counts
        # are of units, as the progress and the manifest count them.
        df = df[df["members"].isna()]
    synthetic = bool(df["synthetic"].fillna(False).astype(bool).any()) if len(df) else False
    order = _label_order(df, models)
    # One row per (label, backend, model): iterating every row of a 100k-row table is slow.
    who = (
        df[["model_label", "backend", "model"]].drop_duplicates()
        if len(df)
        else pd.DataFrame(columns=["model_label", "backend", "model"])
    )
    summary: dict[str, Any] = {
        "study": study.name,
        "synthetic": synthetic,
        "units": work_units(df),
        "status_counts": {k: int(v) for k, v in df["status"].value_counts().items()},
        # Reported, never silent: answers cut at max_tokens, and answers kept but excluded
        # because they chose none of a stage's open choices.
        "truncated": int(df["truncated"].fillna(False).astype(bool).sum())
        if "truncated" in df
        else 0,
        "outside_choices": int(df["error"].str.startswith(OUTSIDE_CHOICES, na=False).sum())
        if "error" in df
        else 0,
        "policy_applicants": int((~_of_base(df)).sum()),
        "models": sorted({f"{b}:{m}" for b, m in zip(who["backend"], who["model"], strict=True)}),
        "model_labels": order,
        # Which model each label is, so a header pairs them right (labels are the user's order,
        # `models` sorted).
        "model_of_label": {
            str(label): f"{b}:{m}"
            for label, b, m in zip(who["model_label"], who["backend"], who["model"], strict=True)
        }
        if len(df)
        else {},
        "outcomes_by_group": {},
        "analyses": [],
    }
    summary["samples"] = sample_answers(df, study, order)
    by_model = ["model_label"] if len(order) > 1 else []
    for axis in study.personas.axes:
        if axis in df and df[axis].notna().any():
            rates = status_rates(df, [*by_model, axis])
            rates = _ReportOrder(order, study.personas.axes).table(rates)
            summary["outcomes_by_group"][axis] = rates.to_dict("records")
    return summary


def _label_order(df: pd.DataFrame, models: list[str] | None) -> list[str]:
    """Model labels present in ``df``: those in ``models`` in that order, then the others in
    order of first appearance."""
    present = [str(m) for m in pd.unique(df["model_label"])] if len(df) else []
    return [m for m in (models or []) if m in present] + [
        m for m in present if m not in (models or [])
    ]


#: Answers shown per stage, model and group in the report, and the characters kept of each.
SAMPLES_PER_GROUP = 2
SAMPLE_CHARS = 400


def sample_answers(df: pd.DataFrame, study: StudyConfig, order: list[str]) -> list[dict[str, Any]]:
    """A few answered units per stage, model and value of the first persona axis (drawn with
    the study's seed, so a rerun shows the same), each answer cut at :data:`SAMPLE_CHARS`."""
    if not len(df) or "raw_text" not in df:
        return []
    rng = np.random.default_rng(study.seed or 0)
    # Only the columns a sample shows: filtering every column of 100,000 rows took 0.2 s.
    shown = ["stage", "model_label", "unit_id", "raw_text"]
    shown += [a for a in study.personas.axes if a in df.columns and a not in shown]
    answered = df.loc[df["status"] == "answered", shown]
    samples = []
    present = answered["stage"].unique().tolist()
    declared = [s.name for s in study.stages if s.name in present]
    # Stages the engine adds (persona writing) follow the declared ones.
    stages = declared + [s for s in present if s not in declared]
    for stage in stages:
        rows = answered[answered["stage"] == stage]
        axis = next((a for a in study.personas.axes if a in rows and rows[a].notna().any()), None)
        for model in [m for m in order if m in set(rows["model_label"].unique())]:
            mine = rows[rows["model_label"] == model]
            groups = study.personas.axes[axis] if axis else [None]
            labels = mine[axis].astype(str) if axis else None
            for group in groups:
                pool = mine if group is None else mine[labels == str(group)]
                picked = rng.permutation(len(pool))[:SAMPLES_PER_GROUP]
                for i in sorted(picked):
                    row = pool.iloc[int(i)]
                    samples.append(
                        {
                            "stage": stage,
                            "model_label": model,
                            "axis": axis,
                            "group": group,
                            "unit_id": str(row["unit_id"]),
                            "answer": _cut(str(row["raw_text"]), SAMPLE_CHARS),
                        }
                    )
    return samples


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars].rstrip() + " …"


def analyze(
    df: pd.DataFrame,
    study: StudyConfig,
    *,
    data_dir: Path | None = None,
    models: list[str] | None = None,
    out_dir: Path | None = None,
    power_only: bool = False,
) -> Evidence:
    """Every analysis the study declares, plus outcome rates per persona group.

    Args:
        df: The results table (one run, or several runs combined by ``biasim compare``).
        study: The study that produced it.
        data_dir: Where relative data paths of analyses (training CSV, predictions) resolve.
        models: Model labels in report order (default: order of first appearance).
        out_dir: Where the outputs will be written (kinds keep score caches there).
        power_only: Only the tests ``biasim power`` reads (see ``AnalysisContext``).
    """
    if power_only:
        # Nobody reads the report's common part of a simulated study: only the analyses.
        order = _label_order(df, models)
        evidence = Evidence(summary={"study": study.name, "model_labels": order, "analyses": []})
    else:
        evidence = Evidence(summary=base_summary(df, study, models))
        order = evidence.summary["model_labels"]
    in_order = _ReportOrder(order, study.personas.axes)
    # A market with policies: each trajectory draws its own applicants, and the analyses are of
    # the base's (market.csv holds every trajectory; the header counts the others' letters).
    df = df[_of_base(df)]
    for i, spec in enumerate(study.analyses):
        name = analysis_name(spec, i)
        ctx = AnalysisContext(
            study=study,
            name=name,
            data_dir=data_dir,
            models=tuple(order),
            out_dir=out_dir,
            power_only=power_only,
        )
        try:
            section = get_kind(spec.kind).compute(df, spec, ctx)
        except Exception as exc:
            if power_only:
                raise  # power reads every test: a missing one would read as never significant
            # One kind failing on these answers must not take the others' evidence with it:
            # it is recorded (summary.json, the page, the exit code) and the rest go on.
            evidence.summary.setdefault(FAILED_ANALYSES, []).append(
                failed_entry(spec.kind, name, exc)
            )
            continue
        if not power_only:
            in_order.section(section)
        evidence.tables.update(section.tables)
        evidence.figures.update(section.figures)
        evidence.summary["analyses"].append(section.entry(spec.kind, name))
    synthetic = _synthetic_models(df) if evidence.figures else set()
    for name, figure in evidence.figures.items():
        figures.keep_inside(figure)
        # A figure drawn from synthetic answers says so wherever it is shown without the
        # report; one of real models only (in a comparison with a synthetic run) does not.
        note = _banner_for(name, order, synthetic)
        if note:
            figures.add_banner(figure, note)
    return evidence


def failed_entry(kind: str, name: str, exc: Exception) -> dict[str, str]:
    """An analysis that failed, as ``failed_analyses`` records it: its kind, its name and the
    error's first line (the whole message can be a page of columns)."""
    lines = str(exc).strip().splitlines()
    said = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return {"kind": kind, "name": name, "error": said}


def analysis_failure(summary: dict[str, Any]) -> str:
    """What failed of a summary's analyses in one line: the reason none was written
    (``analysis_error``), else each failed one's ``name (kind): error``; empty when none
    failed."""
    return summary.get("analysis_error") or "; ".join(
        f"{f['name']} ({f['kind']}): {f['error']}" for f in summary.get(FAILED_ANALYSES, [])
    )


def _of_base(df: pd.DataFrame) -> pd.Series:
    """Per row, whether it is the base trajectory's: every row but the letters of applicants
    only a market's policies (or switched-off trajectories) drew."""
    if APPLIES_IN not in df.columns:
        return pd.Series(True, index=df.index)
    return in_base(df[APPLIES_IN])


def _synthetic_models(df: pd.DataFrame) -> set[str]:
    if not len(df):
        return set()
    flags = df["synthetic"].fillna(False).astype(bool)
    return set(df.loc[flags, "model_label"].astype(str).unique())


def _banner_for(figure: str, order: list[str], synthetic: set[str]) -> str | None:
    """The synthetic notice for a figure, naming the synthetic models when it also shows real
    ones; None when it shows none. A figure whose name carries a model's slug shows that
    model; any other shows every model."""
    own = [m for m in order if f"_{slug(m)}" in figure]
    shown = own or order
    drawn = [m for m in shown if m in synthetic]
    if not drawn:
        return None
    if len(drawn) == len(shown):
        return SYNTHETIC_NOTE
    return f"{', '.join(drawn)}: {SYNTHETIC_NOTE}"


class _ReportOrder:
    """Rows in the user's model order and each persona axis's declared value order (statistics
    group by label, which sorts them alphabetically), everything else as computed: a row's
    other text columns (scenario, condition) keep their blocks where they first appear."""

    def __init__(self, models: list[str], axes: dict[str, list[str]]) -> None:
        self.models = {m: i for i, m in enumerate(models)}
        self.values = {(a, str(v)): i for a, vs in axes.items() for i, v in enumerate(vs)}
        self.axes = list(axes)

    def _groups(self, keys: list[str]) -> list[str]:
        pair = ["attribute", "value"] if {"attribute", "value"} <= set(keys) else []
        return [k for k in keys if k in self.axes] + pair

    def _ranks(self, frame: pd.DataFrame, groups: list[str]) -> list[np.ndarray]:
        """Each row's rank keys, most significant first: its model, its block (the first
        appearance of its other text cells), then each group's declared value order."""
        none = len(self.models)
        labels = frame["model_label"].tolist() if "model_label" in frame.columns else []
        model = [self.models.get(m, none) for m in labels] or [none] * len(frame)
        # Only columns that can hold text form a row's block (numbers never do): reading
        # every cell of a long table was most of a simulated study's report time in power.
        texts = [
            c
            for c in frame.columns
            if c not in groups and c != "model_label" and not is_numeric_dtype(frame[c].dtype)
        ]
        cells = [[v if isinstance(v, str) else None for v in frame[c].tolist()] for c in texts]
        blocks: dict[tuple, int] = {}
        block = [blocks.setdefault(key, len(blocks)) for key in zip(*cells, strict=True)]
        columns = {c: frame[c].tolist() for c in groups}
        values = [self._value_ranks(columns, g) for g in groups]
        return [np.asarray(k) for k in (model, block or [0] * len(frame), *values)]

    def _value_ranks(self, columns: dict[str, list[Any]], column: str) -> list[int]:
        last = len(self.values) + len(self.axes)
        if column == "attribute":
            return [self.axes.index(a) if a in self.axes else last for a in columns[column]]
        if column == "value":
            pairs = zip(columns["attribute"], columns["value"], strict=True)
            return [self.values.get((a, str(v)), last) for a, v in pairs]
        return [self.values.get((column, str(v)), last) for v in columns[column]]

    def _order(self, frame: pd.DataFrame, groups: list[str]) -> np.ndarray:
        """Row positions in report order (a stable sort: ties keep their computed order)."""
        return np.lexsort(self._ranks(frame, groups)[::-1])

    def records(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups = self._groups(list(rows[0]))
        if not groups and "model_label" not in rows[0]:
            return rows
        return [rows[i] for i in self._order(pd.DataFrame(rows), groups)]

    def table(self, table: pd.DataFrame) -> pd.DataFrame:
        if table.empty:
            return table
        groups = self._groups(list(table.columns))
        if not groups and "model_label" not in table.columns:
            return table
        return table.iloc[self._order(table, groups)].reset_index(drop=True)

    def section(self, section: Section) -> None:
        for name, table in section.tables.items():
            section.tables[name] = self.table(table)
        self.summary(section.summary)

    def summary(self, summary: dict[str, Any]) -> None:
        """Every table of ``summary`` in report order, a nested part's too (a model's part
        holds tables whose CSV files are ordered here: the two must list rows alike)."""
        for key, value in summary.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                summary[key] = self.records(value)
            elif isinstance(value, dict):
                self.summary(value)


def write_evidence(run_dir: Path, evidence: Evidence) -> list[Path]:
    """Write the tables (CSV) and figures (PNG) into ``run_dir``; return the paths written."""
    written: list[Path] = []
    if evidence.tables:
        (run_dir / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    for name, table in evidence.tables.items():
        path = run_dir / TABLES_DIR / f"{name}.csv"
        write_csv(path, table)
        written.append(path)
    for name, figure in evidence.figures.items():
        path = figures.save_figure(figure, run_dir / FIGURES_DIR / f"{name}.png")
        os.chmod(path, FILE_MODE)  # as the tables: not the temporary file's owner-only mode
        written.append(path)
    return written


def units_text(report: dict[str, Any]) -> str:
    """``40 of 80 (40 not run: ...)``: the count validate and the progress give (units
    planned), with those a stage's ``when`` (or a reader with nothing to read) left out named."""
    expected = report.get("units_expected")
    if not expected or expected <= report["units"]:
        return str(report["units"])
    left = expected - report["units"]
    if report.get("status") not in (None, "complete"):
        return f"{report['units']} of {expected} ({left} not run yet)"
    return (
        f"{report['units']} of {expected} ({left} not run: "
        + report.get("skip_causes", "a `when` was false or nothing to read")
        + ")"
    )


def _labels_text(report: dict[str, Any]) -> str:
    """`` as a = backend:model, b = ...`` for several labels, each beside its own model."""
    labels = report.get("model_labels") or []
    if len(labels) < 2:
        return ""
    models = report.get("model_of_label") or {}
    return " as " + ", ".join(f"{label} = {models.get(label, '?')}" for label in labels)


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Print every analysis (each kind renders its own), then outcome rates per group."""
    console = console or Console(markup=False, emoji=False)
    if report["synthetic"]:
        console.print(Panel(SYNTHETIC_NOTE, style="bold yellow"))
    console.print(
        Text(str(report["study"]), style="bold")
        + f"  models: {', '.join(report['models'])}"
        + _labels_text(report)
        + f"  units: {units_text(report)}  outcomes: {report['status_counts']}"
        + (
            Text(f"  cut at max_tokens: {report['truncated']}", style="yellow")
            if report.get("truncated")
            else ""
        )
        + (
            f"  excluded, outside the choices: {report['outside_choices']}"
            if report.get("outside_choices")
            else ""
        )
        + (
            f"  letters of applicants only a policy drew (not in the analyses of the base): "
            f"{report['policy_applicants']}"
            if report.get("policy_applicants")
            else ""
        )
    )
    for result in report["analyses"]:
        try:
            get_kind(result["kind"]).print(result, console)
        except KeyError as exc:
            console.print(f"{result.get('name')}: {older_summary(exc)}", highlight=False)
    for axis, rows in report["outcomes_by_group"].items():
        table = Table(
            title=f"Answer outcomes by {axis} (a difference here is itself a bias signal)"
        )
        models = bool(rows) and "model_label" in rows[0]
        for col in (*(["model"] if models else []), axis, "units", "answered", "invalid"):
            table.add_column(col, justify="right" if col in ("units", "answered") else "left")
        for col in ("error", "skipped"):
            table.add_column(col, justify="right")
        for row in rows:
            table.add_row(
                *([str(row["model_label"])] if models else []),
                str(row[axis]),
                str(row["n"]),
                *[f"{row[f'{s}_rate']:.1%}" for s in ("answered", "invalid", "error", "skipped")],
            )
        print_table(console, table)
