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
  another, with paired cluster-bootstrap intervals, and a paired permutation test of the
  group's selection rate. Unit of exchangeability: the cluster. The two policies read a pool
  independently (different calls on the same documents), so under "the policy does not change
  how many of group g a pool selects" the pair (g's count under one policy, under the other)
  is exchangeable; the test swaps the pair at random, pool by pool. p-values are adjusted
  across the groups of one comparison (Holm by default). The impact ratio's change gets an
  interval, not a test: a ratio to the highest group moves with every group's rate, so a test
  of it would not be a test about the group it is reported for.

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
    n_permutations: int = 2000,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    adjust: str = "holm",
) -> pd.DataFrame:
    """Per group: the change of impact ratio and rate from ``baseline`` to ``policy``.

    The test statistic of a group is the absolute change of its number selected (its rate's
    change times its fixed number of applicants); its null distribution comes from swapping
    the two policies' counts of random clusters (see the module docstring).
    ``p = (1 + #{|T'| >= |T|}) / (1 + n_permutations)``, the observed assignment counted once.

    Returns:
        One row per value, sorted: ``group``, ``value``, ``baseline``, ``policy``, ``entered``,
        ``rate_baseline``, ``rate_policy``, ``rate_change`` with ``rate_change_low`` and
        ``rate_change_high``, ``ratio_baseline``, ``ratio_policy``, ``ratio_change`` with
        ``ratio_change_low`` and ``ratio_change_high`` (paired cluster bootstrap), ``clusters``,
        ``n_permutations``, ``p_value`` and ``p_adjusted`` (``adjust`` across the values).
    """
    if n_permutations < 1:
        raise ValueError("n_permutations must be at least 1")
    counts = _Counts(outcomes, group, [baseline, policy])
    entered = counts.entered.sum(axis=0)
    base, other = counts.selected[0], counts.selected[1]
    rates, ratios = _ratios(np.stack([base.sum(axis=0), other.sum(axis=0)]), entered[None, :])
    change = ratios[1] - ratios[0]
    selected_change = other.sum(axis=0) - base.sum(axis=0)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    swap = rng.integers(0, 2, size=(n_permutations, len(counts.clusters))).astype(float)
    # A swapped pool moves its count difference from one policy to the other (twice).
    null = np.abs(selected_change - 2 * (swap @ (other - base)))
    hits = np.count_nonzero(null >= np.abs(selected_change) - _TOL, axis=0)
    p_value = np.where(entered > 0, (1 + hits) / (1 + n_permutations), np.nan)
    adjusted = np.full(p_value.shape, np.nan)
    finite = ~np.isnan(p_value)
    adjusted[finite] = multiple.adjust(p_value[finite], adjust)
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
            "ratio_change": change,
            "ratio_change_low": ratio_low,
            "ratio_change_high": ratio_high,
            "clusters": len(counts.clusters),
            "n_permutations": n_permutations,
            "p_value": p_value,
            "p_adjusted": adjusted,
        }
    )
