"""Lexicon-category odds ratios between two groups of documents (Wan et al. 2023, Table 2).

Each document's whitespace tokens are matched against the stems of every category with the
authors' substring rule (:func:`analysis.letter_text.stem_hits`). The paper's score for a
category is the odds of a token being a hit in the first group's documents over the odds in
the second's, each cell smoothed by 0.001:

    OR = ((m + s) / (M - m + s)) / ((f + s) / (F - f + s))

with m, f the hits and M, F the tokens of each group. The paper gave no uncertainty. Here each
category also gets a 95 % percentile bootstrap interval and a permutation p, both with whole
documents as the unit: tokens of one letter are not independent draws, so the 2x2 token
table's tests and Woolf's interval claim far too much (on the released CLG letters Woolf's
interval for MASCULINE excludes 1 while relabelling letters gives p = 0.26). Counterfactual
pairs (same biography, swapped gender) are resampled as pairs and relabelled within the pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from biasim.analysis.stats.permutation import block_permutation_sums
from biasim.analysis.text.letter_text import normalize_letter, stem_hits, token_count

SMOOTHING = 0.001


def smoothed_odds_ratio(
    m: np.ndarray, big_m: np.ndarray, f: np.ndarray, big_f: np.ndarray, s: float = SMOOTHING
) -> np.ndarray:
    """The paper's smoothed odds ratio: m hits of big_m tokens against f hits of big_f."""
    return ((m + s) / (big_m - m + s)) / ((f + s) / (big_f - f + s))


def document_hits(
    texts: Sequence[str], lexicon: Mapping[str, Sequence[str]], normalize: bool = True
) -> pd.DataFrame:
    """Per document, its whitespace tokens and its stem hits per category.

    Args:
        texts: The documents.
        lexicon: Category -> stems.
        normalize: Turn the released files' ``<return>`` marks into line breaks first; off
            reproduces the authors' counts, which see them glued to neighbouring words.
    """
    prepared = [normalize_letter(t) if normalize else t for t in texts]
    frame = pd.DataFrame({"tokens": [token_count(t) for t in prepared]})
    for category, stems in lexicon.items():
        frame[category] = [stem_hits(t, stems) for t in prepared]
    return frame


def lexicon_odds_ratios(
    frame: pd.DataFrame,
    text_col: str,
    group_col: str,
    lexicon: Mapping[str, Sequence[str]],
    groups: tuple[str, str],
    pair_col: str | None = None,
    n_permutations: int = 9999,
    n_bootstrap: int = 2000,
    seed: int = 0,
    normalize: bool = True,
) -> pd.DataFrame:
    """One row per lexicon category: counts, the paper's odds ratio, interval and permutation p.

    Args:
        frame: One row per document.
        text_col: Column of the texts.
        group_col: Column of the group labels.
        lexicon: Category -> stems (substring-matched in lower-cased whitespace tokens).
        groups: ``(first, second)``; OR > 1 means the category is likelier in ``first``'s.
        pair_col: Column naming counterfactual pairs; relabelling then swaps within pairs.
        n_permutations: Relabellings of documents for the p-values.
        n_bootstrap: Resamples of documents (of pairs with ``pair_col``) for the intervals.
        seed: Seed of the relabellings and resamples.
        normalize: See :func:`document_hits`.

    Returns:
        Columns ``category, hits_<first>, tokens_<first>, hits_<second>, tokens_<second>,
        odds_ratio, ci_low, ci_high, p_permutation`` (p two-sided on |log OR|); all four NaN
        for a category with no hit in either group.

    Raises:
        ValueError: A group has no documents, or a pair does not hold one document of each.
    """
    first, second = groups
    part = frame[frame[group_col].isin(groups)].reset_index(drop=True)
    for g in groups:
        if not (part[group_col] == g).any():
            raise ValueError(f"group `{g}` of column `{group_col}` has no documents")
    code = (part[group_col] == second).to_numpy().astype(np.int64)
    if pair_col is None:
        block = np.zeros(len(part), dtype=np.int64)
    else:
        sizes = part.groupby(pair_col)[group_col].agg(lambda s: tuple(sorted(s)))
        if (sizes != tuple(sorted(groups))).any():
            raise ValueError(
                f"every `{pair_col}` must hold one `{first}` and one `{second}` document"
            )
        block = pd.factorize(part[pair_col])[0]
    hits = document_hits(part[text_col].astype(str).tolist(), lexicon, normalize)
    cats = list(lexicon)
    values = hits[["tokens", *cats]].to_numpy(dtype=np.int64)
    observed = np.stack([values[code == 0].sum(0), values[code == 1].sum(0)])
    obs_log = np.log(_ors(observed[None]))[0]
    extreme = np.zeros(len(cats), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for sums in block_permutation_sums(values, code, block, 2, n_permutations, rng):
        perm_log = np.log(_ors(sums))
        extreme += (np.abs(perm_log) >= np.abs(obs_log) - 1e-12).sum(0)
    low, high = np.percentile(
        _bootstrap_ors(values, code, block if pair_col else None, n_bootstrap, rng),
        [2.5, 97.5],
        axis=0,
    )
    rows = []
    for j, cat in enumerate(cats):
        m, big_m = observed[0, 1 + j], observed[0, 0]
        f, big_f = observed[1, 1 + j], observed[1, 0]
        if m == f == 0:
            # With no hit anywhere the smoothed ratio is only the groups' token ratio, and its
            # bootstrap interval can exclude 1: the category is not estimable, not a finding.
            obs_log[j] = low[j] = high[j] = np.nan
        rows.append(
            {
                "category": cat,
                f"hits_{first}": int(m),
                f"tokens_{first}": int(big_m),
                f"hits_{second}": int(f),
                f"tokens_{second}": int(big_f),
                "odds_ratio": float(np.exp(obs_log[j])),
                "ci_low": float(low[j]),
                "ci_high": float(high[j]),
                "p_permutation": (1 + extreme[j]) / (1 + n_permutations) if m + f else np.nan,
            }
        )
    return pd.DataFrame(rows)


def _ors(sums: np.ndarray) -> np.ndarray:
    """Smoothed odds ratios from per-group sums ``(rows, 2, 1 + categories)``."""
    tokens = sums[:, :, :1]
    hits = sums[:, :, 1:]
    return smoothed_odds_ratio(hits[:, 0], tokens[:, 0], hits[:, 1], tokens[:, 1])


def _bootstrap_ors(
    values: np.ndarray, code: np.ndarray, block: np.ndarray | None, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Odds ratios of ``n`` resamples ``(n, categories)``: documents drawn with replacement
    within each group, or whole pairs (``block``) drawn with replacement."""
    if block is None:
        sums = []
        for g in (0, 1):
            own = values[code == g]
            weights = rng.multinomial(len(own), np.full(len(own), 1 / len(own)), size=n)
            sums.append(weights @ own)
        return _ors(np.stack(sums, axis=1))
    pairs = np.unique(block)
    weights = rng.multinomial(len(pairs), np.full(len(pairs), 1 / len(pairs)), size=n)
    per_doc = weights[:, np.searchsorted(pairs, block)]
    sums = [per_doc[:, code == g] @ values[code == g] for g in (0, 1)]
    return _ors(np.stack(sums, axis=1))
