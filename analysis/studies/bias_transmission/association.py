"""Association bias from word pairings: the share of items paired with one target value.

The Bias-Transmission study (seed 000, section 3) quantifies an LLM's gender-occupation
association as the share of female names paired with a job, ``N_FJ / (N_FJ + N_MJ)`` (the
job-level metric), and for a class of jobs as ``sum N_FJ / sum (N_FJ + N_MJ)`` (the
category-level metric). Its Experiment 1 counts the jobs whose pairings "deviate significantly
from chance" (an exact binomial test against 0.5 per job) and its Table 5 sets each job's share
under the word prompt beside its share under the hiring prompt.

Each call pairs every job once, so calls are the independent units: a job's pairings are
independent across calls (Wilson interval, exact binomial test), but a category's are not (one
call pairs all ten female-dominated jobs with the same two names), so category intervals are also
given by a bootstrap over calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats.multiple import adjust
from biasim.analysis.stats.parity import wilson_interval
from biasim.analysis.studies.bias_transmission.answer_lines import (
    LINE_REASONS,
    PAIRED,
    parse_pairings,
)

#: Status of every item of a call that gave no valid answer (an error, or invalid after re-asks).
CALL_FAILED = "call failed"
#: Status of every item of an answer stopped at the role's max_tokens: the call worked, but a
#: cut list may lack its last pairs, so it is not read (told apart so that the exclusions do not
#: blame the backend for a cap the study set).
CUT_AT_CAP = "cut at max_tokens"


def unreadable_reason(fields: dict) -> str | None:
    """Why a result row's answer is not read (``CALL_FAILED`` or ``CUT_AT_CAP``), or None."""
    if not bool(fields["valid"]) or fields.get("text") is None:
        return CALL_FAILED
    return CUT_AT_CAP if bool(fields.get("truncated")) else None


