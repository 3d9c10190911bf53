"""Hiring over time: the composition a labour market's cycles leave, over replicate markets.

Every function reads the per-cycle composition table a market run writes (``market.csv``: one
row per replicate market, cycle and group with its applicants, readers, hires, leavers and
workforce). The unit of every interval and test here is the **replicate market**: markets of
one run are independent (each its own initial workforce and draws), while the cycles of one
market are not (each cycle's deciders are earlier cycles' hires), so a market's trajectory is
one observation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

#: The shares :func:`shares` computes: column of the table -> what it is the share of.
MEASURES: dict[str, str] = {
    "hires": "hires",
    "workforce": "workforce",
    "readers": "decision-makers",
}
#: What every interval and test takes as its unit.
UNIT = "replicate market"


def shares(market: pd.DataFrame, measures: tuple[str, ...] = tuple(MEASURES)) -> pd.DataFrame:
    """Per replicate, cycle, group and measure (of :data:`MEASURES`): the group's share of the
    cycle's hires, workforce (at the end of the cycle) and decision-makers. NaN where the
    cycle has none (cycle 0, the initial workforce, has no hires and no decision-makers)."""
    keys = ["replicate", "cycle"]
    frames = []
    for column in measures:
        totals = market.groupby(keys)[column].transform("sum")
        share = market[column] / totals.where(totals > 0)
        frames.append(market[[*keys, "group"]].assign(measure=column, share=share))
    return pd.concat(frames, ignore_index=True)


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """Mean, standard deviation and the t interval of the mean of ``values`` (independent
    units), the interval clipped to [0, 1] (a share); NaN bounds with fewer than two."""
    from scipy import stats

    n = len(values)
    mean = float(np.mean(values)) if n else math.nan
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(np.std(values, ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean, sd, max(0.0, mean - half), min(1.0, mean + half)


def trajectory(market: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per cycle, group and measure: the mean share over replicate markets, its standard
    deviation and t interval (unit: the replicate market; none with one market), and the
    markets it averages (those whose cycle had any of the measure)."""
    rows = []
    table = shares(market).dropna(subset=["share"]).sort_values("cycle", kind="stable")
    for measure in MEASURES:
        part_of = table[table["measure"] == measure]
        for (cycle, group), part in part_of.groupby(["cycle", "group"], sort=False):
            mean, sd, low, high = t_interval(part["share"].to_numpy(float), confidence)
            rows.append(
                {
                    "measure": measure,
                    "cycle": int(cycle),
                    "group": group,
                    "mean": mean,
                    "sd": sd,
                    "ci_low": low,
                    "ci_high": high,
                    "n_replicates": len(part),
                }
            )
    columns = ["measure", "cycle", "group", "mean", "sd", "ci_low", "ci_high", "n_replicates"]
    return pd.DataFrame(rows, columns=columns)


def impact_ratios(market: pd.DataFrame) -> pd.DataFrame:
    """Per cycle and group, pooled over replicate markets: the hire rate among the group's
    applicants and its ratio to the highest group's, in that cycle and cumulatively (all
    cycles up to it). Ratios of pooled counts: point estimates, no interval."""
    hiring = market[market["cycle"] > 0]
    pooled = hiring.groupby(["cycle", "group"], sort=False)[["applicants", "hires"]].sum()
    cumulative = pooled.groupby(level="group", sort=False).cumsum()
    out = pooled.reset_index()
    out["rate"] = _rate(out["hires"], out["applicants"])
    out["impact_ratio"] = _ratio_to_highest(out, "rate")
    total = cumulative.reset_index()
    out["cumulative_rate"] = _rate(total["hires"], total["applicants"]).to_numpy()
    out["cumulative_impact_ratio"] = _ratio_to_highest(out, "cumulative_rate")
    return out.sort_values("cycle", kind="stable").reset_index(drop=True)


def _rate(hires: pd.Series, applicants: pd.Series) -> pd.Series:
    return hires / applicants.where(applicants > 0)


def _ratio_to_highest(table: pd.DataFrame, column: str) -> pd.Series:
    highest = table.groupby("cycle")[column].transform("max")
    return table[column] / highest.where(highest > 0)


def parity_cycles(
    market: pd.DataFrame, population: Mapping[str, float], tolerance: float
) -> pd.DataFrame:
    """Per replicate market: the first cycle (0 = the initial workforce) whose workforce share
    of every group is within ``tolerance`` of its share of the population, or NA when none is
    (within the cycles run); and the largest gap at the last cycle."""
    workforce = shares(market, ("workforce",))
    workforce["gap"] = (workforce["share"] - workforce["group"].map(population)).abs()
    gaps = workforce.groupby(["replicate", "cycle"])["gap"].max().reset_index()
    rows = []
    for replicate, part in gaps.groupby("replicate"):
        part = part.sort_values("cycle")
        within = part.loc[part["gap"] <= tolerance + 1e-12, "cycle"]
        rows.append(
            {
                "replicate": int(replicate),
                "parity_cycle": int(within.iloc[0]) if len(within) else pd.NA,
                "last_gap": float(part["gap"].iloc[-1]),
            }
        )
    return pd.DataFrame(rows, columns=["replicate", "parity_cycle", "last_gap"]).astype(
        {"parity_cycle": "Int64"}
    )


