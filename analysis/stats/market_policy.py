"""A policy's effect over the cycles of a labour market, paired on the run.

Input: the market's composition table (``market.csv``): one row per policy, cycle and group
with ``hires`` and ``workforce`` (and ``replicate`` where a run holds replicate markets; a
table without it is one replicate). Every policy's trajectory runs on the base's common random
numbers (same applicants, same initial workforce, readers and leavers drawn at the same places),
so the difference between a policy's row and the base's at cycle t is paired.

* :func:`policy_shares`: per policy, cycle and group, the share of the cycle's hires and of the
  workforce at the end of the cycle under the policy and the baseline, and the change, averaged
  over replicates, with a t interval over replicates (unit: the replicate market) where there
  are two or more;
* :func:`policy_market_tests`: one test per policy, joint across the groups. Unit of
  exchangeability: the replicate market, i.e. the pair of trajectories (baseline, policy) run
  on one set of random numbers. Under "the policy acts as the baseline does" the two
  trajectories of a replicate are exchangeable as wholes (they share every market draw, keyed
  by place, and each reads with its own calls), so swapping them flips the sign of the
  replicate's vector of changes in the workforce per group summed over the cycles (employee-
  cycles: the policy's effect on who works there, over the whole run); the statistic is the
  quadratic form of :func:`.policy.joint_statistic`. (Summed hires would do as well; their
  smaller range ties more sign assignments, which makes the test more conservative.) Cycles
  within a replicate are not exchangeable (each cycle's readers depend on the earlier hires),
  nor are single pools, so a run of one replicate has no test: it reports the changes and
  says why.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats.policy import joint_statistic, smallest_reachable_p

#: Why a run of one replicate market has no test of a policy's effect.
ONE_REPLICATE = (
    "one replicate market: the pair of trajectories is the one unit, so no test (declare "
    "replicate markets for a test over them)"
)
_TOL = 1e-9
#: Exact enumeration of sign assignments up to this many replicates (2 ** 12 rows).
_EXACT = 12


def _replicates(table: pd.DataFrame) -> pd.DataFrame:
    return table if "replicate" in table.columns else table.assign(replicate=0)


def _shares(table: pd.DataFrame, column: str) -> pd.Series:
    """Each row's ``column`` over the sum of its policy, replicate and cycle (NaN: none)."""
    total = table.groupby(["policy", "replicate", "cycle"])[column].transform("sum")
    return table[column] / total.where(total > 0)


def policy_shares(table: pd.DataFrame, baseline: str = "base", level: float = 0.95) -> pd.DataFrame:
    """Per policy other than ``baseline``, cycle (from 1) and group: the hire and workforce
    shares under the policy and the baseline (means over replicates), the change (policy
    minus baseline) with its t interval over replicates, and ``replicates``.

    Returns:
        Columns ``policy``, ``baseline``, ``cycle``, ``group``, ``replicates`` and, for
        ``what`` in ``hire_share`` and ``workforce_share``: ``{what}_baseline``,
        ``{what}_policy``, ``{what}_change``, ``{what}_change_low``, ``{what}_change_high``
        (the interval is NaN with one replicate).
    """
    data = _replicates(table)
    data = data[data["cycle"] >= 1].assign(
        hire_share=lambda d: _shares(d, "hires"),
        workforce_share=lambda d: _shares(d, "workforce"),
    )
    keys = ["replicate", "cycle", "group"]
    base = data[data["policy"] == baseline].set_index(keys)
    rows = []
    for policy in [p for p in dict.fromkeys(data["policy"]) if p != baseline]:
        own = data[data["policy"] == policy].set_index(keys)
        out = pd.DataFrame(index=own.index)
        for what in ("hire_share", "workforce_share"):
            out[f"{what}_baseline"] = base[what].reindex(own.index)
            out[f"{what}_policy"] = own[what]
            out[f"{what}_change"] = own[what] - out[f"{what}_baseline"]
        rows.append(_over_replicates(out, level).assign(policy=policy, baseline=baseline))
    columns = ["policy", "baseline", "cycle", "group", "replicates"]
    if not rows:
        return pd.DataFrame(columns=columns)
    found = pd.concat(rows, ignore_index=True)
    return found[columns + [c for c in found.columns if c not in columns]]


