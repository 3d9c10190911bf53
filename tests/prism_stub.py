"""A masked LM whose probabilities are set by hand, and PRISM's equations written out plainly.

The plain version follows the paper's equations and the authors' notebook step by step (a
Python sort, a word -> rank dict, list comprehensions), independently of the vectorised code.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence

import numpy as np


class StubMaskedLM:
    """Whitespace/punctuation tokens; probabilities from a table or from a seeded draw.

    Args:
        vocab: The vocabulary (word-list words must be in it).
        table: Masked text -> {word: probability}; words not named get ``floor``.
        floor: Probability of a word a table row does not name.
    """

    def __init__(
        self,
        vocab: Sequence[str],
        table: dict[str, dict[str, float]] | None = None,
        floor: float = 1e-6,
    ) -> None:
        self.vocab = list(vocab)
        self.table = table or {}
        self.floor = floor
        self.calls: list[int] = []

    def identity(self) -> dict:
        return {"model": "stub", "vocab": len(self.vocab)}

    def tokenize(self, sentence: str) -> list[str]:
        return re.findall(r"\w+|[^\w\s]", sentence)

    def masked_text(self, tokens: Sequence[str], index: int) -> str:
        return " ".join([*tokens[:index], "[MASK]", *tokens[index + 1 :]])

    def vocab_ids(self, words: Sequence[str]) -> list[int]:
        return [self.vocab.index(w) for w in words]

    def row(self, text: str) -> np.ndarray:
        """The probabilities of the whole vocabulary at the mask of ``text``."""
        if text in self.table:
            probs = np.full(len(self.vocab), self.floor)
            for word, p in self.table[text].items():
                probs[self.vocab.index(word)] = p
            return probs
        seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        return np.random.default_rng(seed).dirichlet(np.ones(len(self.vocab)))

    def mask_probabilities(
        self, texts: Sequence[str], ids: Sequence[int], progress: Callable | None = None
    ) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.array([self.row(t)[list(ids)] for t in texts], dtype=np.float32)
        if progress:
            progress(len(texts))
        return out.reshape(len(texts), len(ids))


def plain_token_score(
    fem: Sequence[str], mas: Sequence[str], prob: dict[str, float], alpha: float
) -> float:
    """S(w_i) for one mask, exactly as the authors' notebook computes it."""
    pooled = [(w, prob[w]) for w in fem] + [(w, prob[w]) for w in mas]
    ranked = sorted(pooled, key=lambda pair: pair[1], reverse=True)
    kept = ranked[: int(np.ceil(len(ranked) * (alpha / 100.0)))]
    rank = {word: r + 1 for r, (word, _) in enumerate(kept)}

    def mean_rank(words: Sequence[str]) -> float | None:
        ranks = [rank[w] for w, _ in kept if w in words]
        return sum(ranks) / len(ranks) if ranks else None

    mean_fem, mean_mas = mean_rank(fem), mean_rank(mas)
    if mean_fem is None:
        return 2 * mean_mas
    if mean_mas is None:
        return -2 * mean_fem
    return mean_fem - mean_mas


def plain_rank_sum_z(fem_probs: Sequence[float], mas_probs: Sequence[float]) -> float:
    """Theorem 1: the masculine rank sum (1 = most probable) standardised under H0."""
    pooled = list(fem_probs) + list(mas_probs)
    order = sorted(range(len(pooled)), key=lambda i: -pooled[i])
    rank = [0.0] * len(pooled)
    for r, i in enumerate(order):
        rank[i] = r + 1
    n_f, n_m = len(fem_probs), len(mas_probs)
    total = sum(rank[n_f:])
    return (total - n_m * (n_f + n_m + 1) / 2) / math.sqrt(n_f * n_m * (n_f + n_m + 1) / 12)