@dataclass(frozen=True)
class ParitySummary:
    """Time to parity over replicate markets: how many reached it, and when."""

    tolerance: float
    replicates: int
    reached: int
    at_start: int
    at_end: int
    median_cycle: float | None
    last_cycle: int | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarise_parity(cycles: pd.DataFrame, tolerance: float) -> ParitySummary:
    """:func:`parity_cycles` summarised: markets at parity by the last cycle, those already at
    parity at the start (cycle 0), those at parity at the last cycle (a market can reach parity
    and leave it), and the median and latest first cycle among those reaching it (None when
    none did)."""
    reached = cycles["parity_cycle"].dropna().astype(int)
    return ParitySummary(
        tolerance=tolerance,
        replicates=len(cycles),
        reached=len(reached),
        at_start=int((reached == 0).sum()),
        at_end=int((cycles["last_gap"] <= tolerance + 1e-12).sum()),
        median_cycle=float(reached.median()) if len(reached) else None,
        last_cycle=int(reached.max()) if len(reached) else None,
    )


def drift_tests(market: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per group: did the workforce share move between the start (cycle 0) and the last
    cycle? The change of each replicate market's share, its mean with a t interval, and a
    one-sample t test of a mean change of 0 (unit: the replicate market; markets are
    independent, so their changes are i.i.d.). No test with fewer than two markets.

    With two groups the shares add up to 1, so the second group's changes are the first's
    negated and its test is the first's: its row names the group whose test it repeats in
    ``same_test_as`` (empty on every other row), so that the test is shown and counted once."""
    from scipy import stats

    workforce = shares(market, ("workforce",))
    first, last = workforce["cycle"].min(), workforce["cycle"].max()
    rows = []
    groups = list(dict.fromkeys(workforce["group"]))
    for group, part in workforce.groupby("group", sort=False):
        start = part[part["cycle"] == first].set_index("replicate")["share"]
        end = part[part["cycle"] == last].set_index("replicate")["share"]
        change = (end - start).dropna().to_numpy(float)
        mean, sd, _, _ = t_interval(change, confidence)
        p, low, high, statistic = math.nan, math.nan, math.nan, math.nan
        if len(change) >= 2 and sd > 0:
            result = stats.ttest_1samp(change, 0.0)
            p, statistic = float(result.pvalue), float(result.statistic)
            half = float(stats.t.ppf(0.5 + confidence / 2, len(change) - 1)) * sd
            low, high = mean - half / math.sqrt(len(change)), mean + half / math.sqrt(len(change))
        elif len(change) >= 2 and mean == 0:
            p, low, high = 1.0, 0.0, 0.0  # no market moved: nothing to test
        rows.append(
            {
                "group": group,
                "start": float(start.mean()),
                "end": float(end.mean()),
                "change": mean,
                "ci_low": low,
                "ci_high": high,
                "t": statistic,
                "p_value": p,
                "test": "one-sample t test of the change",
                "same_test_as": groups[0] if len(groups) == 2 and group == groups[1] else "",
                "unit": UNIT,
                "n_units": len(change),
                "first_cycle": int(first),
                "last_cycle": int(last),
            }
        )
    return pd.DataFrame(rows)


def funnel(market: pd.DataFrame) -> pd.DataFrame:
    """Per cycle and group, summed over replicate markets: applicants and hires."""
    hiring = market[market["cycle"] > 0]
    return (
        hiring.groupby(["cycle", "group"], sort=False)[["applicants", "hires"]].sum().reset_index()
    )


def shortfalls(market: pd.DataFrame) -> dict[str, int]:
    """Over every replicate market and cycle: the openings no hire filled, the cycles with
    any, and the applicants asked for that nobody out of work was left to be (both columns
    are per cycle, repeated on each group's row: taken once per replicate and cycle)."""
    cycles = market[market["cycle"] > 0].drop_duplicates(["replicate", "cycle"])
    return {
        "unfilled": int(cycles["unfilled"].sum()),
        "cycles_unfilled": int((cycles["unfilled"] > 0).sum()),
        "applicants_short": int(cycles["applicants_short"].sum()),
        "cycles_short": int((cycles["applicants_short"] > 0).sum()),
        "cycles": len(cycles),
    }
