"""Noun and adjective odds ratios between two groups of documents (Wan et al. 2023, Table 3).

spaCy tags every token; nouns and adjectives are lower-cased and stripped of ``,./?`` as the
authors'. A word's odds ratio is its odds among the first group's words of that part of speech
over its odds among the second's, (m / f) / ((M - m) / (F - f)), for words seen at least
``threshold`` times in BOTH groups (the authors' command-line default is 10); the ``top_k``
highest above 1 are the first group's salient words, the ``top_k`` lowest below 1 the second's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd

from biasim.analysis.text.letter_text import normalize_letter

PARTS_OF_SPEECH = ("NOUN", "ADJ")


def pos_counts(
    texts: Sequence[str], nlp: Any, parts: Sequence[str] = PARTS_OF_SPEECH, batch_size: int = 64
) -> dict[str, Counter]:
    """Word counts per part of speech over ``texts``, words cleaned as the authors'."""
    counts: dict[str, Counter] = {p: Counter() for p in parts}
    docs = nlp.pipe((normalize_letter(t) for t in texts), batch_size=batch_size)
    for doc in docs:
        for token in doc:
            if token.pos_ in counts:
                word = token.text.lower().strip(",./?")
                if word:
                    counts[token.pos_][word] += 1
    return counts


def salient_words(
    frame: pd.DataFrame,
    text_col: str,
    group_col: str,
    groups: tuple[str, str],
    nlp: Any,
    threshold: int = 10,
    top_k: int = 50,
) -> pd.DataFrame:
    """The top and bottom ``top_k`` nouns and adjectives by odds ratio.

    Args:
        frame: One row per document.
        text_col: Column of the texts.
        group_col: Column of the group labels.
        groups: ``(first, second)``; OR > 1 means the word is likelier in ``first``'s documents.
        nlp: A spaCy pipeline with a tagger (:func:`analysis.style_scorers.load_spacy`).
        threshold: Minimum count of a word in each group.
        top_k: Words kept on each side.

    Returns:
        Columns ``pos, side, rank, word, count_<first>, count_<second>, odds_ratio``; ``side``
        names the group the word leans to.

    Raises:
        ValueError: A group has no documents.
    """
    counts = {}
    for g in groups:
        texts = frame.loc[frame[group_col] == g, text_col].astype(str).tolist()
        if not texts:
            raise ValueError(f"group `{g}` of column `{group_col}` has no documents")
        counts[g] = pos_counts(texts, nlp)
    first, second = groups
    rows = []
    for pos in PARTS_OF_SPEECH:
        a, b = counts[first][pos], counts[second][pos]
        big_a, big_b = sum(a.values()), sum(b.values())
        # A word that is every word of its part of speech in a group has no odds (0 / 0).
        kept = [
            w
            for w in a
            if a[w] >= threshold and b[w] >= threshold and a[w] < big_a and b[w] < big_b
        ]
        ratio = {w: (a[w] / b[w]) / ((big_a - a[w]) / (big_b - b[w])) for w in kept}
        ranked = sorted(kept, key=lambda w: (-ratio[w], w))
        # A side holds only words leaning its way (with few words the two ends would overlap).
        sides = {
            first: [w for w in ranked if ratio[w] > 1][:top_k],
            second: [w for w in ranked[::-1] if ratio[w] < 1][:top_k],
        }
        for side, words in sides.items():
            for rank, w in enumerate(words, start=1):
                rows.append(
                    {
                        "pos": pos,
                        "side": side,
                        "rank": rank,
                        "word": w,
                        f"count_{first}": a[w],
                        f"count_{second}": b[w],
                        "odds_ratio": ratio[w],
                    }
                )
    columns = ["pos", "side", "rank", "word", f"count_{first}", f"count_{second}", "odds_ratio"]
    return pd.DataFrame(rows, columns=columns)
