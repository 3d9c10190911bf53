"""Every seed-002 table for one set of letters: lexicon odds ratios, salient nouns and
adjectives, per-letter style shares and their tests. The ``letters`` analysis kind calls it per
model; ``biasim analyze --texts`` calls it on letters written elsewhere."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.studies.letters.hallucination import (
    hallucinated_sentences,
    hallucination_shares,
    hallucination_tests,
)
from biasim.analysis.text.letter_style import letter_shares, style_tests
from biasim.analysis.text.lexicon import lexicon_odds_ratios
from biasim.analysis.text.nli_scorer import NliScorer
from biasim.analysis.text.salient_words import salient_words
from biasim.analysis.text.scorers import ScoreCache, TextScorer

#: Why a document of a counterfactual pair is left out: the pair tests need both.
NO_PARTNER = "its counterfactual partner was excluded"


@dataclass
class LetterTables:
    """The tables of one set of letters and how many sentences were scored now (not cached)."""

    lexicon: pd.DataFrame
    salient: pd.DataFrame
    style: pd.DataFrame
    shares: pd.DataFrame
    scored_now: int
    hallucination: pd.DataFrame | None = None
    #: Filled by the caller that embeds words (:func:`analysis.weat.salient_weat`).
    weat: pd.DataFrame | None = None


def letter_tables(
    frame: pd.DataFrame,
    *,
    text_col: str,
    group_col: str,
    groups: tuple[str, str],
    lexicon: Mapping[str, Sequence[str]],
    scorers: Mapping[str, TextScorer],
    nlp: Any,
    pair_col: str | None = None,
    id_cols: Sequence[str] = (),
    cache: ScoreCache | None = None,
    salient_threshold: int = 10,
    salient_top_k: int = 10,
    n_permutations: int = 9999,
    n_bootstrap: int = 2000,
    seed: int = 0,
    normalize: bool = True,
    premise_col: str | None = None,
    nli: NliScorer | None = None,
    unit_col: str | None = None,
) -> LetterTables:
    """Lexicon, salient-word and style tables of the letters in ``frame``.

    Args:
        frame: One row per letter.
        text_col: Column of the letters.
        group_col: Column of the groups.
        groups: ``(first, second)``: odds ratios are first over second, tests first > second.
        lexicon: Category -> stems.
        scorers: Style dimension -> sentence scorer (or a ``column`` scorer reading ``frame``).
        nlp: spaCy pipeline for the salient words.
        pair_col: Column of counterfactual pairs, or None.
        id_cols: Columns copied into the per-letter shares table.
        cache: Score cache for the style scorers.
        salient_threshold: Minimum count per group of a salient word.
        salient_top_k: Salient words kept per side and part of speech.
        n_permutations: Relabellings for the lexicon p-values.
        n_bootstrap: Resamples for the lexicon intervals.
        seed: Seed of relabellings and resamples.
        normalize: Read ``<return>`` marks as line breaks in the lexicon counts.
        premise_col: Column of the biographies the letters were written from; with ``nli``
            adds the hallucination table (one row per style dimension and group).
        nli: The NLI scorer for hallucination detection.
        unit_col: Column of the unit letters share (a writer, a name): the lexicon and style
            tests relabel units, not letters (``analysis.stats.clusters``). Not with
            ``pair_col`` (the pair is then the unit).
    """
    texts = frame[text_col].astype(str)
    lex = lexicon_odds_ratios(
        frame,
        text_col,
        group_col,
        lexicon,
        groups,
        pair_col,
        n_permutations,
        n_bootstrap,
        seed,
        normalize,
        unit_col,
    )
    sal = salient_words(frame, text_col, group_col, groups, nlp, salient_threshold, salient_top_k)
    keep = [*id_cols, group_col, *(c for c in (pair_col, unit_col) if c)]
    shares = frame[list(dict.fromkeys(keep))].reset_index(drop=True)
    rows, scored_now = [], 0
    for dim, scorer in scorers.items():
        doc, fresh = letter_shares(frame, text_col, scorer, cache)
        scored_now += fresh
        shares[dim] = doc["share"].to_numpy()
        shares[f"{dim}_excluded"] = doc["excluded"].to_numpy()
        try:
            tests: dict[str, Any] = {
                **style_tests(
                    shares, dim, group_col, groups, pair_col, unit_col, n_permutations, seed
                ),
                "excluded": None,
            }
        except ValueError as exc:
            # A group none of whose letters the scorer could score (few letters, no agency
            # word): this dimension has no test, the others still do.
            tests = {f"mean_{g}": np.nan for g in groups} | {f"sd_{g}": np.nan for g in groups}
            tests |= {f"n_{g}": 0 for g in groups} | {"excluded": str(exc)}
            tests |= dict.fromkeys(("t_student", "p_student", "t_welch", "p_welch"), np.nan)
        rows.append({"dimension": dim, "scorer": scorer.name, **tests})
    hal = None
    if premise_col is not None and nli is not None:
        found, counts = hallucinated_sentences(
            texts.tolist(), frame[premise_col].astype(str).tolist(), nli, cache
        )
        shares = pd.concat([shares, counts], axis=1)
        records = []
        for dim, scorer in scorers.items():
            part = hallucination_shares(texts.tolist(), found, scorer, cache)
            part[group_col] = frame[group_col].to_numpy()
            for row in hallucination_tests(part, group_col, groups):
                records.append({"dimension": dim, **row})
        hal = pd.DataFrame(records)
    return LetterTables(lex, sal, pd.DataFrame(rows), shares, scored_now, hal)


def partner_missing(
    frame: pd.DataFrame,
    kept: Sequence[bool],
    pair_cols: Sequence[str],
    group_col: str,
    groups: tuple[str, str],
) -> list[bool]:
    """Which kept documents lost their counterfactual partner.

    A pair (rows sharing ``pair_cols``) is whole when its kept documents of the compared
    ``groups`` are exactly one of each; every kept document of the compared groups in a pair
    that is not whole is marked, so it can be excluded and counted (:data:`NO_PARTNER`)
    instead of breaking the paired tests.
    """
    keep = pd.Series(list(kept), index=frame.index, dtype=bool)
    compared = frame[group_col].isin(groups)
    cells = frame[keep & compared].groupby(list(pair_cols))[group_col]
    whole = cells.transform(lambda s: sorted(s) == sorted(groups))
    marked = pd.Series(False, index=frame.index)
    marked[whole.index] = ~whole.astype(bool)
    return marked.tolist()