def _over_replicates(per: pd.DataFrame, level: float) -> pd.DataFrame:
    """Means over replicates per cycle and group, with a t interval of each change."""
    grouped = per.groupby(["cycle", "group"], sort=True)
    out = grouped.mean()
    n = grouped.size()
    out.insert(0, "replicates", n)
    for column in [c for c in per.columns if c.endswith("_change")]:
        half = stats.t.ppf(0.5 + level / 2, n - 1) * grouped[column].std(ddof=1) / np.sqrt(n)
        half = half.where(n >= 2)
        out[f"{column}_low"] = out[column] - half
        out[f"{column}_high"] = out[column] + half
    return out.reset_index()


def policy_market_tests(
    table: pd.DataFrame,
    baseline: str = "base",
    *,
    starts: Mapping[str, int] | None = None,
    n_permutations: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One test per policy against ``baseline``, joint across the groups (see the module
    docstring): sign flips of each replicate's changes in the workforce per group, summed
    over its cycles (employee-cycles); exact over every assignment up to 12 replicates, else
    ``n_permutations`` drawn.
    ``p = #{T' >= T} / #assignments`` (exact) or ``(1 + #{T' >= T}) / (1 + n)``.
    A policy in ``starts`` (policy -> its ``from_cycle`` k) is the baseline before cycle k
    (its changes there are 0 by construction): its sums run over cycles >= k only.

    Returns:
        One row per policy: ``policy``, ``baseline``, ``from_cycle`` (the first cycle
        summed), ``unit`` (``replicate market``), ``n_units``, ``df``, ``statistic``,
        ``n_permutations``, ``p_value``, ``smallest_p`` (the smallest any data could give: with
        3 replicates 0.25) and ``note`` (why there is no p, with one replicate).
    """
    data = _replicates(table)
    starts = starts or {}
    rows = []
    for k, policy in enumerate(p for p in dict.fromkeys(data["policy"]) if p != baseline):
        start = starts.get(policy, 1)
        staff = data[data["cycle"] >= start].pivot_table(
            index=["policy", "replicate"], columns="group", values="workforce", aggfunc="sum"
        )
        changes = (staff.loc[policy] - staff.loc[baseline]).to_numpy(dtype=float)
        row = {"policy": policy, "baseline": baseline, "from_cycle": start}
        row["unit"] = "replicate market"
        row.update(_sign_flip(changes, n_permutations, np.random.SeedSequence([seed, k])))
        rows.append(row)
    return pd.DataFrame(rows)


def _sign_flip(
    changes: np.ndarray, n_permutations: int, seed: np.random.SeedSequence
) -> dict[str, object]:
    units = len(changes)
    if units < 2:
        return {"n_units": units, "df": 0, "statistic": np.nan, "n_permutations": 0,
                "p_value": np.nan, "smallest_p": np.nan, "note": ONE_REPLICATE}  # fmt: skip
    if units <= _EXACT:
        flips = np.array(list(itertools.product((1.0, -1.0), repeat=units)))
    else:
        rng = np.random.default_rng(seed)
        flips = 1.0 - 2.0 * rng.integers(0, 2, size=(n_permutations, units))
    null, observed, rank = joint_statistic(changes, flips)
    hits = int(np.count_nonzero(null >= observed - _TOL * max(1.0, observed)))
    exact = units <= _EXACT
    p = hits / len(flips) if exact else (1 + hits) / (1 + len(flips))
    if rank == 0:
        p = 1.0  # every replicate kept the same workforce under both: nothing changed
    return {"n_units": units, "df": rank, "statistic": observed, "n_permutations": len(flips),
            "p_value": p, "smallest_p": smallest_reachable_p(units, len(flips)),
            "note": ""}  # fmt: skip
