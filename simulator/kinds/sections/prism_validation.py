"""The ``prism`` kind's validation against human ratings (``human_ratings:`` in the analysis,
``--human-ratings`` with ``analyze --texts``): the rated texts are scored with each masked LM
and correlated with the ratings (``analysis.studies.prism.validation``, Figure 4a)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biasim.simulator.common.csvfiles import read_csv
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.kinds.base import Section, slug
from biasim.simulator.kinds.lazy import pd
from biasim.simulator.kinds.sections.prism_result import TABLES

#: Columns of a human-ratings CSV (the analysis module, which brings scipy.stats and matplotlib,
#: is imported only to correlate: validating a study reads the file, never correlates).
TEXT, RATING = "text", "rating"
CAPTION = "PRISM scores against human ratings of the same texts (the paper's Figure 4a)"


def read_ratings(path: Path) -> pd.DataFrame:
    """The ratings CSV: ``text`` and a numeric ``rating`` per row.

    Raises:
        InputError: Unreadable, a column missing, or a rating that is no number (file, line,
            column named).
    """
    frame = read_csv(path, "human ratings CSV")
    missing = [c for c in (TEXT, RATING) if c not in frame.columns]
    if missing:
        have = ", ".join(frame.columns)
        raise InputError(
            [
                Problem(
                    str(path),
                    1,
                    c,
                    f"no such column; a ratings CSV has `text` and `rating` (columns: {have})",
                )
                for c in missing
            ]
        )
    numbers = pd.to_numeric(frame[RATING], errors="coerce")
    bad = [i for i in range(len(frame)) if pd.isna(numbers.iloc[i])]
    if bad:
        raise InputError(
            [
                Problem(str(path), i + 2, RATING, f"`{frame[RATING].iloc[i]}` is not a number")
                for i in bad[:10]
            ]
        )
    empty = [i for i in range(len(frame)) if pd.isna(frame[TEXT].iloc[i])]
    if empty:
        raise InputError([Problem(str(path), i + 2, TEXT, "empty text") for i in empty[:10]])
    return pd.DataFrame({TEXT: frame[TEXT].astype(str), RATING: numbers.astype(float)})


def ratings_problem(path: Path) -> str | None:
    """Why the ratings CSV cannot be used (None when it can), for a study's validation."""
    try:
        read_ratings(path)
    except InputError as exc:
        return "; ".join(str(p).removeprefix(": ") for p in exc.problems)
    return None


def validate(scorer: Any, ratings: pd.DataFrame, masked_lm: str) -> tuple[pd.DataFrame, Any]:
    """Score the rated texts with ``scorer``: the correlation table (with ``masked_lm``) and
    the scatter figure."""
    from biasim.analysis.studies.prism.figures import NAMES
    from biasim.analysis.studies.prism.validation import plot_validation, rating_correlations

    dims = list(scorer.word_lists)
    scores = scorer.score(ratings[TEXT].tolist()).frame()
    table = rating_correlations(scores, ratings[RATING], dims)
    figure = plot_validation(scores, ratings[RATING], table, NAMES)
    return table.assign(masked_lm=masked_lm), figure


def add_validation(
    section: Section, name: str, scored: list[tuple[str, Any]], ratings: pd.DataFrame
) -> None:
    """The ``<name>_validation`` table, summary and figure (one per masked LM when several).

    Args:
        section: The prism section to add to.
        name: The analysis's name.
        scored: ``(masked LM, scorer)`` pairs.
        ratings: :func:`read_ratings`.
    """
    tables = []
    for masked_lm, scorer in scored:
        table, figure = validate(scorer, ratings, masked_lm)
        tables.append(table)
        tag = Path(masked_lm.rstrip("/")).name if len(scored) > 1 else ""
        section.figures[slug(name, tag, "validation")] = figure
    merged = pd.concat(tables, ignore_index=True)
    # The masked LM first: the declared table shows the leading text columns as labels.
    merged = merged[["masked_lm", *[c for c in merged.columns if c != "masked_lm"]]]
    section.summary["validation"] = TABLES["validation"].write(section.tables, name, merged)
