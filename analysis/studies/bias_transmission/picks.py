"""Pick ``k`` of ``n``: the share of picks that go to one target value, against chance.

The Bias-Transmission study's supplemental experiment 3 (seed 000, appendix C) shows one job
and eight people, four female and four male names in random order, and asks for three to hire.
Its metric is the share of female picks per job and per category of jobs, as in Experiments 1-2.

The unit is the call, not the pick: the three picks of a call are drawn without replacement from
one set of eight, so they are not independent. Under the null that picks do not depend on the
target's value, and because the values are shuffled over the positions in every call, the number
of positive picks in a call is hypergeometric (8 shown, 4 positive, 3 drawn: mean 1.5, variance
3 * 1/2 * 1/2 * 5/7 = 0.536, below the binomial's 0.75) whatever the model's preference for
positions or for particular names. Calls are independent, so a job's (or a category's) total is
the sum of independent hypergeometric counts, whose exact distribution is their convolution.
:func:`exact_test` is the two-sided exact test against it (the probabilities no larger than the
observed total's, as ``scipy.stats.binomtest`` does for one binomial); with one pick of two per
call it is exactly the binomial test against 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats.multiple import adjust
from biasim.analysis.studies.bias_transmission.answer_lines import PICK_REASONS, parse_picks
from biasim.analysis.studies.bias_transmission.association import (
    CALL_FAILED,
    CUT_AT_CAP,
    unreadable_reason,
)

#: Outcome of a usable call.
PICKED = "picked"
OUTCOMES = (PICKED, *PICK_REASONS, CUT_AT_CAP, CALL_FAILED)
# Relative tolerance of "no larger than the observed probability" (as scipy's binomtest).
_RERR = 1 + 1e-7


def pick_rows(
    results: pd.DataFrame,
    keys: Sequence[str],
    positive: str,
    k: int,
    *,
    known: Sequence[str] = (),
    text: str = "text",
) -> pd.DataFrame:
    """One row per call of a pick-``k`` stage: what it showed and how many positives it picked.

    Args:
        results: Rows of one pairing stage with ``per_call: 1``: ``unit_id``, ``valid``,
            ``targets``, ``target_values``, ``items`` and the answer.
        keys: Design columns kept on each row (e.g. the experiment).
        positive: The value counted (e.g. ``female``).
        k: How many each call asked for.
        known: Names the model might answer with beyond those shown (the name lists).
        text: The answer column.

    Returns:
        ``keys``, ``unit_id``, ``item``, ``shown`` (targets shown), ``shown_positive``, ``k``,
        ``picked`` (the names, ``|``-joined), ``positive_picks`` (NaN unless usable) and
        ``outcome`` (``picked`` or why not: ``PICK_REASONS``, ``cut at max_tokens`` or
        ``call failed``).
    """
    records = []
    for row in results.itertuples(index=False):
        fields = row._asdict()
        names = str(fields["targets"]).split("|")
        values = dict(zip(names, str(fields["target_values"]).split("|"), strict=True))
        unread = unreadable_reason({**fields, "text": fields.get(text)})
        parsed = None if unread else parse_picks(str(fields[text]), names, k, known)
        usable = parsed is not None and not parsed.reason
        records.append(
            {
                **{key: fields[key] for key in keys},
                "unit_id": fields["unit_id"],
                "item": str(fields["items"]),
                "shown": len(names),
                "shown_positive": sum(v == positive for v in values.values()),
                "k": k,
                "picked": "|".join(parsed.picked) if usable else "",
                "positive_picks": (
                    sum(values[n] == positive for n in parsed.picked) if usable else np.nan
                ),
                "outcome": unread if parsed is None else (parsed.reason or PICKED),
            }
        )
    columns = [*keys, "unit_id", "item", "shown", "shown_positive", "k", "picked"]
    return pd.DataFrame.from_records(records, columns=[*columns, "positive_picks", "outcome"])


def null_distribution(calls: pd.DataFrame) -> np.ndarray:
    """The exact null distribution of the total positive picks of independent calls.

    Args:
        calls: One row per call with ``shown``, ``shown_positive`` and ``k``.

    Returns:
        ``pmf[t]`` = P(total = t) for t = 0 .. sum of ``k``: the convolution of one
        hypergeometric distribution per call.
    """
    pmf = np.ones(1)
    formats = calls.groupby(["shown", "shown_positive", "k"]).size()
    for (shown, shown_positive, k), count in formats.items():
        one = stats.hypergeom.pmf(np.arange(k + 1), shown, shown_positive, k)
        # Repeated squaring: log2(count) convolutions rather than count.
        power, base = np.ones(1), one
        while count:
            if count & 1:
                power = np.convolve(power, base)
            base, count = np.convolve(base, base), count >> 1
        pmf = np.convolve(pmf, power)
    return pmf


def exact_test(total: int, pmf: np.ndarray) -> float:
    """Two-sided exact p-value of ``total``: the null probability of totals no more likely."""
    return float(min(1.0, pmf[pmf <= pmf[total] * _RERR].sum()))


def share_table(
    calls: pd.DataFrame,
    by: Sequence[str],
    *,
    alpha: float = 0.05,
    method: str = "none",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Share of positive picks per group of usable calls, with the exact test against chance.

    Args:
        calls: From :func:`pick_rows`.
        by: Group columns (e.g. the experiment and the item, or its category).
        alpha: Level of the test.
        method: Adjustment across the groups of each experiment (the columns of ``by`` but the
            last): ``none`` (the paper's count), ``holm`` or ``bh``.
        confidence: Of the interval.

    Returns:
        Per group: ``calls``, ``picks``, ``positive``, ``share``, ``ci_low``, ``ci_high`` (the
        t interval of the mean per-call share, clipped to [0, 1]: calls are the independent
        units), ``chance``
        (the share expected under the null), ``p_value`` (:func:`exact_test`), ``p_adjusted``
        , ``deviates`` (``p_adjusted < alpha``), ``unit`` (``call``) and ``n_units``.
    """
    by = list(by)
    usable = calls[calls["outcome"] == PICKED]
    rows = []
    for key, group in usable.groupby(by, sort=False, observed=True):
        n = len(group)
        total = int(group["positive_picks"].sum())
        per_call = group["positive_picks"] / group["k"]
        half = (
            stats.t.ppf(0.5 + confidence / 2, n - 1) * per_call.std(ddof=1) / np.sqrt(n)
            if n > 1
            else np.nan
        )
        share = total / int(group["k"].sum())
        rows.append(
            {
                **dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                "calls": n,
                "picks": int(group["k"].sum()),
                "positive": total,
                "share": share,
                "ci_low": max(0.0, share - half),
                "ci_high": min(1.0, share + half),
                "chance": float((group["shown_positive"] / group["shown"] * group["k"]).sum())
                / int(group["k"].sum()),
                "p_value": exact_test(total, null_distribution(group)),
            }
        )
    columns = [*by, "calls", "picks", "positive", "share", "ci_low", "ci_high", "chance"]
    table = pd.DataFrame(rows, columns=[*columns, "p_value"])
    family = by[:-1]
    if family:
        table["p_adjusted"] = table.groupby(family, sort=False)["p_value"].transform(
            lambda p: adjust(p.to_numpy(), method)
        )
    else:
        table["p_adjusted"] = adjust(table["p_value"].to_numpy(), method)
    table["deviates"] = (table["p_adjusted"] < alpha).astype(bool)
    # The exact test treats calls as independent: they are its units.
    table["unit"], table["n_units"] = "call", table["calls"]
    return table


