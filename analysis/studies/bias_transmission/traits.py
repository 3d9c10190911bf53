"""Absolute evaluations on the Bias-Transmission study's 13 dimensions, and the effect of the
applicant's gender on each (seed 000, Experiments 3-5, Tables 6-8).

The paper scores each cover letter 1-100 on 13 dimensions and fits, per trait, a beta regression
``trait ~ gender + (1 | job)`` with alpha = 0.001 "given large Ns" (Table 8). Near the score
ceiling (mean 81, clipped at 100) a beta model's test is anti-conservative, so each trait gets
three fits, all reported:

- the tested one (:mod:`.ceiling_effects`): a fractional logit with job fixed effects for the
  estimate, and a permutation of gender across letters within job for the p-value (the letter is
  the unit);
- the paper's, labelled so: a beta regression (logit link) with a random intercept per job,
  by maximum likelihood with adaptive Gauss-Hermite quadrature (:mod:`analysis.stats.beta_mixed`:
  statsmodels has no beta mixed model), its Wald z-test;
- a Gaussian linear mixed model of the logit of the score with a random intercept per job: the
  paper's random-effects structure, on the beta regression's scale.

Scores are mapped into (0, 1) by ``y = (score - 1) / 99`` and Smithson & Verkuilen's (2006)
squeeze ``(y (n - 1) + 0.5) / n`` (n = scores in the fit), since a beta model cannot take 0 or 1.

The paper also reports three trait types (hireability, competency, warmth; Tables 8-9) without
saying which dimensions form each: :data:`.trait_dimensions.TRAIT_TYPES` is biasim's grouping,
and a type's score is the mean of its dimensions per evaluation (one score per letter, not its
dimensions stacked, which would count one letter several times), fitted by the same two models.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.stats.beta_mixed import fit_beta_mixed
from biasim.analysis.stats.random_intercept import fit_random_intercept
from biasim.analysis.studies.bias_transmission import ceiling_effects

#: The effects tables' row of the paper's model: ``trait ~ gender + (1 | job)``, beta.
PAPERS_MODEL = "beta_job_random"
#: Why a trait score was excluded.
MISSING = "missing dimension"
NOT_A_NUMBER = "not a number"
OUT_OF_RANGE = "outside 1-100"
#: Why a trait type's score was not formed for an evaluation.
MEMBER_EXCLUDED = "a member score excluded"


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


def type_scores(
    frame: pd.DataFrame,
    types: dict[str, Sequence[str]],
    keys: Sequence[str],
    *,
    low: int = 1,
    high: int = 100,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per evaluation and trait type: the mean of the type's dimensions.

    An evaluation gets a type's score only when every member dimension has a usable score (see
    :func:`long_scores`); otherwise it is counted, since a mean over fewer dimensions would
    measure something else.

    Args:
        frame: One row per evaluation, a column per trait.
        types: Trait type -> its member dimensions (e.g. :data:`.trait_dimensions.TRAIT_TYPES`).
        keys: Columns kept (e.g. ``job``, ``gender``); exclusions are counted by them.
        low: Lowest valid score.
        high: Highest valid score.

    Returns:
        ``(scores, excluded)`` as :func:`long_scores`, with the type's name as ``trait`` and
        the reason ``a member score excluded``.
    """
    keys = list(keys)
    rows = frame.reset_index(drop=True).assign(_row=lambda d: np.arange(len(d)))
    kept, dropped = [], []
    for name, members in types.items():
        scores, _ = long_scores(rows, members, ["_row"], low=low, high=high)
        counts = scores.groupby("_row")["score"].agg(["mean", "size"])
        whole = counts[counts["size"] == len(members)]
        ok = rows["_row"].isin(whole.index)
        kept.append(
            rows.loc[ok, keys].assign(
                trait=name, score=whole["mean"].reindex(rows["_row"][ok]).to_numpy()
            )
        )
        dropped.append(rows.loc[~ok, keys].assign(trait=name, reason=MEMBER_EXCLUDED))
    excluded = (
        pd.concat(dropped, ignore_index=True)
        .groupby([*keys, "trait", "reason"], observed=True)
        .size()
        .reset_index(name="excluded")
    )
    return pd.concat(kept, ignore_index=True), excluded


