"""Do two models treat the groups differently? A permutation test of the difference between
two models' demographic parity differences, with the models' answers matched prompt by prompt.

When the same design is run on several models, each prompt (an agent: persona, index,
replicate, design cell; or a hiring template with a name and a seed) is answered by every
model. Under the null hypothesis that two models answer each prompt alike (the same answer
distribution, whatever it is and however it varies between prompts), the model labels of the
answers to one prompt are exchangeable. Swapping them within each prompt keeps every
prompt's own difficulty, the shared names and the replicates in place, so the test stays
exact with prompt-level heterogeneity. The statistic is ``|DPD_a - DPD_b|``: power goes to a
difference in disparity, not in the overall rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from biasim.analysis.stats.disparity import adjust_family
from biasim.analysis.stats.parity import (
    dpd_from_counts,
    resampling_p_value,
)

#: Draws held at once when summing hypergeometric swaps (memory bound, not a result).
_CHUNK = 4_000_000


def model_pair_test(
    df: pd.DataFrame,
    *,
    model_col: str,
    model_a: str,
    model_b: str,
    group_col: str,
    outcome_col: str,
    match_col: str,
    n_permutations: int = 2000,
    seed: int = 0,
) -> dict[str, float | int | str]:
    """Permutation test of ``|DPD_a - DPD_b|`` with labels swapped within matched prompts.

    Args:
        df: One row per answered decision (excluded answers removed beforehand).
        model_col: Column naming the model.
        model_a: First model.
        model_b: Second model.
        group_col: Column naming the group.
        outcome_col: Boolean column: the targeted decision was made.
        match_col: Column identifying the prompt; rows sharing it (within a group) are the
            same prompt answered by the models (several rows each with replicates).
        n_permutations: Monte Carlo permutations.
        seed: Seed of the draws.

    Returns:
        ``model_a``, ``model_b``, ``n_a``, ``n_b``, ``n_matched`` (prompts answered by both),
        ``dpd_a``, ``dpd_b``, ``difference`` (a - b), ``p_value`` ((1 + #{T* >= T}) / (B + 1);
        NaN when a model has fewer than two groups with answers).
    """
    data = df[df[model_col].isin([model_a, model_b])]
    is_a = (data[model_col] == model_a).to_numpy()
    hit = data[outcome_col].to_numpy(dtype=bool)
    groups, group_idx = np.unique(data[group_col].astype(str).to_numpy(), return_inverse=True)
    n_groups = len(groups)
    n_a = np.bincount(group_idx[is_a], minlength=n_groups)
    n_b = np.bincount(group_idx[~is_a], minlength=n_groups)
    k_a = np.bincount(group_idx[is_a & hit], minlength=n_groups)
    k_b = np.bincount(group_idx[~is_a & hit], minlength=n_groups)
    dpd_a, dpd_b = float(dpd_from_counts(k_a, n_a)), float(dpd_from_counts(k_b, n_b))
    strata = pd.DataFrame(
        {"g": group_idx, "s": data[match_col].astype(str).to_numpy(), "a": is_a, "h": hit}
    )
    per = strata.groupby(["g", "s"], sort=False).agg(
        m_a=("a", "sum"), m=("a", "size"), k=("h", "sum")
    )
    per["m_b"] = per["m"] - per["m_a"]
    result: dict[str, float | int | str] = {
        "model_a": model_a,
        "model_b": model_b,
        "n_a": int(n_a.sum()),
        "n_b": int(n_b.sum()),
        "n_matched": int(((per["m_a"] > 0) & (per["m_b"] > 0)).sum()),
        "dpd_a": float(dpd_a),
        "dpd_b": float(dpd_b),
        "difference": float(dpd_a - dpd_b),
        "p_value": float("nan"),
    }
    if (n_a > 0).sum() < 2 or (n_b > 0).sum() < 2:
        return result
    # Strata whose labels cannot change the counts (one model only, or all answers alike) add
    # fixed amounts; the others are summed by signature, since strata of one signature are
    # exchangeable draws.
    moving = (per["m_a"] > 0) & (per["m_b"] > 0) & (per["k"] > 0) & (per["k"] < per["m"])
    fixed_a = np.bincount(group_idx[is_a & hit], minlength=n_groups).astype(np.int64)
    moving_rows = per[moving].reset_index()
    moving_hits_a = (
        strata[strata["a"] & strata["h"]]
        .merge(moving_rows[["g", "s"]], on=["g", "s"])
        .groupby("g")
        .size()
    )
    fixed_a[moving_hits_a.index.to_numpy()] -= moving_hits_a.to_numpy()
    rng = np.random.default_rng(seed)
    draws = np.zeros((n_permutations, n_groups), dtype=np.int64)
    signatures = moving_rows.groupby(["g", "m_a", "m", "k"]).size()
    for (g, m_a, m, k), count in signatures.items():
        if m_a == 1 and m == 2:  # one answer per model: a fair coin per discordant prompt
            draws[:, g] += rng.binomial(count, 0.5, size=n_permutations)
            continue
        per_chunk = max(1, _CHUNK // max(count, 1))
        for start in range(0, n_permutations, per_chunk):
            stop = min(start + per_chunk, n_permutations)
            draws[start:stop, g] += rng.hypergeometric(
                k, m - k, m_a, size=(stop - start, count)
            ).sum(axis=1)
    total = k_a + k_b
    perm_a = fixed_a + draws
    perm_b = total - perm_a
    statistic = np.abs(dpd_from_counts(perm_a, n_a) - dpd_from_counts(perm_b, n_b))
    result["p_value"] = resampling_p_value(statistic, abs(dpd_a - dpd_b))
    return result


def model_difference_tests(
    df: pd.DataFrame,
    *,
    model_col: str,
    models: Sequence[str],
    case_cols: Sequence[str],
    group_col: str,
    outcome_col: str,
    match_col: str,
    n_permutations: int = 2000,
    adjust: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`model_pair_test` for every case and every pair of models.

    The family for ``adjust`` is the whole table (every case and pair). Each test draws from
    its own seed, derived from ``seed`` and its position.

    Returns:
        One row per case and pair: ``case_cols``, then :func:`model_pair_test`'s fields,
        ``p_adjusted`` and ``significant`` (``p_adjusted < alpha``).
    """
    rows = []
    keys = list(case_cols)
    parts = df.groupby(keys, sort=True) if keys else [((), df)]
    index = 0
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        for a, b in combinations(models, 2):
            test = model_pair_test(
                part,
                model_col=model_col,
                model_a=a,
                model_b=b,
                group_col=group_col,
                outcome_col=outcome_col,
                match_col=match_col,
                n_permutations=n_permutations,
                seed=seed + 7919 * index,
            )
            rows.append({**dict(zip(keys, key, strict=True)), **test})
            index += 1
    columns = [
        *keys,
        "model_a",
        "model_b",
        "n_a",
        "n_b",
        "n_matched",
        "dpd_a",
        "dpd_b",
        "difference",
        "p_value",
    ]
    table = adjust_family(pd.DataFrame(rows, columns=columns), "p_value", adjust)
    table["significant"] = table["p_adjusted"] < alpha
    return table
