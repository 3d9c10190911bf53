"""Counterfactual name swaps: the same document read under two names, compared pair by pair.

When a reader sees one letter once signed by a name typical of one group and once by a name
typical of another, everything but the name is held fixed, so a difference in outcome is the
name's effect. The pairs are dependent (a strong letter is accepted under both names), so the
comparison uses only the discordant pairs: McNemar's exact test, i.e. a two-sided binomial test
of "outcome under ``a`` only" against "under ``b`` only" with probability 1/2.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats import multiple


def _require_columns(df: pd.DataFrame, cols: Sequence[str]) -> None:
    missing = [c for c in dict.fromkeys(cols) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; available columns: {list(df.columns)}")


def _readings(
    paired: pd.DataFrame, variant_col: str, outcome_col: str, unit_col: str
) -> pd.DataFrame:
    """Rows with an outcome, checked: boolean outcomes, one reading per (document, variant)."""
    _require_columns(paired, [variant_col, outcome_col, unit_col])
    if paired[[unit_col, variant_col]].isna().any().any():
        raise ValueError(f"`{unit_col}` and `{variant_col}` must not have missing values")
    if paired.duplicated([unit_col, variant_col]).any():
        dup = paired[paired.duplicated([unit_col, variant_col])].iloc[0]
        raise ValueError(
            f"{unit_col} {dup[unit_col]!r} has several readings under {dup[variant_col]!r}; "
            "aggregate or deduplicate them first"
        )
    # A missing outcome (an invalid answer) is no reading: its document cannot be paired.
    data = paired.loc[paired[outcome_col].notna(), [unit_col, variant_col, outcome_col]]
    outcome = data[outcome_col]
    if outcome.dtype != bool and not outcome.isin([0, 1]).all():
        bad = outcome[~outcome.isin([0, 1])].iloc[0]
        raise ValueError(
            f"`{outcome_col}` must be boolean (or 0/1), found {bad!r}; compare it with the "
            "positive label first"
        )
    return data.assign(**{outcome_col: outcome.to_numpy().astype(bool)})


def _pair_test(
    data: pd.DataFrame,
    paired: pd.DataFrame,
    variant_col: str,
    outcome_col: str,
    unit_col: str,
    a: object,
    b: object,
) -> dict[str, object]:
    part = data[data[variant_col].isin([a, b])]
    codes, documents = pd.factorize(part[unit_col])
    under_a = (part[variant_col] == a).to_numpy()
    outcome = part[outcome_col].to_numpy(dtype=bool)
    # Per document: read under a / under b, and the outcome of each reading.
    read = np.zeros((2, len(documents)), dtype=bool)
    got = np.zeros((2, len(documents)), dtype=bool)
    for side, mask in ((0, under_a), (1, ~under_a)):
        read[side, codes[mask]] = True
        got[side, codes[mask]] = outcome[mask]
    complete = read.all(axis=0)
    # Documents read under a or b at all (even with a missing outcome) but not paired.
    named = paired.loc[paired[variant_col].isin([a, b]), unit_col].nunique()
    excluded = int(named - complete.sum())
    x, y = got[0, complete], got[1, complete]
    n = x.size
    only_a, only_b = int(np.sum(x & ~y)), int(np.sum(~x & y))
    discordant = only_a + only_b
    if n == 0:
        p = np.nan
    elif discordant == 0:
        p = 1.0
    else:
        p = float(stats.binomtest(only_a, discordant, 0.5).pvalue)
    rate_a = float(x.mean()) if n else np.nan
    rate_b = float(y.mean()) if n else np.nan
    return {
        "a": a,
        "b": b,
        "n_pairs": n,
        "both": int(np.sum(x & y)),
        "only_a": only_a,
        "only_b": only_b,
        "neither": int(np.sum(~x & ~y)),
        "flip_rate": discordant / n if n else np.nan,
        "rate_a": rate_a,
        "rate_b": rate_b,
        "difference": rate_a - rate_b,
        "p_value": p,
        "excluded": excluded,
    }


def counterfactual_test(
    paired: pd.DataFrame,
    *,
    variant_col: str = "variant",
    outcome_col: str = "outcome",
    unit_col: str = "document",
    a: object = None,
    b: object = None,
) -> dict[str, object]:
    """McNemar's exact test of one document read under two name variants.

    Only documents with a reading under both ``a`` and ``b`` are pairs; a document read under
    one of them only (or whose other reading has no outcome) is counted in ``excluded``, never
    dropped silently. Readings under other variants are ignored.

    Args:
        paired: One row per (document, variant) reading.
        variant_col: Column naming the variant (e.g. the name shown).
        outcome_col: Boolean (or 0/1) outcome; missing means no valid reading.
        unit_col: Column identifying the document.
        a: First variant; with ``b`` None too, the two variants present, sorted.
        b: Second variant.

    Returns:
        ``a``, ``b``, ``n_pairs``, ``both``, ``only_a`` (outcome under ``a`` only), ``only_b``,
        ``neither``, ``flip_rate`` (``(only_a + only_b) / n_pairs``), ``rate_a``, ``rate_b``,
        ``difference`` (``rate_a - rate_b``), ``p_value`` (two-sided binomial test of
        ``only_a`` out of the discordant pairs with probability 1/2; 1 without discordant
        pairs, NaN without pairs) and ``excluded``.

    Raises:
        ValueError: A column is missing, a document has two readings under one variant, an
            outcome is not boolean, or ``a``/``b`` are not given and there are not exactly
            two variants.
    """
    data = _readings(paired, variant_col, outcome_col, unit_col)
    if a is None and b is None:
        variants = sorted(paired[variant_col].unique())
        if len(variants) != 2:
            raise ValueError(
                f"found {len(variants)} variants {variants}; name `a` and `b`, or use "
                "counterfactual_table for every pair"
            )
        a, b = variants
    if a is None or b is None or a == b:
        raise ValueError("give two different variants `a` and `b` (or neither)")
    return _pair_test(data, paired, variant_col, outcome_col, unit_col, a, b)


def counterfactual_table(
    paired: pd.DataFrame,
    variant_col: str = "variant",
    *,
    outcome_col: str = "outcome",
    unit_col: str = "document",
    variants: Sequence[object] | None = None,
    adjust: str = "holm",
) -> pd.DataFrame:
    """:func:`counterfactual_test` for every pair of variants, adjusted as one family.

    Args:
        paired: One row per (document, variant) reading.
        variant_col: Column naming the variant.
        outcome_col: Boolean (or 0/1) outcome; missing means no valid reading.
        unit_col: Column identifying the document.
        variants: Variants to compare, in this order (default: all present, sorted); each pair
            ``(a, b)`` has ``a`` before ``b``.
        adjust: ``holm``, ``bh`` or ``none`` (``analysis.multiple``), over the pairs with a
            p-value (a pair without paired documents has NaN and is no family member).

    Returns:
        One row per pair with the fields of :func:`counterfactual_test` and ``p_adjusted``.
    """
    data = _readings(paired, variant_col, outcome_col, unit_col)
    names = list(variants) if variants is not None else sorted(paired[variant_col].unique())
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"need at least two distinct variants, got {names}")
    rows = [
        _pair_test(data, paired, variant_col, outcome_col, unit_col, a, b)
        for a, b in combinations(names, 2)
    ]
    out = pd.DataFrame(rows)
    p = out["p_value"].to_numpy(dtype=float)
    adjusted = np.full(p.shape, np.nan)
    finite = ~np.isnan(p)
    adjusted[finite] = multiple.adjust(p[finite], adjust)
    out["p_adjusted"] = adjusted
    return out
