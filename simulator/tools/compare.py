"""``biasim compare``: runs of one study on different models (or conditions) read as one
multi-model run, so every analysis shows the models side by side with its cross-model figures
and tests, exactly as a single run listing several models would."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.results_digests import edits_note
from biasim.simulator.common.rundir import (
    check_writable,
    holding_lock,
    read_manifest,
    write_summary,
)
from biasim.simulator.engine.runner import check_run_dir, load_run, study_folder
from biasim.simulator.report.outputs import Evidence, analyze, write_evidence
from biasim.simulator.report.page import write_report
from biasim.simulator.study.config import Study
from biasim.simulator.tools.prism_compare import (
    seed_caches,
    with_masked_lms_by_model,
    without_masked_lms,
)

#: Study fields that may differ between compared runs: who plays the roles, and the labels.
COMPARABLE_EXCEPT = ("roles", "name", "description")
_LABEL = re.compile(r"^[A-Za-z0-9_.:-]+$")


@dataclass
class LoadedRun:
    """One run directory read for a comparison."""

    path: Path
    study: Study
    results: pd.DataFrame
    manifest: dict[str, Any]
    labels: dict[str, str]  # the run's model label -> label in the comparison


def study_differences(first: Any, other: Any, path: str = "") -> list[str]:
    """Where two resolved studies differ, one line per differing field, named by its path and
    its values shown whole (roles excluded). Lists of named entries (stages) are matched by
    name, so a changed stage is named, not its index."""
    if isinstance(first, dict) and isinstance(other, dict):
        out: list[str] = []
        for key in sorted(set(first) | set(other), key=str):
            if not path and key in COMPARABLE_EXCEPT:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in first or key not in other:
                out.append(f"{where}: only in {'the first' if key in first else 'this'} run")
            else:
                out += study_differences(first[key], other[key], where)
        return out
    if _named(first) and _named(other):
        return study_differences({e["name"]: e for e in first}, {e["name"]: e for e in other}, path)
    if isinstance(first, list) and isinstance(other, list) and len(first) == len(other):
        return [
            d
            for i, pair in enumerate(zip(first, other, strict=True))
            for d in study_differences(*pair, f"{path}[{i}]")
        ]
    return [f"{path}: {first!r} vs {other!r}"] if first != other else []


def _named(value: Any) -> bool:
    """A list whose entries are mappings with distinct names (a study's stages)."""
    if not isinstance(value, list) or not value:
        return False
    names = [e.get("name") if isinstance(e, dict) else None for e in value]
    return all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def parse_labels(options: list[str]) -> dict[Path, str]:
    """``NAME=RUN`` options as run path -> name.

    Raises:
        InputError: An option is not ``NAME=RUN`` or the name is not a valid label.
    """
    found: dict[Path, str] = {}
    for option in options:
        name, sep, run = option.partition("=")
        if not sep or not name or not run:
            raise InputError([Problem("--label", None, "", f"`{option}` is not NAME=RUN_DIR")])
        if not _LABEL.match(name):
            raise InputError(
                [Problem("--label", None, "", f"`{name}`: use letters, digits and _ . : -")]
            )
        found[Path(run).resolve()] = name
    return found


def _default_label(results: pd.DataFrame, run: Path) -> str:
    models = [m for m in dict.fromkeys(results["model"].astype(str)) if m]
    return _safe_label(models[0] if len(models) == 1 else run.name, run)


def _safe_label(label: str, run: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.:-]+", "-", label).strip("-") or run.name


def _labels(results: pd.DataFrame, path: Path, name: str | None) -> dict[str, str]:
    own = list(dict.fromkeys(results["model_label"].astype(str))) or [""]
    if len(own) == 1:
        return {own[0]: name or own[0] or _default_label(results, path)}
    return {m: f"{name}:{m}" if name else m for m in own}


def _by_directory_when_labels_collide(runs: list[LoadedRun], unnamed: list[LoadedRun]) -> None:
    """Runs not named by ``--label`` whose labels another run also has take their run
    directory's name instead (two runs of one model are told apart by where they are)."""
    counts: dict[str, int] = {}
    for run in runs:
        for label in run.labels.values():
            counts[label] = counts.get(label, 0) + 1
    for run in unnamed:
        if any(counts[label] > 1 for label in run.labels.values()):
            run.labels = _labels(run.results, run.path, _safe_label(run.path.name, run.path))


def load_runs(
    paths: list[Path], names: dict[Path, str], accept_edits: bool = False
) -> list[LoadedRun]:
    """Read each run and decide its models' labels in the comparison.

    A run of one model is labelled by ``--label``, else by its own model label, else by its
    model id; a run of several models keeps its labels, prefixed ``NAME:`` when labelled. Runs
    whose labels collide and that ``--label`` does not name are labelled by their directory.

    Raises:
        InputError: A path is not a finished run, or two models would get the same label.
    """
    runs: list[LoadedRun] = []
    unnamed: list[LoadedRun] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            check_run_dir(path)  # before its lock: a path that is no run's is not created
            # Under the run's lock: an accepted edit is recorded in its manifest.
            with holding_lock(path, str(path)):
                study, results = load_run(path, accept_edits=accept_edits, command="compare")
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        name = names.pop(path.resolve(), None)
        labels = _labels(results, path, name)
        runs.append(LoadedRun(path, study, results, read_manifest(path), labels))
        if name is None:
            unnamed.append(runs[-1])
    for path, name in names.items():
        problems.append(Problem("--label", None, "", f"{name}={path}: not among the runs given"))
    if problems:
        raise InputError(problems)
    _by_directory_when_labels_collide(runs, unnamed)
    seen: dict[str, Path] = {}
    for run in runs:
        for label in run.labels.values():
            if label in seen:
                problems.append(
                    Problem(
                        str(run.path),
                        None,
                        "",
                        f"model label `{label}` is also {seen[label]}'s; name the runs with "
                        "--label NAME=RUN_DIR",
                    )
                )
            seen[label] = run.path
    if problems:
        raise InputError(problems)
    return runs


def _relabel(run: LoadedRun) -> pd.DataFrame:
    """The run's results under its comparison labels, with ids as a multi-model run has them
    (``label/condition/slot``), so agents stay distinct and match across models."""
    df = run.results.copy()
    old = df["model_label"].astype(str)
    new = old.map(run.labels)
    for column in ("agent_id", "unit_id"):
        ids = df[column].astype(str)
        df[column] = [
            f"{n}/{i[len(o) + 1 :] if o and i.startswith(o + '/') else i}"
            for i, o, n in zip(ids, old, new, strict=True)
        ]
    if "reads" in df.columns:
        # The documents a reading showed, by unit id: renamed alike, so they stay found.
        df["reads"] = [
            r
            if not isinstance(r, str)
            else "|".join(
                f"{n}/{u[len(o) + 1 :] if o and u.startswith(o + '/') else u}" for u in r.split("|")
            )
            for r, o, n in zip(df["reads"], old, new, strict=True)
        ]
    df["model_label"] = new
    return df


def compare_runs(
    paths: list[Path],
    out: Path,
    *,
    labels: list[str] | None = None,
    force: bool = False,
    accept_edits: bool = False,
) -> tuple[Evidence, list[LoadedRun], list[str]]:
    """Analyse several runs of one study as one multi-model run and write the report.

    Args:
        paths: Run directories, in the order the models are shown.
        out: Directory for the tables, figures, summary.json and report.html.
        labels: ``NAME=RUN_DIR`` options.
        force: Compare runs whose studies differ (the differences are recorded).
        accept_edits: Read results edited after their run (recorded in its manifest).

    Returns:
        The evidence, the runs, and the study differences that were forced.

    Raises:
        InputError: Bad runs or options, or studies that differ without ``force``.
    """
    if len(paths) < 2:
        raise InputError([Problem("RUN_DIR", None, "", "give at least two run directories")])
    reason = check_writable(out, hint="; name a new directory with --out")
    if reason:
        raise InputError([Problem("--out", None, "", reason)])
    twice = sorted({str(p) for p in paths if [q.resolve() for q in paths].count(p.resolve()) > 1})
    if twice:
        raise InputError([Problem(t, None, "", "given twice; give each run once") for t in twice])
    runs = load_runs(paths, parse_labels(labels or []), accept_edits)
    differences: list[str] = []
    # The studies as validated now, not as each manifest recorded them: a run of an older
    # release recorded the older single-entry form of the seed-004 analysis, which loads as
    # the kinds that now do each part (study.decisions_compat), so it is the same study.
    first = runs[0].study.resolved
    for run in runs[1:]:
        # The masked LM is how PRISM measures, not what the study is: runs differing in it
        # are compared model by model, each scored with its own (prism_compare).
        found = study_differences(without_masked_lms(first), without_masked_lms(run.study.resolved))
        differences += [f"{run.path} differs from {runs[0].path}: {d}" for d in found]
    if differences and not force:
        shown = differences[:12] + (
            [f"... and {len(differences) - 12} more"] * (len(differences) > 12)
        )
        raise InputError(
            [
                Problem("RUN_DIR", None, "", f"the runs are not of the same study: {d}")
                for d in shown
            ]
            + [Problem("--force", None, "", "compare them anyway (the report lists these)")]
        )
    combined = pd.concat([_relabel(run) for run in runs], ignore_index=True)
    order = [label for run in runs for label in run.labels.values()]
    study = runs[0].study
    config = with_masked_lms_by_model(study.config, runs)
    seed_caches(runs, out)
    evidence = analyze(combined, config, data_dir=study_folder(study), models=order, out_dir=out)
    out.mkdir(parents=True, exist_ok=True)
    written = write_evidence(out, evidence)
    summary = evidence.summary
    summary.update(
        compared_runs=[
            {
                "path": str(run.path.resolve()),
                "labels": run.labels,
                "status": run.manifest.get("status"),
            }
            for run in runs
        ],
        study_differences=differences,
        edited="; ".join(f"{run.path}: {n}" for run in runs if (n := edits_note(run.manifest))),
        outputs=[str(p.relative_to(out)) for p in written],
        written=dt.datetime.now(dt.UTC).isoformat(),
    )
    pages = [
        {
            "label": ", ".join(run.labels.values()),
            "path": str(run.path.resolve()),
            "manifest": run.manifest,
        }
        for run in runs
    ]
    write_report(out, summary, first, pages)
    write_summary(out, summary)
    return evidence, runs, differences
