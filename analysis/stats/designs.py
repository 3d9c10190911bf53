"""Two process designs compared: each group's end-to-end selection rate under each, unpaired.

Two designs of a hiring process (a different pool size, other stages, other readers) draw
different pools, so no applicant or pool is read under both: the comparison is between two
independent samples. Input: one row per applicant with ``design``, ``cluster`` (its first-stage
pool: the unit whose outcomes are not independent, since a pool's picks compete), one column
per group and ``selected`` (bool, selected at the last stage).

:func:`design_rate_tests`: per value of a group, the rate under each design and the change,
with an unpaired test of "the design does not change this group's rate". **Unit: the
first-stage pool**, in each design separately: the rate is a ratio of sums over pools, its
variance the cluster-robust (linearised) one, ``G / (G - 1) * sum_c (y_c - r m_c)^2 / M^2``
over the G pools of a design that the group entered (y_c selected and m_c entered of the
group in pool c, M their total); the two designs' variances add, since their samples are
independent. The statistic is referred to Student's t with ``min(G_A, G_B) - 1`` degrees of
freedom (the normal approximation's small-sample correction). A pool the group did not enter
adds nothing to its sum of squares, so it is no unit of that group's test: counting every
pool of a design (C instead of G) rejected a true null in 8.4 % of simulated pairs of designs
(10 and 40 pools of 4-12, a group of 15 %), 8.5 % with 15 pools each and a group of 10 %;
with G, 6.4 % and 2.5 % (tests/unit/analysis/test_designs.py). Pools cannot be permuted
between designs: pools of different sizes (or read by different stages) are not exchangeable
even when every group's rate is the same. p-values are Holm-adjusted across the values of
the group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats.multiple import holm

#: Fewest pools per design for a test (below it the variance of a design is too rough).
MIN_POOLS = 10


def _rate_and_variance(
    part: pd.DataFrame, value: str, group: str
) -> tuple[float, float, int, int, int, int]:
    """(rate, cluster-robust variance, pools, pools entered by ``value`` (the test's units),
    entered, selected) of ``value`` in one design."""
    mine = (part[group] == value).to_numpy()
    frame = pd.DataFrame(
        {"cluster": part["cluster"].to_numpy(), "m": mine, "y": mine & part["selected"].to_numpy()}
    )
    per = frame.groupby("cluster")[["y", "m"]].sum()
    pools, units = len(per), int((per["m"] > 0).sum())
    entered, chosen = int(per["m"].sum()), int(per["y"].sum())
    if entered == 0:
        return np.nan, np.nan, pools, 0, 0, 0
    rate = chosen / entered
    resid = per["y"].to_numpy(float) - rate * per["m"].to_numpy(float)
    variance = units / (units - 1) * float(resid @ resid) / entered**2 if units > 1 else np.nan
    return rate, variance, pools, units, entered, chosen


def design_rate_tests(outcomes: pd.DataFrame, group: str, designs: tuple[str, str]) -> pd.DataFrame:
    """Per value of ``group``: each design's entrants, selected and rate, the change (second
    minus first), its t statistic and p (unit: the first-stage pool the value entered; see the
    module docstring), Holm-adjusted across the values; ``note`` says why a p is missing.

    Returns:
        Columns ``group``, ``value``, ``design_a``, ``design_b``, ``entered_a``,
        ``selected_a``, ``rate_a``, ``entered_b``, ``selected_b``, ``rate_b``, ``change``,
        ``pools_a``, ``pools_b``, ``df``, ``statistic``, ``p_value``, ``p_adjusted``,
        ``unit``, ``note``.
    """
    first, second = (outcomes[outcomes["design"] == d] for d in designs)
    rows = []
    for value in sorted(outcomes[group].dropna().unique(), key=str):
        ra, va, ca, ga, na, ka = _rate_and_variance(first, value, group)
        rb, vb, cb, gb, nb, kb = _rate_and_variance(second, value, group)
        row = {
            "group": group, "value": value, "design_a": designs[0], "design_b": designs[1],
            "entered_a": na, "selected_a": ka, "rate_a": ra,
            "entered_b": nb, "selected_b": kb, "rate_b": rb, "change": rb - ra,
            "pools_a": ca, "pools_b": cb, "df": np.nan, "statistic": np.nan,
            "p_value": np.nan, "unit": "first-stage pool", "note": "",
        }  # fmt: skip
        if min(ca, cb) < MIN_POOLS:
            row["note"] = f"fewer than {MIN_POOLS} first-stage pools in a design"
        elif min(ga, gb) < 2:
            row["note"] = "the value entered fewer than 2 first-stage pools of a design"
        elif va + vb == 0:
            row.update(df=min(ga, gb) - 1, statistic=0.0, p_value=1.0 if rb == ra else 0.0)
        else:
            t = (rb - ra) / np.sqrt(va + vb)
            df = min(ga, gb) - 1
            row.update(df=df, statistic=t, p_value=float(2 * stats.t.sf(abs(t), df)))
        rows.append(row)
    table = pd.DataFrame(rows)
    tested = table["p_value"].notna()
    table["p_adjusted"] = np.nan
    if tested.any():
        table.loc[tested, "p_adjusted"] = holm(table.loc[tested, "p_value"].to_numpy())
    return table
