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
pairs (same biography, swapped gender) are resampled as pairs and relabelled within the pair;
letters sharing a unit (``unit_col``: a writer, a name) are relabelled and resampled by unit,
since one writer's letters share its habits (with 5 writers x 12 letters per gender, relabelling
letters rejects 23-39 % under the null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from biasim.analysis.stats.clusters import bootstrap_group_sums, permuted_group_sums, unit_layout
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
    unit_col: str | None = None,
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
        unit_col: Column of the unit documents share (a writer, a name): units lying in one
            group are relabelled and resampled whole, units spanning both are relabelled
            within and resampled whole (``analysis.stats.clusters``). Not with ``pair_col``
            (the pair is then the unit).

    Returns:
        Columns ``category, hits_<first>, tokens_<first>, hits_<second>, tokens_<second>,
        odds_ratio, ci_low, ci_high, p_permutation`` (p two-sided on |log OR|; all four NaN
        for a category with no hit in either group), ``unit``, ``n_units`` and ``unit_min_p``
        (the smallest two-sided p these units could give; 0 when not bounded).

    Raises:
        ValueError: A group has no documents, a pair does not hold one document of each, or
            the units mix the nested and crossed layouts.
    """
    part = frame[frame[group_col].isin(groups)].reset_index(drop=True)
    code = _group_codes(part, group_col, groups)
    units = _units(part, group_col, groups, pair_col, unit_col)
    layout = unit_layout(code, units)
    hits = document_hits(part[text_col].astype(str).tolist(), lexicon, normalize)
    cats = list(lexicon)
    values = hits[["tokens", *cats]].to_numpy(dtype=np.int64)
    rng = np.random.default_rng(seed)
    observed, stream = permuted_group_sums(values, code, layout, n_permutations, rng)
    obs_log = np.log(_ors(observed[None]))[0]
    extreme = np.zeros(len(cats), dtype=np.int64)
    for sums in stream:
        perm_log = np.log(_ors(sums))
        extreme += (np.abs(perm_log) >= np.abs(obs_log) - 1e-12).sum(0)
    resampled = _ors(bootstrap_group_sums(values, code, layout, n_bootstrap, rng))
    low, high = np.percentile(resampled, [2.5, 97.5], axis=0)
    p = (1 + extreme) / (1 + n_permutations)
    unit = pair_col or unit_col or "letter"
    return _lexicon_rows(cats, observed, obs_log, low, high, p, groups).assign(
        unit=unit, n_units=layout.n_units, unit_min_p=2 * layout.min_p
    )


def _group_codes(part: pd.DataFrame, group_col: str, groups: tuple[str, str]) -> np.ndarray:
    """0 for the first group's documents, 1 for the second's; both must have some."""
    for g in groups:
        if not (part[group_col] == g).any():
            raise ValueError(f"group `{g}` of column `{group_col}` has no documents")
    return (part[group_col] == groups[1]).to_numpy().astype(np.int64)


def _units(
    part: pd.DataFrame,
    group_col: str,
    groups: tuple[str, str],
    pair_col: str | None,
    unit_col: str | None,
) -> pd.Series | None:
    """The unit of each document: its pair (one document of each group), its ``unit_col``
    value, or None (each document its own unit)."""
    if pair_col is not None and unit_col is not None:
        raise ValueError(
            f"`{pair_col}` pairs the documents, so the pair is the unit; a unit column "
            f"(`{unit_col}`) cannot be relabelled within pairs as well"
        )
    if pair_col is None:
        return None if unit_col is None else part[unit_col]
    sizes = part.groupby(pair_col)[group_col].agg(lambda s: tuple(sorted(s)))
    if (sizes != tuple(sorted(groups))).any():
        raise ValueError(
            f"every `{pair_col}` must hold one `{groups[0]}` and one `{groups[1]}` document"
        )
    return part[pair_col]


def _lexicon_rows(
    cats: list[str],
    observed: np.ndarray,
    obs_log: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    p: np.ndarray,
    groups: tuple[str, str],
) -> pd.DataFrame:
    """One row per category from the observed sums ``(2, 1 + categories)`` and the tests."""
    first, second = groups
    rows = []
    for j, cat in enumerate(cats):
        m, big_m = observed[0, 1 + j], observed[0, 0]
        f, big_f = observed[1, 1 + j], observed[1, 0]
        estimable = bool(m + f)
        # With no hit anywhere the smoothed ratio is only the groups' token ratio, and its
        # bootstrap interval can exclude 1: the category is not estimable, not a finding.
        rows.append(
            {
                "category": cat,
                f"hits_{first}": int(m),
                f"tokens_{first}": int(big_m),
                f"hits_{second}": int(f),
                f"tokens_{second}": int(big_f),
                "odds_ratio": float(np.exp(obs_log[j])) if estimable else np.nan,
                "ci_low": float(low[j]) if estimable else np.nan,
                "ci_high": float(high[j]) if estimable else np.nan,
                "p_permutation": float(p[j]) if estimable else np.nan,
            }
        )
    return pd.DataFrame(rows)


def _ors(sums: np.ndarray) -> np.ndarray:
    """Smoothed odds ratios from per-group sums ``(rows, 2, 1 + categories)``."""
    tokens = sums[:, :, :1]
    hits = sums[:, :, 1:]
    return smoothed_odds_ratio(hits[:, 0], tokens[:, 0], hits[:, 1], tokens[:, 1])
