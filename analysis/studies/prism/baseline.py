"""PRISM's no-gender-signal baseline: what a dimension scores when the masked LM's word
preferences carry nothing about which words are feminine and which masculine.

A PRISM score is not centred on 0. With unbalanced lists (the paper's role lists hold 7
feminine and 53 masculine words) the alpha filter often keeps no feminine word, and the
fallback ``2 * mean rank(M)`` then pushes the score up: a token whose word ranking is
unrelated to gender scores ``(k + 1) * (P(no F kept) - P(no M kept))`` on average
(:func:`expected_no_signal_score`, +2.07 for 7/53 at alpha 23). And a masked LM prefers some
words in every context (frequent ones, or any word at random for an untrained model), so a
corpus's mean score also moves with which words happen to be on which list.

:func:`label_permutation_null` measures both for the given model, word lists and texts: the
pooled words of a dimension are dealt at random to the feminine and masculine sides (same
sizes, duplicates kept together with their entries), the texts' mean score is recomputed
under each dealing, and the observed labelling is compared with them. The unit of
exchangeability is the word's gender label: under H0 (the model's preferences among the
words are unrelated to their labels) the observed dealing is one draw among the permuted
ones, so the test is exact whatever the texts; one dealing is applied to every token of every
text, as the model's preferences are shared across them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from biasim.analysis.studies.prism.score import WordLists, rank_plan, token_scores

#: Random dealings of the word labels (199 + the observed one give p in steps of 1/200).
PERMUTATIONS = 199
#: Level at which a side is called masculine or feminine beyond the baseline.
LEVEL = 0.05
WITHIN = "within"


def expected_no_signal_score(n_fem: int, n_mas: int, alpha: float) -> float:
    """A token's expected score when its word ranking is unrelated to gender.

    With distinct words and no ties the ranks 1..k of the kept entries are fixed and the
    labels a random draw: both sides kept average ``(k+1)/2`` each (difference 0 on average),
    one side missing gives the fallback ``±2 * (k+1)/2``.

    Args:
        n_fem: Words on the feminine list.
        n_mas: Words on the masculine list.
        alpha: Percentage of pooled entries kept.
    """
    total = n_fem + n_mas
    keep = math.ceil(total * alpha / 100.0)
    no_fem = math.comb(n_mas, keep) / math.comb(total, keep)
    no_mas = math.comb(n_fem, keep) / math.comb(total, keep)
    return (keep + 1) * (no_fem - no_mas)


def dealt(lists: WordLists, rng: np.random.Generator) -> WordLists:
    """The pooled entries of ``lists`` dealt at random to the two sides, sizes kept."""
    pooled = list(lists.pooled)
    order = rng.permutation(len(pooled))
    shuffled = tuple(pooled[i] for i in order)
    return WordLists(shuffled[: len(lists.fem)], shuffled[len(lists.fem) :])


@dataclass(frozen=True)
class SideNull:
    """One side's (e.g. the postings') mean score against its label-permutation null.

    Attributes:
        observed: Mean score of the side's texts with the true labels.
        baseline: Mean of the null (the score with no gender signal).
        low: 2.5th percentile of the null.
        high: 97.5th percentile of the null.
        p: Two-sided permutation p of ``observed`` against the null, ``(1 + hits) / (R + 1)``.
        texts: Texts the null was computed on.
    """

    observed: float
    baseline: float
    low: float
    high: float
    p: float
    texts: int

    @property
    def verdict(self) -> str:
        """``masculine`` / ``feminine`` beyond the baseline at :data:`LEVEL`, else within."""
        if not self.p < LEVEL:
            return WITHIN
        return "masculine" if self.observed > self.baseline else "feminine"


def text_means(token_values: np.ndarray, owner: np.ndarray, n_texts: int) -> np.ndarray:
    """Mean token score per text (NaN for a text with no token)."""
    sums = np.bincount(owner, weights=token_values, minlength=n_texts)
    counts = np.bincount(owner, minlength=n_texts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def label_permutation_null(
    probs: np.ndarray,
    owner: np.ndarray,
    side_of_text: Sequence[str],
    lists: WordLists,
    column_of: Mapping[str, int],
    alpha: float,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> dict[str, SideNull]:
    """Each side's mean text score against random dealings of one dimension's word labels.

    Args:
        probs: ``(n_tokens, n_columns)`` probabilities at each masked token.
        owner: ``(n_tokens,)`` index of the text each token belongs to.
        side_of_text: The side (e.g. ``posting``) of each text.
        lists: The dimension's word lists.
        column_of: Word -> column of ``probs``.
        alpha: Percentage of pooled entries kept.
        permutations: Random dealings.
        seed: Seed of the dealings.

    Returns:
        Side -> its :class:`SideNull`.
    """
    sides = np.asarray(side_of_text)
    n_texts = len(sides)
    rng = np.random.default_rng(seed)

    def side_means(word_lists: WordLists) -> dict[str, float]:
        tokens = token_scores(probs, rank_plan(word_lists, column_of, alpha))
        scores = text_means(tokens, owner, n_texts)
        return {s: float(np.nanmean(scores[sides == s])) for s in dict.fromkeys(side_of_text)}

    observed = side_means(lists)
    null = [side_means(dealt(lists, rng)) for _ in range(permutations)]
    out: dict[str, SideNull] = {}
    for side, value in observed.items():
        draws = np.array([n[side] for n in null])
        centre = float(draws.mean())
        hits = int((np.abs(draws - centre) >= abs(value - centre) - 1e-12).sum())
        out[side] = SideNull(
            observed=value,
            baseline=centre,
            low=float(np.percentile(draws, 2.5)),
            high=float(np.percentile(draws, 97.5)),
            p=(1 + hits) / (permutations + 1),
            texts=int((sides == side).sum()),
        )
    return out
