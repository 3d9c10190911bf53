"""Summaries of Experiment 5 that the paper states in its text (seed 000, section 4.1, section 5
and Table 12): the overall mean (SD) of the scores by gender, the jobs whose hiring bias is
weaker than the association (LLM-IAT) bias, the change in women's hires when names are
redacted, and the terms of the "I would hire ... because ..." rationales by the chosen gender.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats


def overall_scores(scores: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per group, the mean and SD of every score pooled over traits and jobs (the paper's "male
    (M = 81.2, SD = 7.95) and female (M = 81.2, SD = 7.88)"), with the number of scores and of
    letters (``letter`` column)."""
    return (
        scores.groupby(group, observed=True)
        .agg(
            n_scores=("score", "size"),
            letters=("letter", "nunique"),
            mean=("score", "mean"),
            sd=("score", "std"),
        )
        .reset_index()
    )


def weaker_than_association(
    by_job: pd.DataFrame, association: pd.DataFrame, *, alpha: float
) -> pd.DataFrame:
    """Per stage and job, the hiring bias beside the association bias (section 4.1: "in the
    minority of cases (11/30) where gender bias in hiring is observed, the degree of bias is
    significantly weaker than the bias observed with the LLM IAT Bias measure").

    Args:
        by_job: Per ``stage`` and ``item`` (job): ``share``, ``boot_low``, ``boot_high`` (95%
            interval over pairs) and ``sign_p`` (the pair sign test).
        association: Per ``item``: ``association_share`` (the share of female names paired
            with the job, e.g. the paper's Table 5 Experiment 1 column).
        alpha: Level at which a job's hiring bias "is observed" (its sign test).

    Returns:
        Per stage and job: the shares, ``hiring_bias`` and ``association_bias`` (distance from
        0.5), ``observed`` (sign test p < alpha) and ``weaker`` (observed, and the pair-bootstrap
        95% interval of the hiring share lies entirely closer to 0.5 than the association share,
        on its side: a one-sided 2.5 % comparison that takes the association share as known).
    """
    table = by_job.merge(association[["item", "association_share"]], on="item", how="left")
    table["hiring_bias"] = (table["share"] - 0.5).abs()
    table["association_bias"] = (table["association_share"] - 0.5).abs()
    far = np.maximum((table["boot_low"] - 0.5).abs(), (table["boot_high"] - 0.5).abs())
    table["observed"] = table["sign_p"] < alpha
    table["weaker"] = table["observed"] & (far < table["association_bias"])
    columns = ["stage", "item", "share", "boot_low", "boot_high", "sign_p", "association_share"]
    return table[[*columns, "hiring_bias", "association_bias", "observed", "weaker"]]


def redaction_change(letter_shares: pd.DataFrame, named: str, redacted: str) -> dict:
    """Did women's letters win less once names were withheld (section 5)? Each woman's letter is
    read in one pair per stage (both orders), so its share of hires named minus redacted pairs
    it with itself and its quality cancels. The unit is the job: within a job the women's
    letters meet the same men's letters in both stages (drawn afresh), so their differences are
    dependent (one man's strong letter lowers a woman's share in each stage), while jobs share
    no letter. The test is the one-sample t over the jobs' mean differences.

    Args:
        letter_shares: Per ``stage``, ``job`` and ``letter`` (a woman's), ``share`` of its valid
            showings in which it was hired.
        named: The stage showing names.
        redacted: The stage withholding them.

    Returns:
        ``letters`` (read in both stages), ``units`` (jobs), the mean shares, ``difference``
        (named minus redacted, the mean over jobs), its 95% t interval and the two-sided p;
        NaN when fewer than 2 jobs have a letter read in both.
    """
    wide = letter_shares.pivot_table(index=["job", "letter"], columns="stage", values="share")
    present = [c for c in (named, redacted) if c in wide.columns]
    both = wide.dropna(subset=present) if len(present) == 2 else wide.iloc[0:0]
    per_job = (
        (both[named] - both[redacted]).groupby(level="job").mean()
        if len(both)
        else pd.Series(dtype=float)
    )
    out = {"named": named, "redacted": redacted, "unit": "job", "n_units": len(per_job)}
    out["letters"] = len(both)
    if len(per_job) < 2:
        nan = float("nan")
        return {
            **out,
            "share_named": nan,
            "share_redacted": nan,
            "difference": nan,
            "ci_low": nan,
            "ci_high": nan,
            "p_value": nan,
        }
    d = per_job
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    p = float(stats.ttest_1samp(d, 0.0).pvalue) if d.std(ddof=1) > 0 else 1.0
    return {
        **out,
        "share_named": float(both[named].mean()),
        "share_redacted": float(both[redacted].mean()),
        "difference": float(d.mean()),
        "ci_low": float(d.mean() - half),
        "ci_high": float(d.mean() + half),
        "p_value": p,
    }
