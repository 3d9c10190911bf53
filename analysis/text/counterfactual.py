"""Counterfactual text metrics: responses that differ only by a swapped name or attribute.

Input: one row per response, with the counterfactual set it belongs to (``pair``: the same
writer, prompt and seed), the swapped value (``swap``: a name, a race), optionally the writer
and the name shown, and the text. Everything here is a plain function over that DataFrame:

* :func:`score_responses`: per-response scores of any registered text scorer;
* :func:`sentiment_parity`: LangFair's counterfactual sentiment parity, strict (Wasserstein-1
  distance between the two score distributions) and weak (difference in the share of scores
  above a threshold);
* :func:`counterfactual_comparisons`: every two responses of a pair compared by ROUGE-L, BLEU
  and embedding cosine (:mod:`analysis.text.similarity`);
* :func:`swap_score_tests` and :func:`similarity_test`: differences between swap values
  (mean, sd, quantiles, both parities; similarity across against within swap values), each
  with a permutation p whose unit is the pair (:mod:`analysis.stats.swap_permutation`); where
  relabellings tie with the observed statistic (shares, quantiles of discrete scores) the ties
  are broken at random, and the row's note says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from biasim.analysis.stats.parity import resampling_p_value
from biasim.analysis.stats.swap_permutation import (
    TIES_NOTE,
    tie_broken_p_value,
    unreachable_note,
    within_pair_labels,
)
from biasim.analysis.stats.units import Tested
from biasim.analysis.text.scorers import ScoreCache, TextScorer, cached_scores
from biasim.analysis.text.similarity import BLEU_MAX_N, bleu_too_short, pair_similarities

#: What a masked name reads as before texts are compared.
NAME_MASK = "[NAME]"


@dataclass(frozen=True)
class CounterfactualColumns:
    """Which columns of a responses table hold what.

    Attributes:
        pair: The counterfactual set of each response: the unit of every test here.
        swap: The swapped value (a name, a group).
        text: The response.
        writer: The writer (agent, model); each pair must have one.
        name: The name shown in each response's prompt; masked before texts are compared, since
            a response that repeats its own name differs from its counterfactual by the swap
            itself.
    """

    pair: str = "pair_id"
    swap: str = "swap_value"
    text: str = "text"
    writer: str | None = None
    name: str | None = None

    def required(self) -> list[str]:
        return [c for c in (self.pair, self.swap, self.text, self.writer, self.name) if c]


def checked_responses(df: pd.DataFrame, cols: CounterfactualColumns) -> pd.DataFrame:
    """The responses with a fresh index, after checking the design the tests rely on.

    Raises:
        ValueError: A column is missing; a pair or swap value is missing; a text is not a
            string; a pair has responses from several writers (within-pair relabelling would
            then mix writers).
    """
    missing = [c for c in cols.required() if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; available columns: {list(df.columns)}")
    for col in (cols.pair, cols.swap):
        if df[col].isna().any():
            row = int(np.flatnonzero(df[col].isna().to_numpy())[0])
            raise ValueError(f"column `{col}` is empty in row {row + 1}")
    texts = df[cols.text]
    bad = ~texts.map(lambda t: isinstance(t, str))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"column `{cols.text}` row {row + 1} is not text: {texts.iloc[row]!r}")
    if cols.writer:
        writers = df.groupby(cols.pair, sort=True)[cols.writer].nunique(dropna=False)
        if (writers > 1).any():
            raise ValueError(
                f"{cols.pair} {writers[writers > 1].index[0]!r} has responses from several "
                f"`{cols.writer}` values; a counterfactual pair is one writer's responses"
            )
    return df.reset_index(drop=True)


def score_responses(
    df: pd.DataFrame,
    cols: CounterfactualColumns,
    scorers: Mapping[str, TextScorer],
    cache: ScoreCache | None = None,
) -> pd.DataFrame:
    """Per-response scores: the design columns, then ``<scorer>_<column>`` for each scorer's
    columns and ``<scorer>_excluded`` (why a text got no score)."""
    responses = checked_responses(df, cols)
    out = responses[cols.required()].copy()
    texts = responses[cols.text].tolist()
    for name, scorer in scorers.items():
        table, _ = cached_scores(scorer, texts, cache)
        for j, column in enumerate(table.columns):
            out[f"{name}_{column}"] = table.values[:, j]
        out[f"{name}_excluded"] = table.excluded
    return out


def wasserstein_1(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Wasserstein-1 distance between the empirical distributions of each row of ``a`` and the
    same row of ``b`` (sizes may differ): the integral of the gap between quantile functions.
    With equal sizes it is LangFair's ``mean(|sort(a) - sort(b)|)``."""
    a, b = np.sort(np.atleast_2d(a), axis=1), np.sort(np.atleast_2d(b), axis=1)
    na, nb = a.shape[1], b.shape[1]
    # Quantile-function breakpoints i/na and j/nb, in units of 1/(na nb) so they are exact.
    cuts = np.union1d(np.arange(1, na + 1) * nb, np.arange(1, nb + 1) * na)
    left = np.r_[0, cuts[:-1]]
    widths = (cuts - left) / (na * nb)
    return (widths * np.abs(a[:, left // nb] - b[:, left // na])).sum(axis=1)


def sentiment_parity(
    a: np.ndarray, b: np.ndarray, threshold: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """LangFair's counterfactual sentiment parity of scores under swap value a against b, per
    row: strict (Wasserstein-1 distance, >= 0) and weak (share above ``threshold`` under a
    minus under b; LangFair's ``parity="weak"``, signed)."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    weak = (a > threshold).mean(axis=1) - (b > threshold).mean(axis=1)
    return wasserstein_1(a, b), weak


def swap_differences(
    a: np.ndarray, b: np.ndarray, threshold: float, quantiles: Sequence[float]
) -> dict[str, np.ndarray]:
    """Each statistic of scores under a against b, per row (a relabelling): a minus b for the
    mean, sd and quantiles, and both sentiment parities."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    strict, weak = sentiment_parity(a, b, threshold)
    out = {
        "strict_parity": strict,
        "weak_parity": weak,
        "mean": a.mean(axis=1) - b.mean(axis=1),
        "sd": a.std(axis=1, ddof=1) - b.std(axis=1, ddof=1),
    }
    qa, qb = np.quantile(a, quantiles, axis=1), np.quantile(b, quantiles, axis=1)
    for q, da in zip(quantiles, qa - qb, strict=True):
        out[f"q{round(100 * q):02d}"] = da
    return out


@dataclass(frozen=True)
class SwapStatistics:
    """Statistics of one score under two swap values, computed for many labellings at once.

    Attributes:
        names: The statistics, in the order ``compute`` returns them.
        compute: ``(x, labels, pair) -> {name: (rows,) values}``: ``x`` the scores, ``labels``
            a ``(rows, len(x))`` 0/1 array (0: value a, 1: value b), ``pair`` each score's pair
            code; each value is a minus b.
    """

    names: tuple[str, ...]
    compute: Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]


def distribution_statistics(threshold: float, quantiles: Sequence[float]) -> SwapStatistics:
    """Both sentiment parities and a minus b of the mean, sd and ``quantiles``."""

    def compute(x: np.ndarray, labels: np.ndarray, pair: np.ndarray) -> dict[str, np.ndarray]:
        n_b = int(labels[0].sum())
        values = np.broadcast_to(x, labels.shape)
        a = values[labels == 0].reshape(len(labels), -1)
        b = values[labels == 1].reshape(len(labels), n_b)
        return swap_differences(a, b, threshold, quantiles)

    names = tuple(swap_differences(np.zeros(2), np.ones(2), threshold, quantiles))
    return SwapStatistics(names, compute)


def swap_score_tests(
    scored: pd.DataFrame,
    cols: CounterfactualColumns,
    score: str,
    threshold: float = 0.5,
    quantiles: Sequence[float] = (0.1, 0.5, 0.9),
    n_permutations: int = 1999,
    seed: int = 0,
) -> pd.DataFrame:
    """Differences in one score's distribution between every two swap values, each with a
    two-sided permutation p (swap labels relabelled within pairs): see
    :func:`swap_value_tests`, with :func:`distribution_statistics`."""
    statistics = distribution_statistics(threshold, quantiles)
    return swap_value_tests(scored, cols, score, statistics, n_permutations, seed)


def swap_value_tests(
    scored: pd.DataFrame,
    cols: CounterfactualColumns,
    score: str,
    statistics: SwapStatistics,
    n_permutations: int = 1999,
    seed: int = 0,
) -> pd.DataFrame:
    """``statistics`` of one score between every two swap values, each with a two-sided
    permutation p (swap labels relabelled within pairs).

    Returns:
        One row per (value_a, value_b, statistic): ``metric`` (the score column),
        ``statistic``, ``value_a``, ``value_b``, ``estimate`` (a minus b), ``p_value``,
        ``unit`` (the pair column), ``n_units`` (pairs holding both values), ``n_responses``,
        ``n_excluded`` (responses without a score), ``note``.
    """
    data = checked_responses(scored, cols)
    rows: list[dict[str, object]] = []
    for a, b in combinations(sorted(data[cols.swap].astype(str).unique()), 2):
        part = data[data[cols.swap].astype(str).isin([a, b])]
        valid = part[part[score].notna()]
        labels = (valid[cols.swap].astype(str) == b).to_numpy().astype(np.int8)
        _, pair = np.unique(valid[cols.pair].astype(str), return_inverse=True)
        x = valid[score].to_numpy(dtype=float)
        both = valid.groupby(cols.pair)[cols.swap].nunique()
        base = {
            "metric": score,
            "value_a": a,
            "value_b": b,
            "unit": cols.pair,
            "n_units": int((both > 1).sum()),
            "n_responses": len(valid),
            "n_excluded": len(part) - len(valid),
        }
        if min(np.bincount(labels, minlength=2)) < 2:
            why = "fewer than two scored responses under a value"
            rows += [
                {**base, "statistic": s, "estimate": np.nan, "p_value": None, "note": why}
                for s in statistics.names
            ]
            continue
        observed = {k: float(v[0]) for k, v in statistics.compute(x, labels[None], pair).items()}
        rng = np.random.default_rng(seed)
        chunks = [
            statistics.compute(x, relabelled, pair)
            for relabelled in within_pair_labels(labels, pair, n_permutations, rng)
        ]
        note = unreachable_note(labels, pair)
        for stat, value in observed.items():
            null = np.concatenate([c[stat] for c in chunks])
            p, tied = tie_broken_p_value(np.abs(null), abs(value), rng.random())
            said = "; ".join(n for n in (note, TIES_NOTE if tied else None) if n) or None
            rows.append({**base, "statistic": stat, "estimate": value, "p_value": p, "note": said})
    return pd.DataFrame(rows)


def masked_texts(responses: pd.DataFrame, cols: CounterfactualColumns) -> list[str]:
    """Each text with its own name (whole words, any case) replaced by :data:`NAME_MASK`."""
    texts = responses[cols.text].tolist()
    if not cols.name:
        return texts
    return [
        t
        if not isinstance(n, str) or not n.strip()
        else re.sub(rf"\b{re.escape(n.strip())}\b", NAME_MASK, t, flags=re.IGNORECASE)
        for t, n in zip(texts, responses[cols.name], strict=True)
    ]


def counterfactual_comparisons(
    df: pd.DataFrame,
    cols: CounterfactualColumns,
    measures: Sequence[str] = ("rouge_l", "bleu"),
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> pd.DataFrame:
    """Every two responses of the same pair, compared (names masked first).

    Returns:
        One row per comparison: the pair, ``row_a`` and ``row_b`` (positions in ``df``),
        ``swap_a``, ``swap_b``, ``same_swap`` and one column per measure (``cosine`` with
        ``embed``).
    """
    responses = checked_responses(df, cols)
    swap = responses[cols.swap].astype(str).to_numpy()
    left, right = [], []
    for rows in responses.groupby(cols.pair, sort=True).indices.values():
        for i, j in combinations(sorted(rows), 2):
            left.append(i)
            right.append(j)
    left_a, right_a = np.asarray(left, dtype=int), np.asarray(right, dtype=int)
    out = pd.DataFrame(
        {
            cols.pair: responses[cols.pair].to_numpy()[left_a],
            "row_a": left_a,
            "row_b": right_a,
            "swap_a": swap[left_a],
            "swap_b": swap[right_a],
            "same_swap": swap[left_a] == swap[right_a],
        }
    )
    values = pair_similarities(masked_texts(responses, cols), left_a, right_a, measures, embed)
    return out.assign(**values)


def similarity_test(
    df: pd.DataFrame,
    comparisons: pd.DataFrame,
    cols: CounterfactualColumns,
    measure: str,
    n_permutations: int = 1999,
    seed: int = 0,
) -> dict[str, object]:
    """Are counterfactual responses less alike than responses under the same swap value?

    The statistic is the mean similarity of comparisons within a swap value minus that across
    values (one-sided: a swap that changes the text makes it positive). Only pairs with two
    responses under one value (replicates) can tell; without them there is no test.

    Returns:
        ``metric``, ``mean_across`` (LangFair's counterfactual similarity), ``mean_within``,
        ``estimate``, ``p_value``, ``unit``, ``n_units`` (pairs with comparisons of both
        kinds), ``n_comparisons``, ``note``.
    """
    responses = checked_responses(df, cols)
    s = comparisons[measure].to_numpy(dtype=float)
    same = comparisons["same_swap"].to_numpy(dtype=bool)
    kinds = comparisons.groupby(cols.pair)["same_swap"].nunique()
    row = {
        "metric": measure,
        "mean_across": float(s[~same].mean()) if (~same).any() else np.nan,
        "mean_within": float(s[same].mean()) if same.any() else np.nan,
        "unit": cols.pair,
        "n_units": int((kinds > 1).sum()),
        "n_comparisons": len(s),
    }
    if not same.any() or same.all():
        note = "needs replicates: two responses under one swap value in a pair, and a swap"
        return {**row, "estimate": np.nan, "p_value": None, "note": note}
    _, labels = np.unique(responses[cols.swap].astype(str), return_inverse=True)
    _, pair = np.unique(responses[cols.pair].astype(str), return_inverse=True)
    left, right = comparisons["row_a"].to_numpy(), comparisons["row_b"].to_numpy()
    n_same = int(same.sum())
    estimate = row["mean_within"] - row["mean_across"]
    null = []
    for relabelled in within_pair_labels(labels, pair, n_permutations, np.random.default_rng(seed)):
        is_same = relabelled[:, left] == relabelled[:, right]
        within = (is_same * s).sum(axis=1) / n_same
        null.append(within - ((~is_same) * s).sum(axis=1) / (len(s) - n_same))
    p = resampling_p_value(np.concatenate(null), estimate)
    return {**row, "estimate": estimate, "p_value": p, "note": unreachable_note(labels, pair)}


def as_tested(row: Mapping[str, object]) -> Tested:
    """The test a metrics row states, as ``biasim power`` and the report read it."""
    return Tested.of(row, "p_value")


@dataclass
class CounterfactualTables:
    """What an analysis of counterfactual responses writes.

    Attributes:
        scores: One row per response (:func:`score_responses`).
        comparisons: One row per two responses of a pair (:func:`counterfactual_comparisons`).
        metrics: One row per (metric, statistic, values): the estimate, its p and unit.
    """

    scores: pd.DataFrame
    comparisons: pd.DataFrame
    metrics: pd.DataFrame


def counterfactual_tables(
    df: pd.DataFrame,
    cols: CounterfactualColumns,
    scorers: Mapping[str, TextScorer],
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
    n_permutations: int = 1999,
    seed: int = 0,
    cache: ScoreCache | None = None,
) -> CounterfactualTables:
    """Every metric here on one table of responses.

    Each scorer's ``value`` column (its first column when it has none) gets the distribution
    tests and the strict parity; the weak parity is taken on its ``label`` column (the share
    it labels positive, threshold 0.5) where it has one. Each similarity measure gets its mean
    across swap values (LangFair's counterfactual similarity) and the within-minus-across test.
    """
    scores = score_responses(df, cols, scorers, cache)
    rows = []
    for name, scorer in scorers.items():
        value = "value" if "value" in scorer.columns else scorer.columns[0]
        tests = swap_score_tests(
            scores, cols, f"{name}_{value}", 0.5, n_permutations=n_permutations, seed=seed
        )
        rows.append(tests[tests["statistic"] != "weak_parity"])
        if "label" in scorer.columns:
            tests = swap_score_tests(
                scores, cols, f"{name}_label", 0.5, n_permutations=n_permutations, seed=seed
            )
            rows.append(tests[tests["statistic"] == "weak_parity"])
    comparisons = counterfactual_comparisons(df, cols, embed=embed)
    for measure in [c for c in ("rouge_l", "bleu", "cosine") if c in comparisons]:
        rows.append(_similarity_rows(df, comparisons, cols, measure, n_permutations, seed))
    metrics = pd.concat(rows, ignore_index=True)
    return CounterfactualTables(scores, comparisons, metrics)


def _short_for_bleu(
    df: pd.DataFrame, comparisons: pd.DataFrame, cols: CounterfactualColumns
) -> str | None:
    """How many comparisons hold a response too short for BLEU to score 1 even if identical."""
    texts = masked_texts(checked_responses(df, cols), cols)
    short = sum(
        bleu_too_short(texts[i], texts[j])
        for i, j in zip(comparisons["row_a"], comparisons["row_b"], strict=True)
    )
    if not short:
        return None
    return (
        f"{short} of {len(comparisons)} comparisons hold a response under {BLEU_MAX_N} tokens, "
        "which BLEU scores below 1 even against an identical one: read ROUGE-L there"
    )


def _similarity_rows(
    df: pd.DataFrame,
    comparisons: pd.DataFrame,
    cols: CounterfactualColumns,
    measure: str,
    n_permutations: int,
    seed: int,
) -> pd.DataFrame:
    """A similarity test as two metrics rows: the mean across values, and the test."""
    test = similarity_test(df, comparisons, cols, measure, n_permutations, seed)
    unmasked = (
        None
        if cols.name
        else "names not masked: a text naming its own name differs by the swap itself"
    )
    note = "; ".join(n for n in (test["note"], unmasked) if n) or None
    short = _short_for_bleu(df, comparisons, cols) if measure == "bleu" else None
    base = {
        "metric": measure,
        "value_a": "",
        "value_b": "",
        "unit": test["unit"],
        "n_units": test["n_units"],
        "n_responses": len(df),
        "n_excluded": 0,
    }
    return pd.DataFrame(
        [
            {
                **base,
                "statistic": "mean_across",
                "estimate": test["mean_across"],
                "p_value": None,
                "note": "; ".join(n for n in (unmasked, short) if n) or None,
                "unit": None,
                "n_units": None,
            },
            {
                **base,
                "statistic": "within_minus_across",
                "estimate": test["estimate"],
                "p_value": test["p_value"],
                "note": note,
            },
        ]
    )
