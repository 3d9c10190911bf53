"""Absolute evaluations on the Bias-Transmission study's 13 dimensions, and the effect of the
applicant's gender on each (seed 000, Experiments 3-5, Tables 6-8).

The paper scores each cover letter 1-100 on 13 dimensions and fits, per trait, a beta regression
``trait ~ gender + (1 | job)`` with alpha = 0.001 "given large Ns" (Table 8). statsmodels has no
beta mixed model, so each trait gets two fits, both reported:

- a beta regression (logit link) with the job as fixed effects: the paper's model with the
  job's random intercept replaced by a fixed one (the gender estimate is the same quantity, a
  shift of the mean's logit);
- a Gaussian linear mixed model of the logit of the score with a random intercept per job: the
  paper's random-effects structure, on the beta regression's scale.

Scores are mapped into (0, 1) by ``y = (score - 1) / 99`` and Smithson & Verkuilen's (2006)
squeeze ``(y (n - 1) + 0.5) / n`` (n = scores in the fit), since a beta model cannot take 0 or 1.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from statsmodels.othermod.betareg import BetaModel

#: The 13 dimensions of the paper's absolute-evaluation prompt (Table 1), as answer fields.
DIMENSIONS = (
    "hireability",
    "confidence",
    "work_ethic",
    "ambition",
    "problem_solving",
    "competency",
    "trustworthiness",
    "friendliness",
    "creativity",
    "teamwork",
    "communication",
    "promoted",
    "salary",
)
#: Why a trait score was excluded.
MISSING = "missing dimension"
NOT_A_NUMBER = "not a number"
OUT_OF_RANGE = "outside 1-100"


def long_scores(
    frame: pd.DataFrame,
    traits: Sequence[str],
    keys: Sequence[str],
    *,
    low: int = 1,
    high: int = 100,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per evaluation and trait with a usable score, and the others counted.

    Args:
        frame: One row per evaluation, a column per trait (missing or NaN where not given).
        traits: The trait columns.
        keys: Columns kept (e.g. ``job``, ``gender``); exclusions are counted by them.
        low: Lowest valid score.
        high: Highest valid score.

    Returns:
        ``(scores, excluded)``: ``scores`` has ``keys``, ``trait`` and ``score``; ``excluded``
        counts by ``keys``, ``trait`` and ``reason`` the scores left out (a missing dimension,
        a non-number, a number outside ``low``-``high`` or not whole), never coerced.
    """
    keys = list(keys)
    kept, dropped = [], []
    for trait in traits:
        raw = frame[trait] if trait in frame else pd.Series(np.nan, index=frame.index)
        number = pd.to_numeric(raw, errors="coerce")
        reason = pd.Series("", index=frame.index, dtype=object)
        reason[raw.isna()] = MISSING
        reason[raw.notna() & number.isna()] = NOT_A_NUMBER
        bad_range = number.notna() & ((number < low) | (number > high) | (number % 1 != 0))
        reason[bad_range] = OUT_OF_RANGE
        ok = reason == ""
        kept.append(frame.loc[ok, keys].assign(trait=trait, score=number[ok].astype(float)))
        dropped.append(frame.loc[~ok, keys].assign(trait=trait, reason=reason[~ok]))
    scores = pd.concat(kept, ignore_index=True)
    excluded = (
        pd.concat(dropped, ignore_index=True)
        .groupby([*keys, "trait", "reason"], observed=True)
        .size()
        .reset_index(name="excluded")
    )
    return scores, excluded


def trait_means(scores: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean, SD and count of the scores per ``by`` and trait (Table 6 per job and gender)."""
    return (
        scores.groupby([*by, "trait"], observed=True)["score"]
        .agg(n="size", mean="mean", sd="std")
        .reset_index()
    )


def squeeze(score: pd.Series | np.ndarray, low: int = 1, high: int = 100) -> np.ndarray:
    """Scores mapped into the open interval (0, 1) (Smithson & Verkuilen 2006)."""
    y = (np.asarray(score, dtype=float) - low) / (high - low)
    n = y.size
    return (y * (n - 1) + 0.5) / n


def group_effects(
    scores: pd.DataFrame,
    *,
    group: str = "gender",
    reference: str,
    cluster: str = "job",
    alpha: float = 0.001,
) -> pd.DataFrame:
    """Per trait, the effect of ``group`` (the other value against ``reference``, e.g. men's
    letters against women's, or strong against weak) on the score's logit.

    Args:
        scores: From :func:`long_scores`, with the ``group`` and ``cluster`` columns.
        group: The column of the two groups compared (e.g. gender).
        reference: The group the other is compared against (the paper's is female:
            its term is ``gendermale``).
        cluster: The grouping with its own intercept (the job).
        alpha: Level of the tests (the paper's 0.001).

    Returns:
        Per trait and model (``beta_job_fixed``, ``logit_mixed``): ``term`` (the other value),
        ``reference``, ``estimate``, ``std_error``, ``statistic`` (z), ``p_value``,
        ``significant``, ``n`` and ``warning`` (what the fit warned of, e.g. a job variance
        estimated at 0; empty when nothing).
    """
    rows = []
    for trait, data in scores.groupby("trait", sort=False):
        other = sorted(set(data[group]) - {reference})
        if len(other) != 1:
            raise ValueError(f"`{group}` needs exactly one value besides `{reference}`: {other}")
        data = data.assign(
            _y=squeeze(data["score"]),
            _x=(data[group] == other[0]).astype(float),
            _c=data[cluster].astype(str),
        )
        term = str(other[0])
        fits = []
        for model, build in (
            ("beta_job_fixed", lambda d: BetaModel.from_formula("_y ~ _x + C(_c)", d)),
            (
                "logit_mixed",
                lambda d: smf.mixedlm(
                    "_logit ~ _x", d.assign(_logit=np.log(d["_y"] / (1 - d["_y"]))), groups="_c"
                ),
            ),
        ):
            # A fit's warnings (e.g. a job variance at its boundary of 0) go into the table.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = build(data).fit(disp=0) if model == "beta_job_fixed" else build(data).fit()
            notes = sorted({str(w.message).split(".")[0] for w in caught})
            fits.append((model, fit, "; ".join(notes)))
        for model, fit, note in fits:
            rows.append(
                {
                    "trait": trait,
                    "model": model,
                    "term": term,
                    "reference": reference,
                    "estimate": float(fit.params["_x"]),
                    "std_error": float(fit.bse["_x"]),
                    "statistic": float(fit.tvalues["_x"]),
                    "p_value": float(fit.pvalues["_x"]),
                    "n": len(data),
                    "warning": note,
                }
            )
    table = pd.DataFrame(rows)
    table["significant"] = table["p_value"] < alpha
    return table
