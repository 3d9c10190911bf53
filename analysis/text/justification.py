"""Justification shift: the same decision, justified differently across a swap.

A writer may reach the same decision for two applicants who differ only by a swapped name and
still justify it differently; no decision rate shows that. For a stage whose responses carry a
decision and a rationale, run as counterfactual sets, this keeps the sets **whose responses all
reach the same decision** and compares their rationales across the swap with every metric of
:mod:`analysis.text.counterfactual` (each scorer's distribution and parities, the similarity of
counterfactual rationales), the set being the unit.

Keeping a set only when its decisions agree is an event that does not depend on which response
carries which swap label, so under the null (the swap changes neither decision nor rationale)
the responses of a kept set stay exchangeable and the within-set relabelling stays exact.

The sets left out, whose decision flips under the swap, get their own rate
(:func:`decision_flips`): the share of sets whose decisions are not all one, with a Wilson
interval over sets, and a within-set relabelling test of whether the swap moves the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasim.analysis.stats.parity import wilson_interval
from biasim.analysis.stats.swap_permutation import (
    TIES_NOTE,
    tie_broken_p_value,
    unreachable_note,
    within_pair_labels,
)
from biasim.analysis.text.counterfactual import (
    CounterfactualColumns,
    CounterfactualTables,
    checked_responses,
    counterfactual_tables,
)
from biasim.analysis.text.scorers import ScoreCache, TextScorer


@dataclass
class JustificationShift:
    """The rationale metrics among sets whose decisions agree.

    Attributes:
        tables: :func:`counterfactual_tables` of the kept sets' rationales (None: none kept).
        n_sets: Sets with two or more swap values.
        n_agreeing: Of those, sets whose responses all reach one decision.
        decisions: The kept sets by their shared decision.
    """

    tables: CounterfactualTables | None
    n_sets: int
    n_agreeing: int
    decisions: dict[str, int]


def agreeing_sets(df: pd.DataFrame, cols: CounterfactualColumns, decision: str) -> pd.Series:
    """Per set with two or more swap values: whether all its responses reach one decision
    (a missing decision disagrees with every decision)."""
    responses = checked_responses(df, cols)
    if decision not in responses.columns:
        raise ValueError(f"missing decision column `{decision}`; available: {list(responses)}")
    grouped = responses.groupby(cols.pair, sort=True)
    swapped = grouped[cols.swap].nunique() > 1
    decided = grouped[decision].agg(lambda d: d.notna().all() and d.nunique() == 1)
    return decided[swapped]


@dataclass(frozen=True)
class DecisionFlips:
    """How often the swap flips a set's decision, and a test of whether it moves decisions.

    Attributes:
        n_sets: Sets with two or more swap values and every decision present (the units).
        n_flipped: Of those, sets whose responses do not all reach one decision.
        rate, ci_low, ci_high: ``n_flipped / n_sets`` and its 95 % Wilson interval (sets are
            independent; each flips or not).
        distance: Total variation distance between the decision distributions under every two
            swap values, summed over value pairs (the test's statistic).
        p_value: Its within-set relabelling p (ties broken at random), or None without sets.
        n_missing: Sets left out for a missing decision.
        note: What the p assumes, and any reason it is limited.
    """

    n_sets: int
    n_flipped: int
    rate: float
    ci_low: float
    ci_high: float
    distance: float
    p_value: float | None
    n_missing: int
    note: str


def decision_distance(decision: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per row of ``labels`` (value codes, ``(rows, n)``): the total variation distance between
    the distributions of ``decision`` codes under every two values, summed over value pairs."""
    values, kinds = int(labels.max()) + 1, int(decision.max()) + 1
    by_value = np.stack([labels == v for v in range(values)], axis=1).astype(float)
    counts = by_value @ np.eye(kinds)[decision]
    shares = counts / counts.sum(axis=2, keepdims=True)
    gaps = [
        np.abs(shares[:, v] - shares[:, w]).sum(axis=1) / 2
        for v in range(values)
        for w in range(v + 1, values)
    ]
    return np.sum(gaps, axis=0)


def decision_flips(
    df: pd.DataFrame,
    cols: CounterfactualColumns,
    decision: str,
    n_permutations: int = 1999,
    seed: int = 0,
) -> DecisionFlips:
    """The decision-flip rate over sets and its test, the set the unit: under the null (the
    swap never moves the decision) a set's responses are exchangeable, so swap labels are
    relabelled within sets and the decisions' distance between values recomputed."""
    responses = checked_responses(df, cols)
    agree = agreeing_sets(responses, cols, decision)
    complete = responses.groupby(cols.pair)[decision].agg(lambda d: d.notna().all())
    kept = agree.index[complete.reindex(agree.index).to_numpy(dtype=bool)]
    n_sets, n_flipped = len(kept), int((~agree[kept].astype(bool)).sum())
    low, high = wilson_interval(np.array([n_flipped]), np.array([n_sets]))
    note = (
        f"flip: a set's decisions are not all one (replicates under a value count too); p: do "
        f"decisions differ between swap values, labels relabelled within {cols.pair}"
    )
    base = {"n_sets": n_sets, "n_flipped": n_flipped, "n_missing": len(agree) - n_sets}
    if n_sets == 0:
        return DecisionFlips(
            **base,
            rate=np.nan,
            ci_low=np.nan,
            ci_high=np.nan,
            distance=np.nan,
            p_value=None,
            note="no set with every decision",
        )
    rows = responses[responses[cols.pair].isin(kept)]
    _, labels = np.unique(rows[cols.swap].astype(str), return_inverse=True)
    _, pair = np.unique(rows[cols.pair].astype(str), return_inverse=True)
    _, codes = np.unique(rows[decision].astype(str), return_inverse=True)
    observed = float(decision_distance(codes, labels[None])[0])
    rng = np.random.default_rng(seed)
    null = np.concatenate(
        [decision_distance(codes, r) for r in within_pair_labels(labels, pair, n_permutations, rng)]
    )
    p, tied = tie_broken_p_value(null, observed, rng.random())
    said = "; ".join(n for n in (note, unreachable_note(labels, pair), tied and TIES_NOTE) if n)
    return DecisionFlips(
        **base,
        rate=n_flipped / n_sets,
        ci_low=float(low[0]),
        ci_high=float(high[0]),
        distance=observed,
        p_value=p,
        note=said,
    )


def justification_shift(
    df: pd.DataFrame,
    cols: CounterfactualColumns,
    decision: str,
    scorers: Mapping[str, TextScorer],
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
    n_permutations: int = 1999,
    seed: int = 0,
    cache: ScoreCache | None = None,
) -> JustificationShift:
    """The rationales (``cols.text``) of the sets that agree on ``decision``, compared across
    the swap with :func:`counterfactual_tables`."""
    responses = checked_responses(df, cols)
    agree = agreeing_sets(responses, cols, decision)
    kept_ids = set(agree.index[agree.to_numpy(dtype=bool)])
    kept = responses[responses[cols.pair].isin(kept_ids)]
    shared = kept.groupby(cols.pair)[decision].first().astype(str).value_counts()
    tables = (
        counterfactual_tables(kept, cols, scorers, embed, n_permutations, seed, cache)
        if len(kept_ids)
        else None
    )
    return JustificationShift(
        tables,
        n_sets=len(agree),
        n_agreeing=len(kept_ids),
        decisions={str(k): int(v) for k, v in shared.sort_index().items()},
    )
