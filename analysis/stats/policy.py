"""The effect of a hiring policy on who is selected end to end, estimated paired.

Every applicant is read under every policy, in the same pools (common random numbers), so the
difference between two policies is a within-pool comparison. Input: one row per (applicant,
policy) with ``candidate``, ``policy``, ``cluster`` (the unit whose readings are not
independent: the first-stage pool, or the applicant when read alone; the same under every
policy), one column per group and ``selected`` (bool, selected at the last stage).

* :func:`policy_rates`: per policy and group, the end-to-end selection rate and impact ratio
  (rate over the highest group rate of that policy, as NYC Local Law 144 defines it), with
  cluster-bootstrap percentile intervals;
* :func:`policy_difference`: per group, the change of impact ratio and rate from one policy to
  another, with paired cluster-bootstrap intervals (intervals, not tests);
* :func:`policy_tests`: one paired permutation test per policy against the baseline, joint
  across the groups of one grouping. Unit of exchangeability: the cluster. The two policies
  read a pool independently (different calls on the same documents), so under "the policy
  does not change how many of each group a pool selects" the pair (the pool's counts under one
  policy, under the other) is exchangeable; the test swaps the pair at random, pool by pool,
  which flips the sign of the pool's vector of count changes. The statistic is the quadratic
  form ``D' W+ D`` of the summed changes ``D`` in the pseudo-inverse of ``W = sum_c d_c d_c'``
  (which no swap changes): a pool that hires one applicant under every policy has changes
  summing to zero over the groups, so testing each group separately repeats one test and
  adjusting over the groups throws power away; the pseudo-inverse drops that dimension.
  p-values are adjusted across the policies compared with the baseline (Holm by default):
  the family is the grouping's set of policies, one test each. The impact ratio's change gets
  an interval, not a test: a ratio to the highest group moves with every group's rate, so a
  test of it would not be a test about the group it is reported for.

An impact ratio is an outcome disparity: it mixes differences in the documents (qualification)
with discrimination. The difference between two policies on the same documents is causal for
the policy; the causal effect of a name is measured by reading one document under swapped names
(:mod:`.counterfactual`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from biasim.analysis.stats import multiple

_TOL = 1e-12
REQUIRED = ("candidate", "policy", "cluster", "selected")


class _Counts:
    """Entered and selected per (policy, cluster, group value), from the outcomes table."""

    def __init__(self, outcomes: pd.DataFrame, group: str, policies: Sequence[str]) -> None:
        missing = [c for c in (*REQUIRED, group) if c not in outcomes.columns]
        if missing:
            raise ValueError(f"missing column(s) {missing}; have {list(outcomes.columns)}")
        if outcomes[[group, "cluster", "selected"]].isna().any().any():
            raise ValueError(f"`{group}`, `cluster` and `selected` need a value on every row")
        absent = sorted(set(policies) - set(outcomes["policy"]))
        if absent:
            raise ValueError(f"no outcomes under policy {absent}")
        data = outcomes[outcomes["policy"].isin(policies)]
        per = data.groupby("candidate")["policy"].nunique()
        if (per != len(policies)).any() or data.duplicated(["candidate", "policy"]).any():
            raise ValueError("every candidate needs exactly one row under every policy (paired)")
        self.policies = list(policies)
        self.values = sorted(map(str, set(data[group])))
        self.clusters = pd.Index(sorted(set(data["cluster"].astype(str))))
        p = pd.Index(self.policies).get_indexer(data["policy"])
        c = self.clusters.get_indexer(data["cluster"].astype(str))
        g = pd.Index(self.values).get_indexer(data[group].astype(str))
        shape = (len(self.policies), len(self.clusters), len(self.values))
        flat = np.ravel_multi_index((p, c, g), shape)
        size = int(np.prod(shape))
        self.entered = np.bincount(flat, minlength=size).reshape(shape)[0]
        selected = data["selected"].to_numpy().astype(bool)
        self.selected = np.bincount(flat[selected], minlength=size).reshape(shape)


def _ratios(selected: np.ndarray, entered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rates and impact ratios over the last axis (groups); NaN where undefined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = selected / entered
        top = np.nanmax(np.where(entered > 0, rate, np.nan), axis=-1, keepdims=True)
        ratio = np.where(top > 0, rate / top, np.where(np.isnan(rate), np.nan, 1.0))
    return rate, ratio


def _bootstrap_weights(n_clusters: int, n_boot: int, seed: int) -> np.ndarray:
    """How often each cluster is drawn in each of ``n_boot`` cluster-bootstrap samples."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot)


