"""``biasim analyze iat``: LLM-IAT answers collected elsewhere, scored with Bai et al.'s stimuli,
and their chained IAT -> decision logit.

Each ``--iat`` path is a CSV or a folder of CSVs. A file with ``iat_bias`` and ``decision_bias``
columns is a chained run (Bai's ``result_chained.csv``): the logit of the decision on the D it
holds is fitted, as the authors did. Any other file holds answers, one per row, in a text column
(``--text-col``, else ``response``, ``text`` or Bai's ``0``) with the stereotype in ``dataset``
(else Bai's ``category``); they are scored against ``--iat-stimuli`` (Bai's stimuli CSV: columns
dataset, A, B, C and optionally D). Everything is checked before anything is scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from biasim.analysis.studies.bias_transmission.iat import LogitFit, decision_logit
from biasim.analysis.studies.bias_transmission.iat_responses import (
    match_dataset,
    pooled_lists,
    read_stimuli,
    score_responses,
)
from biasim.simulator.common.csvfiles import read_csv
from biasim.simulator.common.errors import InputError, Problem

TEXT_COLUMNS = ("response", "text", "0")
DATASET_COLUMNS = ("dataset", "category")
CHAINED_COLUMNS = ("iat_bias", "decision_bias")


@dataclass(frozen=True)
class IATRequest:
    """What ``analyze iat`` was given."""

    paths: list[Path]
    stimuli: Path | None
    text_col: str | None
    out: Path | None


@dataclass
class IATResult:
    """Per-answer scores, the D summary and the chained logit (each absent when no file fed it)."""

    scores: pd.DataFrame | None
    summary: pd.DataFrame | None
    logit: LogitFit | None
    chained_rows: int


def _csv_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.csv"))
            if not found:
                raise InputError([Problem(str(path), None, "", "--iat: no .csv file in folder")])
            files += found
        else:
            files.append(path)
    return files


def _pick(frame: pd.DataFrame, path: Path, given: str | None, choices: tuple[str, ...]) -> str:
    """The column to read: the one given, else the first of ``choices`` present."""
    wanted = [given] if given else list(choices)
    found = next((c for c in wanted if c in frame.columns), None)
    if found is None:
        raise InputError(
            [
                Problem(
                    str(path),
                    1,
                    " or ".join(wanted),
                    f"no such column; columns: {', '.join(map(str, frame.columns))}",
                )
            ]
        )
    return found


def _read_stimuli(path: Path | None) -> pd.DataFrame:
    if path is None:
        raise InputError(
            [Problem("--iat-stimuli", None, "", "required to score IAT answers (Bai's stimuli)")]
        )
    table = read_csv(path, "IAT stimuli CSV")
    missing = [c for c in ("dataset", "A", "B", "C") if c not in table.columns]
    if missing:
        raise InputError([Problem(str(path), 1, c, "no such column") for c in missing])
    return table


def _answers(
    files: dict[Path, pd.DataFrame], text_col: str | None, datasets: list[str]
) -> pd.DataFrame:
    frames = []
    for path, frame in files.items():
        text, dataset = (
            _pick(frame, path, text_col, TEXT_COLUMNS),
            _pick(frame, path, None, DATASET_COLUMNS),
        )
        for line, name in enumerate(frame[dataset], start=2):
            if match_dataset(str(name), datasets) is None:
                raise InputError(
                    [Problem(str(path), line, dataset, f"`{name}` is no stereotype of the stimuli")]
                )
        frames.append(pd.DataFrame({"text": frame[text], "dataset": frame[dataset]}))
    return pd.concat(frames, ignore_index=True)


def analyze_iat(request: IATRequest) -> IATResult:
    """Read, check, score and fit.

    Raises:
        InputError: A path, column, stereotype or the stimuli is missing or unusable.
    """
    from biasim.analysis.studies.bias_transmission.iat_responses import d_summary

    files = {path: read_csv(path, "IAT CSV") for path in _csv_files(request.paths)}
    chained = [f for f in files.values() if set(CHAINED_COLUMNS) <= set(f.columns)]
    answers = {p: f for p, f in files.items() if not set(CHAINED_COLUMNS) <= set(f.columns)}
    logit, rows = None, 0
    if chained:
        frame = pd.concat(chained, ignore_index=True)
        numbers = frame[list(CHAINED_COLUMNS)].apply(pd.to_numeric, errors="coerce")
        rows = len(numbers)
        try:
            logit = decision_logit(numbers)
        except (ValueError, np.linalg.LinAlgError) as exc:
            why = f"the logit of decision_bias on iat_bias cannot be fitted: {exc}"
            raise InputError([Problem("--iat", None, "decision_bias", why)]) from None
    scores = summary = None
    if answers:
        table = _read_stimuli(request.stimuli)
        stimuli = read_stimuli(table)
        frame = _answers(answers, request.text_col, list(stimuli))
        scores = score_responses(frame, "text", "dataset", stimuli, pooled_lists(table))
        summary = d_summary(scores)
    return IATResult(scores, summary, logit, rows)