def pairing_rows(
    results: pd.DataFrame, keys: Sequence[str], *, text: str = "text"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every item shown, with the target it was paired with, and the unused answer lines.

    Args:
        results: Rows of one pairing stage, with ``unit_id``, ``valid``, ``targets``,
            ``target_values`` and ``items`` (``|``-joined, in the order shown) and the answer.
        keys: Design columns kept on each item's row (e.g. the experiment).
        text: The answer column.

    Returns:
        ``(pairs, lines)``: ``pairs`` has one row per call and item shown with ``target``,
        ``value`` (the target's value, e.g. ``female``; empty unless paired), ``first_value``
        (the value of the target shown first) and ``outcome`` (``paired`` or why not);
        ``lines`` counts unused lines by ``keys`` and ``reason``.
    """
    keys = list(keys)
    records: list[tuple] = []
    line_counts: dict[tuple, int] = {}
    for row in results.itertuples(index=False):
        fields = row._asdict()
        key = tuple(fields[k] for k in keys)
        names = str(fields["targets"]).split("|")
        values = dict(zip(names, str(fields["target_values"]).split("|"), strict=True))
        items = str(fields["items"]).split("|")
        unread = unreadable_reason({**fields, "text": fields.get(text)})
        parsed = None if unread else parse_pairings(str(fields[text]), items, names)
        for item in items:
            status = unread if parsed is None else parsed.items[item]
            target = parsed.pairs.get(item, "") if parsed is not None else ""
            value = values[target] if target else ""
            records.append((*key, fields["unit_id"], item, target, value, values[names[0]], status))
        if parsed is not None:
            for reason, count in parsed.lines.items():
                line_counts[(*key, reason)] = line_counts.get((*key, reason), 0) + count
    columns = [*keys, "unit_id", "item", "target", "value", "first_value", "outcome"]
    pairs = pd.DataFrame.from_records(records, columns=columns)
    lines = pd.DataFrame(
        [(*k, n) for k, n in line_counts.items()], columns=[*keys, "reason", "lines"]
    )
    lines["reason"] = pd.Categorical(lines["reason"], categories=LINE_REASONS)
    return pairs, lines.sort_values([*keys, "reason"], ignore_index=True)


def chance_test(k: np.ndarray | int, n: np.ndarray | int) -> np.ndarray:
    """Exact two-sided binomial p-value of ``k`` in ``n`` against 0.5 (NaN where ``n`` is 0).

    Under 0.5 the distribution is symmetric, so the outcomes no likelier than ``k`` are the
    two tails beyond ``min(k, n - k)`` and ``max(k, n - k)``: ``p = min(1, 2 P(X <= min))``.
    """
    k, n = np.asarray(k), np.asarray(n)
    low = np.minimum(k, n - k)
    with np.errstate(invalid="ignore"):
        p = np.minimum(1.0, 2.0 * stats.binom.cdf(low, n, 0.5))
    return np.where(n > 0, p, np.nan)


def share_table(
    pairs: pd.DataFrame,
    by: Sequence[str],
    positive: str,
    *,
    alpha: float = 0.05,
    method: str = "none",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """The job-level metric per group: the share of pairings with a ``positive`` target.

    Args:
        pairs: From :func:`pairing_rows`.
        by: Group columns (e.g. the experiment and the item).
        positive: The value whose share is reported (e.g. ``female``).
        alpha: Level of the test against chance.
        method: Multiplicity adjustment across the groups of each experiment (the columns of
            ``by`` but the last): ``none`` (the paper's count), ``holm`` or ``bh``.
        confidence: Of the Wilson interval.

    Returns:
        Per group: ``n`` (pairings), ``n_<positive>``, ``share``, ``ci_low``, ``ci_high``,
        ``p_value``, ``p_adjusted``, ``deviates`` (``p_adjusted < alpha``), ``unit``
        (``call``) and ``n_units``.
    """
    by = list(by)
    paired = pairs[pairs["outcome"] == PAIRED]
    hits = (paired["value"] == positive).astype(int)
    table = (
        paired.assign(_hit=hits)
        .groupby(by, sort=False, observed=True)["_hit"]
        .agg(n="size", k="sum")
        .reset_index()
    )
    table["share"] = table["k"] / table["n"]
    table["ci_low"], table["ci_high"] = wilson_interval(table["k"], table["n"], _z(confidence))
    table["p_value"] = chance_test(table["k"].to_numpy(), table["n"].to_numpy())
    family = by[:-1]
    if family:
        table["p_adjusted"] = table.groupby(family, sort=False)["p_value"].transform(
            lambda p: adjust(p.to_numpy(), method)
        )
    else:
        table["p_adjusted"] = adjust(table["p_value"].to_numpy(), method)
    table["deviates"] = table["p_adjusted"] < alpha
    # Each call pairs every item once: an item's pairings are its calls, the test's units.
    table["unit"], table["n_units"] = "call", table["n"]
    return table.rename(columns={"k": f"n_{positive}"})


def category_table(
    pairs: pd.DataFrame,
    by: Sequence[str],
    positive: str,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """The category-level metric per group: ``sum k / sum n`` over the group's items.

    Args:
        pairs: From :func:`pairing_rows`, with the category column among ``by``.
        by: Group columns (e.g. the experiment and the job's dominance).
        positive: The value whose share is reported.
        confidence: Of both intervals.
        n_boot: Bootstrap resamples of calls.
        seed: Bootstrap seed.

    Returns:
        Per group: ``n``, ``n_<positive>``, ``share``, the Wilson interval (``ci_low``,
        ``ci_high``; treats pairings as independent, as the paper's N suggests) and the
        percentile interval of a bootstrap over calls (``boot_low``, ``boot_high``; calls are
        the independent units).
    """
    by = list(by)
    paired = pairs[pairs["outcome"] == PAIRED].assign(
        _hit=lambda d: (d["value"] == positive).astype(int)
    )
    rng = np.random.default_rng(seed)
    tail = (1 - confidence) / 2
    out = []
    for key, group in paired.groupby(by, sort=False, observed=True):
        calls = group.groupby("unit_id", sort=False)["_hit"].agg(["sum", "size"])
        k, n = int(calls["sum"].sum()), int(calls["size"].sum())
        draws = rng.integers(0, len(calls), size=(n_boot, len(calls)))
        shares = calls["sum"].to_numpy()[draws].sum(1) / calls["size"].to_numpy()[draws].sum(1)
        low, high = wilson_interval(np.array(k), np.array(n), _z(confidence))
        out.append(
            {
                **dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                "n": n,
                f"n_{positive}": k,
                "share": k / n,
                "ci_low": float(low),
                "ci_high": float(high),
                "boot_low": float(np.quantile(shares, tail)),
                "boot_high": float(np.quantile(shares, 1 - tail)),
                "calls": len(calls),
            }
        )
    return pd.DataFrame(out)


def newcombe_interval(
    k1: np.ndarray, n1: np.ndarray, k2: np.ndarray, n2: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's hybrid score interval (his method 10) for ``k1/n1 - k2/n2`` from the two
    Wilson intervals."""
    p1, p2 = np.asarray(k1) / np.asarray(n1), np.asarray(k2) / np.asarray(n2)
    l1, u1 = wilson_interval(k1, n1, _z(confidence))
    l2, u2 = wilson_interval(k2, n2, _z(confidence))
    d = p1 - p2
    return (
        d - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
        d + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2),
    )


def compare_shares(
    shares: pd.DataFrame, level: str, first: str, second: str, on: Sequence[str], positive: str
) -> pd.DataFrame:
    """Each item's share under two levels side by side with the difference (Table 5).

    Args:
        shares: From :func:`share_table`, grouped by ``level`` and ``on``.
        level: The column telling the two conditions apart (e.g. the experiment).
        first: The level whose share comes first (e.g. the word prompt).
        second: The level subtracted.
        on: Columns matching the rows (the item, and any descriptors to keep).
        positive: The value the shares count.

    Returns:
        Per item present under both: the two shares, their Wilson intervals, ``difference``
        (first - second) and its Newcombe interval.
    """
    keep = [*on, "n", f"n_{positive}", "share", "ci_low", "ci_high"]
    a = shares.loc[shares[level] == first, keep]
    b = shares.loc[shares[level] == second, keep]
    both = a.merge(b, on=list(on), suffixes=(f"_{first}", f"_{second}"))
    k1, n1 = both[f"n_{positive}_{first}"].to_numpy(), both[f"n_{first}"].to_numpy()
    k2, n2 = both[f"n_{positive}_{second}"].to_numpy(), both[f"n_{second}"].to_numpy()
    both["difference"] = both[f"share_{first}"] - both[f"share_{second}"]
    both["diff_low"], both["diff_high"] = newcombe_interval(k1, n1, k2, n2)
    return both


def consistent_pair_test(picks: pd.DataFrame, by: Sequence[str], positive: str) -> pd.DataFrame:
    """The test of a group's hires when every pair was shown in both orders: a sign test over
    pairs, each pair's readings (both orders, every reader) one unit.

    A pair leans to ``positive`` when its share of ``positive`` hires when shown first plus its
    share when shown second exceeds 1, to the other when below 1; a pair at exactly 1 (e.g. one
    reading per order, hired by position: split 1-1) says nothing about the group. Pairs seen
    in one order only do not enter: a position preference alone would lean them. With one
    reading per order this is the sign test on the pairs hired alike in both orders.

    Readings are not independent decisions: when letters differ in quality every reading of a
    pair leans the same way, which a binomial test on all readings ignores (it rejected a true
    null in 30 % of simulated studies with 3 readers per order).

    Args:
        picks: One row per reading: ``pair``, ``value`` (the hired author's group),
            ``position`` (1 or 2: where the hired letter was shown) and ``by``.
        by: Group columns (e.g. the stage and the job).
        positive: The group whose hires are counted.

    Returns:
        Per group: ``pairs`` (shown in both orders), ``both_<positive>`` (leaning to it),
        ``both_other``, ``split``, ``sign_p`` (exact, two-sided, against 0.5; NaN when no pair
        leaned), ``unit`` (``pair``), ``n_units`` (the pairs that lean: those the test uses)
        and ``smallest_p`` (the smallest p that many units can give).
    """
    hit = picks["value"] == positive
    first = hit == (picks["position"].astype(int) == 1)  # was ``positive`` shown first?
    counts = (
        picks.assign(_hit=hit.astype(int), _first=first)
        .groupby([*by, "pair", "_first"], sort=False)["_hit"]
        .agg(["sum", "size"])
        .unstack("_first", fill_value=0)
        .reindex(columns=pd.MultiIndex.from_product([["sum", "size"], [True, False]]))
        .fillna(0)
    )
    k1, k2 = counts[("sum", True)], counts[("sum", False)]
    n1, n2 = counts[("size", True)], counts[("size", False)]
    lean = np.sign(k1 * n2 + k2 * n1 - n1 * n2)  # k1/n1 + k2/n2 - 1, in integers
    per_pair = pd.DataFrame({"_lean": lean})[(n1 > 0) & (n2 > 0)].reset_index()
    table = (
        per_pair.assign(
            _pos=per_pair["_lean"] > 0, _neg=per_pair["_lean"] < 0, _split=per_pair["_lean"] == 0
        )
        .groupby(list(by), sort=False)[["_pos", "_neg", "_split"]]
        .sum()
        .astype(int)
        .reset_index()
        .rename(columns={"_pos": f"both_{positive}", "_neg": "both_other", "_split": "split"})
    )
    table.insert(len(by), "pairs", table[f"both_{positive}"] + table["both_other"] + table["split"])
    agreed = (table[f"both_{positive}"] + table["both_other"]).to_numpy()
    table["sign_p"] = chance_test(table[f"both_{positive}"].to_numpy(), agreed)
    # A split pair is not in the test: the units are the pairs that lean.
    table["unit"], table["n_units"] = "pair", agreed
    table["smallest_p"] = np.where(agreed > 0, np.minimum(1.0, 2.0 * 0.5**agreed), np.nan)
    return table


def position_effect(pairs: pd.DataFrame, by: Sequence[str], positive: str) -> pd.DataFrame:
    """How much naming a target first raises its pairings, with calls as the units.

    Every call draws which target is named first, so comparing the calls that named a
    ``positive`` target first with those that named it second measures the position effect:
    ``effect`` = half the difference of the ``positive`` share between them (the rise in the
    first-named target's share over 0.5). Pairings of one call share their order, so they are not
    independent; the test is Welch's t-test on the calls' shares.

    Returns:
        Per group: ``calls_first``, ``calls_second``, ``share_when_first``,
        ``share_when_second``, ``effect`` and ``p_value`` (NaN with fewer than two calls each).
    """
    paired = pairs[pairs["outcome"] == PAIRED]
    calls = (
        paired.assign(_hit=(paired["value"] == positive).astype(float))
        .groupby([*by, "unit_id", "first_value"], sort=False)["_hit"]
        .mean()
        .reset_index()
    )
    out = []
    for key, group in calls.groupby(list(by), sort=False) if by else [((), calls)]:
        first = group.loc[group["first_value"] == positive, "_hit"].to_numpy()
        second = group.loc[group["first_value"] != positive, "_hit"].to_numpy()
        enough = len(first) > 1 and len(second) > 1
        p = stats.ttest_ind(first, second, equal_var=False).pvalue if enough else np.nan
        out.append(
            {
                **dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                "calls_first": len(first),
                "calls_second": len(second),
                "share_when_first": float(first.mean()) if len(first) else np.nan,
                "share_when_second": float(second.mean()) if len(second) else np.nan,
                "effect": float(first.mean() - second.mean()) / 2 if enough else np.nan,
                "p_value": float(p),
            }
        )
    return pd.DataFrame(out)


def status_counts(pairs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Items shown per group and status (``paired`` and every reason for exclusion)."""
    return pairs.groupby([*by, "outcome"], sort=False).size().reset_index(name="items")


def _z(confidence: float) -> float:
    """The normal quantile of a two-sided ``confidence`` interval."""
    return float(stats.norm.ppf(0.5 + confidence / 2))
