"""``biasim analyze prism``: PRISM scores of any CSV of texts, and with a paired column (the
text each one answers, e.g. a job posting) the posting -> application tables and figures.

Everything is checked before the model loads: the file, its columns, the masked LM, the word
lists and the output directory; a bad one is exit 2 naming it. Scores are cached in the
output directory (``prism_scores.sqlite``), so a rerun never re-scores a text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.simulator.common.csvfiles import read_csv
from biasim.simulator.common.csvlimits import CsvLimits
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.results import summary_of
from biasim.simulator.kinds.base import Section, model_problem
from biasim.simulator.kinds.prism import (
    BASELINE_CACHE,
    POSTING_FACTOR,
    SCORE_CACHE,
    baseline_summary,
    pair_scores,
    paired_section,
    word_list_problem,
    word_list_table,
)
from biasim.simulator.kinds.sections.prism_baseline import model_baselines
from biasim.simulator.kinds.sections.prism_result import (
    TABLES,
    PrismTextsResult,
)
from biasim.simulator.kinds.sections.prism_validation import (
    add_validation,
    ratings_problem,
    read_ratings,
)
from biasim.simulator.study.options import PRISM_KIND

#: Prefix of the tables and figures ``analyze prism`` writes.
NAME = "prism"

HOW_TO = (
    "give --masked-lm a local folder holding an AutoModelForMaskedLM and its tokenizer, or a hub "
    "id (bert-base-uncased is the paper's)"
)


@dataclass(frozen=True)
class TextsRequest:
    """What ``analyze prism`` was asked to do."""

    path: Path
    column: str
    paired_column: str | None
    masked_lm: str | None
    word_lists: Path | None
    alpha: float
    out: Path | None
    limits: CsvLimits = field(default_factory=CsvLimits)
    human_ratings: Path | None = None


@dataclass
class TextsResult:
    """Tables, figures and the summary (what ``--json`` prints: each table once, under its
    declared result's field)."""

    tables: dict[str, pd.DataFrame]
    figures: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def read_texts(request: TextsRequest) -> pd.DataFrame:
    """The CSV with its text columns checked, or every problem with file, column or option.

    Raises:
        InputError: Unreadable file, absent column, no masked LM, bad word lists or ``--out``.
    """
    problems: list[Problem] = []
    frame = read_csv(request.path, "texts CSV", request.limits, empty_is_missing=False)
    for option, name in (("--column", request.column), ("--paired-column", request.paired_column)):
        if name is not None and name not in frame.columns:
            problems.append(
                Problem(
                    str(request.path),
                    1,
                    name,
                    f"no such column (given by {option}); columns: {', '.join(frame.columns)}",
                )
            )
    model_ok = False
    if request.masked_lm is None:
        problems.append(Problem("--masked-lm", None, "", f"required: {HOW_TO}"))
    else:
        reason = model_problem(request.masked_lm, None, HOW_TO, "a masked LM")
        if reason:
            problems.append(Problem("--masked-lm", None, "", reason))
        model_ok = reason is None
    local = model_ok and Path(str(request.masked_lm)).is_dir()
    why = word_list_problem(request.word_lists, Path(str(request.masked_lm)) if local else None)
    if why:
        problems.append(Problem("--word-lists", None, "", why))
    if request.human_ratings is not None:
        why = ratings_problem(request.human_ratings)
        if why:
            problems.append(Problem("--human-ratings", None, "", why))
    if not 0 < request.alpha <= 100:
        problems.append(Problem("--alpha", None, "", "a percentage in (0, 100]"))
    if request.out is not None:
        from biasim.simulator.common.rundir import check_writable

        reason = check_writable(request.out, hint="; name a new directory with --out")
        if reason:
            problems.append(Problem("--out", None, "", reason))
    if problems:
        raise InputError(problems)
    return frame


def analyze_texts(request: TextsRequest, frame: pd.DataFrame) -> TextsResult:
    """Score ``frame``'s texts (and the paired ones) and build the tables and figures.

    Unpaired: ``prism_scores`` (one row per CSV row, ``row`` numbered from 1 as data lines),
    ``prism_score_summary`` and ``prism_exclusions``. Paired: the ``prism`` kind's tables and
    figures, the texts answering one paired text counted as one pair (see
    ``one_pair_per_posting``). A text that cannot be scored keeps its row, with NaN scores and
    the reason in ``excluded``, counted in the exclusions table.
    """
    from biasim.analysis.studies.prism.scorer import cached_baseline, vocabulary_scorer
    from biasim.analysis.text.scorers import ScoreCache, cached_scores

    assert request.masked_lm is not None
    scorer, dropped = vocabulary_scorer(
        request.masked_lm, request.word_lists, alpha=request.alpha, progress=True
    )
    texts = frame[request.column].tolist()
    paired = frame[request.paired_column].tolist() if request.paired_column else []
    cache = ScoreCache(request.out / SCORE_CACHE) if request.out is not None else None
    try:
        table, fresh = cached_scores(scorer, [*paired, *texts], cache)
    finally:
        if cache is not None:
            cache.close()
    scores = table.frame()
    n = len(paired)
    label = request.path.name
    if request.paired_column:
        ids = pd.DataFrame(
            {"model_label": label, "row": range(1, len(frame) + 1), POSTING_FACTOR: paired}
        )
        answered = pd.Series(True, index=ids.index)
        pairs = pair_scores(ids, scores.iloc[:n], scores.iloc[n:], answered, scorer.columns)
        settings = {
            "masked_lm": request.masked_lm,
            "word_lists": str(request.word_lists or "paper's example words"),
            "alpha": request.alpha,
            "masked_lm_by_model": {label: request.masked_lm},
        }
        baselines = model_baselines(scorer, ids, paired, texts, answered, _baseline_path(request))
        lists = word_list_table(scorer, dropped)
        section = paired_section(pairs, scorer, lists, fresh, NAME, [label], settings, baselines)
        _validation(request, scorer, section)
        # The analysis as a run's summary.json holds it (the same keys and records).
        return TextsResult(section.tables, section.figures, section.entry(PRISM_KIND, NAME))
    out = scores.iloc[n:].reset_index(drop=True)
    out.insert(0, "row", range(1, len(out) + 1))
    reasons = out["excluded"].dropna().value_counts()
    exclusions = pd.DataFrame({"reason": reasons.index, "n": reasons.to_numpy()})
    described = out[list(scorer.columns)].describe().T.rename_axis("score").reset_index()
    baselines = cached_baseline(scorer, {"text": texts}, _baseline_path(request))
    section = Section(summary={}, tables={f"{NAME}_scores": out})
    result = PrismTextsResult(
        rows=len(out),
        texts_scored_now=fresh,
        device=str(scorer.lm.device),
        dropped=dropped,
        score_summary=TABLES["score_summary"].write(section.tables, NAME, described),
        exclusions=TABLES["text_exclusions"].write(section.tables, NAME, exclusions),
        **baseline_summary(
            baselines.assign(model_label=label),
            word_list_table(scorer, dropped),
            section.tables,
            NAME,
        ),
    )
    section.summary = summary_of(result)
    _validation(request, scorer, section)
    return TextsResult(section.tables, section.figures, {"name": NAME, **section.summary})


def texts_headline(summary: dict[str, Any]) -> str:
    """What ``analyze prism`` of unpaired texts says after its name."""
    return (
        f"(PRISM of {summary['rows']} texts: {summary['texts_scored_now']} scored now on "
        f"{summary['device']}, the rest from the cache)"
    )


def texts_lines(summary: dict[str, Any]) -> list[str]:
    """The words the vocabulary lacks, and the baselines' warnings."""
    dropped = "; ".join(f"{k}: {', '.join(v)}" for k, v in summary["dropped"].items())
    out = [f"words not in the model's vocabulary, dropped: {dropped}"] if dropped else []
    return out + [f"warning: {line}" for line in summary["baseline_warnings"]]


def _validation(request: TextsRequest, scorer: Any, section: Section) -> None:
    """With ``--human-ratings``: the rated texts' correlations and figure, into ``section``."""
    if request.human_ratings is not None:
        ratings = read_ratings(request.human_ratings)
        add_validation(section, NAME, [(str(request.masked_lm), scorer)], ratings)


def _baseline_path(request: TextsRequest) -> Path | None:
    return request.out / BASELINE_CACHE if request.out is not None else None