def _interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        low = np.nanquantile(draws, alpha, axis=0)
        high = np.nanquantile(draws, 1 - alpha, axis=0)
    return low, high


def policy_rates(
    outcomes: pd.DataFrame,
    group: str,
    policies: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    threshold: float = 0.8,
) -> pd.DataFrame:
    """End-to-end selection rate and impact ratio per policy and group, with intervals.

    Intervals are percentiles of a cluster bootstrap (clusters drawn with replacement, the
    same draw for every policy).

    Returns:
        One row per (policy, value), policies in the order given and values sorted: ``policy``,
        ``group``, ``value``, ``entered``, ``selected``, ``rate``, ``rate_low``, ``rate_high``,
        ``impact_ratio``, ``ratio_low``, ``ratio_high`` and ``four_fifths`` (ratio below
        ``threshold``).
    """
    counts = _Counts(outcomes, group, policies)
    entered = counts.entered.sum(axis=0)
    selected = counts.selected.sum(axis=1)
    rate, ratio = _ratios(selected, entered[None, :])
    weights = _bootstrap_weights(len(counts.clusters), n_boot, seed)
    boot_entered = weights @ counts.entered
    boot_selected = np.einsum("bc,pcg->bpg", weights, counts.selected)
    boot_rate, boot_ratio = _ratios(boot_selected, boot_entered[:, None, :])
    rate_low, rate_high = _interval(boot_rate, level)
    ratio_low, ratio_high = _interval(boot_ratio, level)
    pi, gi = np.divmod(np.arange(rate.size), rate.shape[1])
    out = pd.DataFrame(
        {
            "policy": np.asarray(counts.policies, dtype=object)[pi],
            "group": group,
            "value": np.asarray(counts.values, dtype=object)[gi],
            "entered": entered[gi],
            "selected": selected[pi, gi],
            "rate": rate[pi, gi],
            "rate_low": rate_low[pi, gi],
            "rate_high": rate_high[pi, gi],
            "impact_ratio": ratio[pi, gi],
            "ratio_low": ratio_low[pi, gi],
            "ratio_high": ratio_high[pi, gi],
        }
    )
    out["four_fifths"] = (out["impact_ratio"] < threshold - _TOL).to_numpy(dtype=bool)
    return out


