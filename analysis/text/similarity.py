"""How alike two texts are: ROUGE-L, BLEU and embedding cosine, as LangFair 0.8 defines them.

These are the similarity measures of counterfactual outputs (LangFair's ``RougelSimilarity``,
``BleuSimilarity``, ``CosineSimilarity``; Bouchard 2024), defined once here for any two texts:

* ROUGE-L: the F-measure of the longest common subsequence, Porter-stemmed tokens
  (``rouge_score``'s ``RougeScorer(["rougeL"], use_stemmer=True)``); symmetric.
* BLEU: NLTK's ``sentence_bleu`` with Chen & Cherry's smoothing method 1, taken both ways
  (each text as the reference of the other) and the smaller kept, on lowercased tokens.
* cosine: ``a . b / (|a| |b|)`` of two sentence embeddings.

One difference is forced: LangFair tokenizes with ``nltk.word_tokenize``, whose sentence
splitter reads the trained Punkt tables (``punkt_tab``), a data download that biasim never makes.
Here sentences are split by Punkt without trained tables, then words by the same Treebank
tokenizer, so the two agree on every text without abbreviations; after an abbreviation
("Dr. Smith") the untrained splitter starts a new sentence and ``dr.`` becomes ``dr`` ``.``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np


@cache
def _splitters():
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """NLTK's ``word_tokenize`` with an untrained Punkt sentence splitter (no data download)."""
    sentences, words = _splitters()
    return [token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)]


@cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(a: str, b: str) -> float:
    """ROUGE-L F-measure of two texts (stemmed tokens)."""
    return float(_rouge().score(a, b)["rougeL"].fmeasure)


#: BLEU's longest n-gram: two texts with fewer tokens share no 4-gram, so even identical ones
#: score below 1 ("Yes." is two tokens: 0.316), as NLTK and LangFair define it.
BLEU_MAX_N = 4


def bleu_too_short(a: str, b: str) -> bool:
    """Whether either text has fewer tokens than BLEU's longest n-gram (see :data:`BLEU_MAX_N`)."""
    return min(len(word_tokens(a.lower())), len(word_tokens(b.lower()))) < BLEU_MAX_N


def bleu(a: str, b: str) -> float:
    """The smaller of the two sentence BLEUs (each text the other's reference), smoothed."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    smoothing = SmoothingFunction().method1
    ta, tb = word_tokens(a.lower()), word_tokens(b.lower())
    return float(
        min(
            sentence_bleu([ta], tb, smoothing_function=smoothing),
            sentence_bleu([tb], ta, smoothing_function=smoothing),
        )
    )


def cosine_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``x`` with the same row of ``y``."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return np.einsum("ij,ij->i", x, y) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


#: The text-pair similarity measures by the name their column gets.
PAIR_MEASURES: dict[str, Callable[[str, str], float]] = {"rouge_l": rouge_l, "bleu": bleu}


def pair_similarities(
    texts: Sequence[str],
    left: np.ndarray,
    right: np.ndarray,
    measures: Sequence[str] = ("rouge_l", "bleu"),
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Each measure of ``texts[left[k]]`` against ``texts[right[k]]``.

    Args:
        texts: The texts.
        left, right: Row positions of the two texts of each comparison.
        measures: Names in :data:`PAIR_MEASURES`.
        embed: Texts -> embedding rows (e.g. ``SentenceEmbedder.embed``); adds ``cosine``.

    Returns:
        Column name -> one value per comparison.
    """
    unknown = [m for m in measures if m not in PAIR_MEASURES]
    if unknown:
        raise ValueError(f"unknown similarity measure(s) {unknown}: {sorted(PAIR_MEASURES)}")
    out = {
        name: np.array(
            [PAIR_MEASURES[name](texts[i], texts[j]) for i, j in zip(left, right, strict=True)],
            dtype=float,
        )
        for name in measures
    }
    if embed is not None:
        vectors = np.asarray(embed(list(texts)), dtype=float)
        out["cosine"] = cosine_rows(vectors[np.asarray(left)], vectors[np.asarray(right)])
    return out
