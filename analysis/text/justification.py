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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

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