def policy_difference(
    outcomes: pd.DataFrame,
    group: str,
    baseline: str,
    policy: str,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """Per group: the change of impact ratio and rate from ``baseline`` to ``policy``, with
    paired cluster-bootstrap intervals; the test is :func:`policy_tests` (one per policy).

    Returns:
        One row per value, sorted: ``group``, ``value``, ``baseline``, ``policy``, ``entered``,
        ``rate_baseline``, ``rate_policy``, ``rate_change`` with ``rate_change_low`` and
        ``rate_change_high``, ``ratio_baseline``, ``ratio_policy``, ``ratio_change`` with
        ``ratio_change_low`` and ``ratio_change_high`` and ``clusters``.
    """
    counts = _Counts(outcomes, group, [baseline, policy])
    entered = counts.entered.sum(axis=0)
    base, other = counts.selected[0], counts.selected[1]
    rates, ratios = _ratios(np.stack([base.sum(axis=0), other.sum(axis=0)]), entered[None, :])
    weights = _bootstrap_weights(len(counts.clusters), n_boot, seed)
    boot_entered = (weights @ counts.entered)[:, None, :]
    boot_selected = np.stack([weights @ base, weights @ other], axis=1)
    boot_rate, boot_ratio = _ratios(boot_selected, boot_entered)
    rate_low, rate_high = _interval(boot_rate[:, 1] - boot_rate[:, 0], level)
    ratio_low, ratio_high = _interval(boot_ratio[:, 1] - boot_ratio[:, 0], level)
    return pd.DataFrame(
        {
            "group": group,
            "value": counts.values,
            "baseline": baseline,
            "policy": policy,
            "entered": entered,
            "rate_baseline": rates[0],
            "rate_policy": rates[1],
            "rate_change": rates[1] - rates[0],
            "rate_change_low": rate_low,
            "rate_change_high": rate_high,
            "ratio_baseline": ratios[0],
            "ratio_policy": ratios[1],
            "ratio_change": ratios[1] - ratios[0],
            "ratio_change_low": ratio_low,
            "ratio_change_high": ratio_high,
            "clusters": len(counts.clusters),
        }
    )


def joint_statistic(changes: np.ndarray, flips: np.ndarray) -> tuple[np.ndarray, float, int]:
    """The joint statistic of each sign assignment, the observed one and the form's rank.

    Args:
        changes: Per cluster and group, the count selected under the policy minus under the
            baseline (clusters x groups).
        flips: Rows of +1/-1 per cluster (one row per permutation).

    Returns:
        ``D' W+ D`` for every row of ``flips`` (``D = flips @ changes``), the same for all
        signs +1, and the rank of ``W = changes' changes``.
    """
    w = changes.T @ changes
    pinv = np.linalg.pinv(w, rcond=1e-10, hermitian=True)
    observed = changes.sum(axis=0)
    null = flips @ changes
    return (
        np.einsum("pg,gh,ph->p", null, pinv, null),
        float(observed @ pinv @ observed),
        int(np.linalg.matrix_rank(w, hermitian=True)),
    )


def smallest_reachable_p(units: int, draws: int) -> float:
    """The smallest p a sign-flip test over ``units`` clusters can give, whatever the data.

    The joint statistic is even in the signs (flipping every cluster gives the same value), so
    the observed assignment ties with its mirror: exact over all ``2**units`` assignments, no p
    is below ``2 / 2**units`` (drawn at random, p lands about there, within the draws' noise);
    with ``draws`` assignments drawn, none is below ``1 / (1 + draws)`` either. With 3
    clusters it is 0.25: no test at alpha 0.05 can reject, and power is 0 by construction,
    which the report and ``biasim power`` say instead of a bare 0 %.
    """
    return max(2.0 / 2.0**units, 1.0 / (1 + draws))


def policy_tests(
    outcomes: pd.DataFrame,
    group: str,
    baseline: str,
    policies: Sequence[str],
    *,
    n_permutations: int = 2000,
    seed: int = 0,
    adjust: str = "holm",
) -> pd.DataFrame:
    """One paired test per policy against ``baseline``, joint across the values of ``group``.

    Null: the policy does not change how many of each group a pool selects (see the module
    docstring). Swapping a cluster's two policies flips the sign of its vector of count
    changes; ``p = (1 + #{T' >= T}) / (1 + n_permutations)``, the observed assignment counted
    once. ``df`` is the rank of the form: the number of groups less one where every pool
    selects as many under both policies.

    Returns:
        One row per policy other than ``baseline``, in the order given: ``group``,
        ``baseline``, ``policy``, ``unit`` (``cluster``: the pairs swapped) and ``n_units``
        (clusters), ``df``, ``statistic``, ``n_permutations``,
        ``p_value``, ``smallest_p`` (the smallest any data could give:
        :func:`smallest_reachable_p`) and ``p_adjusted`` (``adjust`` across the policies).
    """
    if n_permutations < 1:
        raise ValueError("n_permutations must be at least 1")
    others = [p for p in policies if p != baseline]
    rows = []
    for k, policy in enumerate(others):
        counts = _Counts(outcomes, group, [baseline, policy])
        changes = (counts.selected[1] - counts.selected[0]).astype(float)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 2, k]))
        flips = 1.0 - 2.0 * rng.integers(0, 2, size=(n_permutations, len(counts.clusters)))
        null, observed, rank = joint_statistic(changes, flips)
        hits = np.count_nonzero(null >= observed - _TOL * max(1.0, observed))
        rows.append(
            {
                "group": group,
                "baseline": baseline,
                "policy": policy,
                "unit": "cluster",
                "n_units": len(counts.clusters),
                "df": rank,
                "statistic": observed,
                "n_permutations": n_permutations,
                "p_value": (1 + hits) / (1 + n_permutations),
                "smallest_p": smallest_reachable_p(len(counts.clusters), n_permutations),
            }
        )
    out = pd.DataFrame(
        rows,
        columns=[
            "group",
            "baseline",
            "policy",
            "unit",
            "n_units",
            "df",
            "statistic",
            "n_permutations",
            "p_value",
            "smallest_p",
        ],
    )
    out["p_adjusted"] = multiple.adjust(out["p_value"].to_numpy(dtype=float), adjust)
    return out