def type_table(
    scores: pd.DataFrame, by: Sequence[str], group: str, first: str, second: str
) -> pd.DataFrame:
    """The paper's Table 9: per ``by`` (job, dominance, status) and trait type, each group's
    mean (SD) and the difference ``first`` minus ``second`` (the paper's female minus male).

    Args:
        scores: From :func:`type_scores`, with ``by`` and ``group`` among its columns.
        by: Columns describing the rows (the job and its attributes).
        group: The column of the two groups.
        first: The group subtracted from.
        second: The group subtracted.

    Returns:
        ``by``, ``trait_type``, ``n_<g>``, ``mean_<g>``, ``sd_<g>`` for both groups and
        ``difference``.
    """
    stats_ = trait_means(scores, [*by, group])
    wide = stats_.pivot_table(
        index=[*by, "trait"], columns=group, values=["n", "mean", "sd"], observed=True
    )
    out = pd.DataFrame(index=wide.index)
    for g in (first, second):
        for stat in ("n", "mean", "sd"):
            out[f"{stat}_{g}"] = wide[(stat, g)] if (stat, g) in wide.columns else np.nan
        out[f"n_{g}"] = out[f"n_{g}"].fillna(0).astype(int)
    out["difference"] = out[f"mean_{first}"] - out[f"mean_{second}"]
    return out.reset_index().rename(columns={"trait": "trait_type"})


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
    unit: str | None = None,
    n_permutations: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per trait, the effect of ``group`` (the other value against ``reference``, e.g. men's
    letters against women's, or strong against weak) on the score.

    Args:
        scores: From :func:`long_scores`, with the ``group`` and ``cluster`` columns.
        group: The column of the two groups compared (e.g. gender).
        reference: The group the other is compared against (the paper's is female:
            its term is ``gendermale``).
        cluster: The grouping with its own intercept (the job).
        alpha: Level of the tests (the paper's 0.001).
        unit: The column naming the letter each score is of (several scores of one letter are
            one unit); ``None``: each score is its own unit.
        n_permutations: Relabellings of the tested model's permutation test.
        seed: Seed of those relabellings.

    Returns:
        Per trait and model: ``fractional_logit_perm`` (the tested one, see
        :mod:`.ceiling_effects`), ``beta_job_random`` (the paper's model) and ``logit_mixed``;
        ``role`` says which is which. Columns ``term`` (the other value), ``reference``,
        ``estimate`` (on the logit of the score), ``std_error``, ``statistic`` (z; for the
        tested model the compared group's sum of job-centred scores), ``p_value``,
        ``significant``, ``n``, ``unit``, ``units`` and ``warning`` (what the fit warned of,
        e.g. a job variance estimated at 0, or why there is no estimate; empty when nothing).
    """
    rows = []
    for trait, data in scores.groupby("trait", sort=False):
        other = sorted(set(data[group]) - {reference})
        if len(other) > 1:
            raise ValueError(f"`{group}` needs one value besides `{reference}`, not {other}")
        other = other or ["(none)"]  # only the reference group has scores: nothing to fit
        data = data.assign(
            _y=squeeze(data["score"]),
            _x=(data[group] == other[0]).astype(float),
            _c=data[cluster].astype(str),
            _u=data[unit].astype(str) if unit else np.arange(len(data)).astype(str),
        )
        data = data.assign(_logit=np.log(data["_y"] / (1 - data["_y"])))
        common = {"trait": trait, "term": str(other[0]), "reference": reference, "n": len(data)}
        common["unit"] = unit or "score"
        rows += [{**common, **row} for row in _trait_fits(data, n_permutations, seed)]
    columns = ["trait", "model", "role", "term", "reference", "estimate", "std_error"]
    columns += ["statistic", "p_value", "n", "unit", "n_units", "warning"]
    table = pd.DataFrame(rows, columns=columns)
    table["role"] = table["model"].map(ceiling_effects.ROLES)
    table["significant"] = table["p_value"] < alpha
    return table


def _trait_fits(data: pd.DataFrame, n_permutations: int, seed: int) -> list[dict[str, Any]]:
    """One trait's rows: the tested model first, then the paper's and the mixed model."""
    out = []
    for model in (ceiling_effects.MODEL, PAPERS_MODEL, "logit_mixed"):
        # A fit's warnings (e.g. a job variance at its boundary of 0) go into the table.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if model == ceiling_effects.MODEL:
                row, note = _tested(data, n_permutations, seed)
            else:
                row, note = _fit(model, data)
        notes = sorted({str(w.message).split(".")[0] for w in caught})
        out.append({**row, "warning": "; ".join([*([note] if note else []), *notes])})
    return out


def _tested(data: pd.DataFrame, n_permutations: int, seed: int) -> tuple[dict[str, Any], str]:
    """The tested model's row, or NaN and why when there is too little to fit."""
    sizes = data.groupby("_x")["_u"].nunique()
    if len(sizes) < 2 or sizes.min() < 2 or data["_c"].nunique() < 2:
        empty = {"estimate": np.nan, "std_error": np.nan, "statistic": np.nan, "p_value": np.nan}
        return {"model": ceiling_effects.MODEL, **empty, "n_units": data["_u"].nunique()}, (
            "too few scores to fit (2 per group and 2 jobs at least)"
        )
    return ceiling_effects.tested_row(data, n_permutations=n_permutations, seed=seed), ""


def _fit(model: str, data: pd.DataFrame) -> tuple[dict[str, Any], str]:
    """One model's row and a note on the fit (NaN and why when there is nothing to fit)."""
    row: dict[str, Any] = {"model": model, "n_units": data["_u"].nunique()}
    empty = dict.fromkeys(("estimate", "std_error", "statistic", "p_value"), np.nan)
    sizes = data.groupby("_x").size()
    if len(sizes) < 2 or sizes.min() < 2 or data["_c"].nunique() < 2:
        return {**row, **empty}, "too few scores to fit (2 per group and 2 jobs at least)"
    x = np.column_stack([np.ones(len(data)), data["_x"].to_numpy()])
    if model == PAPERS_MODEL:
        try:
            beta = fit_beta_mixed(data["_y"].to_numpy(), x, data["_c"].to_numpy())
        except (np.linalg.LinAlgError, ValueError) as exc:
            return {**row, **empty}, f"fit failed: {exc}"
        values = (beta.params[1], beta.bse[1], beta.tvalues[1], beta.pvalues[1])
        note = "" if beta.converged else "the beta mixed model's optimizer did not converge"
        return {**row, **dict(zip(empty, map(float, values), strict=True))}, note
    fit = fit_random_intercept(data["_logit"].to_numpy(), x, data["_c"].to_numpy())
    values = (fit.params[1], fit.bse[1], fit.tvalues[1], fit.pvalues[1])
    # A job variance of 0 is a legitimate estimate (jobs that do not differ); the fit is then
    # ordinary least squares, which the reader should know.
    note = "job variance estimated at 0: the least-squares fit" if fit.on_boundary else ""
    return {**row, **dict(zip(empty, map(float, values), strict=True))}, note