def outcome_counts(calls: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Calls per group and outcome (``picked`` or why not): every call is accounted for."""
    return calls.groupby([*by, "outcome"], sort=True).size().rename("calls").reset_index()


def compare_categories(
    picks: pd.DataFrame,
    single: pd.DataFrame,
    category: str,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Pick-k shares per category beside a one-of-two condition's (supplemental experiment 3
    against the hiring prompt), and the change in bias (distance from 0.5).

    Args:
        picks: :func:`share_table` by ``category``.
        single: The one-of-two condition's share of ``positive`` pairings per ``category``
            (columns ``category``, ``n``, ``share``; its calls show one item each, so its
            pairings are independent).
        category: The category column.
        confidence: Of the interval of the difference.

    Returns:
        Per category present in both: ``share_picks``, ``share_single``, ``difference``
        (picks minus single) with a normal interval (``diff_low``, ``diff_high``; the pick
        share's standard error from the upper half of its t interval, the single share's
        binomial), and
        ``bias_picks``, ``bias_single``, ``bias_change`` (``|share - 0.5|``, picks minus single).
    """
    z = stats.norm.ppf(0.5 + confidence / 2)
    merged = picks[[category, "share", "ci_high", "calls"]].merge(
        single[[category, "share", "n"]], on=category, suffixes=("_picks", "_single")
    )
    t = stats.t.ppf(0.5 + confidence / 2, merged["calls"] - 1)
    se_picks = (merged["ci_high"] - merged["share_picks"]) / t
    p1 = merged["share_single"]
    se_single = np.sqrt(p1 * (1 - p1) / merged["n"])
    diff = merged["share_picks"] - p1
    half = z * np.sqrt(se_picks**2 + se_single**2)
    out = pd.DataFrame(
        {
            category: merged[category],
            "share_picks": merged["share_picks"],
            "share_single": p1,
            "difference": diff,
            "diff_low": diff - half,
            "diff_high": diff + half,
            "bias_picks": (merged["share_picks"] - 0.5).abs(),
            "bias_single": (p1 - 0.5).abs(),
        }
    )
    out["bias_change"] = out["bias_picks"] - out["bias_single"]
    return out
