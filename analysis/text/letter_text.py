"""Letters into the units Wan et al. (2023) score: sentences, and whitespace tokens for stems.

The authors' code (uclanlp/biases-llm-reference-letters) splits a letter for the style
classifiers on "." alone, skips pieces of 800 characters or more and classifies each piece with
"." appended; for hallucination it splits on any of ".?!". The released letters encode line
breaks as ``<return>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_SENTENCE_CHARS = 800
RETURN_MARK = "<return>"


def normalize_letter(text: str) -> str:
    """The letter with the released files' ``<return>`` marks back as line breaks."""
    return text.replace(RETURN_MARK, "\n")


def style_sentences(text: str, keep_empty: bool = False) -> list[str]:
    """The sentences the style classifiers score, as the authors' ``classifier.py``.

    Args:
        text: A letter.
        keep_empty: Keep whitespace-only pieces (the authors classify the lone "." left after a
            letter's final full stop); off by default because it scores no text.

    Returns:
        Each piece of ``text.split(".")`` shorter than 800 characters, with "." appended.
    """
    pieces = normalize_letter(text).split(".")
    return [
        p.strip() + "." for p in pieces if len(p) < MAX_SENTENCE_CHARS and (keep_empty or p.strip())
    ]


def nli_sentences(text: str) -> list[str]:
    """The hypotheses of sentence-level NLI: the letter split on ".", "?" or "!", non-empty."""
    return [p.strip() for p in re.split(r"[.?!]", normalize_letter(text)) if p.strip()]


def stem_hits(text: str, stems: Iterable[str]) -> int:
    """How many (whitespace token, stem) pairs have the stem inside the lower-cased token.

    This is the authors' ``biases_string_matching.py`` count: a token holding two stems
    counts twice, a stem twice in one token once. ``<return>`` marks are left as they are (the
    authors' count sees them); normalise first to count words across line breaks.
    """
    tokens = text.lower().split()
    stems = [s.lower() for s in stems]
    return sum(1 for token in tokens for stem in stems if stem in token)


def token_count(text: str) -> int:
    """Whitespace tokens of ``text`` (the denominators of the lexicon odds ratio)."""
    return len(text.split())


NOT_RECOMMENDING = "no 'recommend' (not a recommendation letter)"
NOT_RECOMMENDING_AUTHORS = "no ' recommend ' (the authors' rule)"
EMPTY = "empty text"
LONG_RUN = "a run of 800 characters without a full stop"

#: Success rules: ``authors`` as the authors' code applies it to CBG letters (the word
#: " recommend " with a space each side, so "recommended" or "recommend." fail), ``recommend``
#: as Appendix B.2 words it (any "recommend"), ``none`` keeps every non-empty letter (the
#: paper analysed its 120 CLG letters in full).
SUCCESS_RULES = ("authors", "recommend", "none")


def generation_failure(text: str, rule: str = "recommend") -> str | None:
    """Why a generated letter fails the success rule ``rule`` (Appendix B.2), or None.

    A success is non-empty, has no long continuous string (the authors' code: no piece
    between full stops of 800 characters or more) and contains "recommend" as ``rule`` reads
    it (see :data:`SUCCESS_RULES`).
    """
    if not text.strip():
        return EMPTY
    if rule == "none":
        return None
    if any(len(p) >= MAX_SENTENCE_CHARS for p in normalize_letter(text).split(".")):
        return LONG_RUN
    if rule == "authors":
        return None if " recommend " in text else NOT_RECOMMENDING_AUTHORS
    if "recommend" not in text.lower():
        return NOT_RECOMMENDING
    return None
