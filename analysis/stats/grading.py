"""Many models (or scenarios, or manager personas) at once: each one's disparity shrunk toward
the common mean by empirical Bayes, a q-value for "this one discriminates", and a grade, as
Kline, Rose & Walters (2022) grade employers from a correspondence audit.

Input is one estimate per model with its standard error (here the cluster-robust log odds
ratio of a group against the reference, so the units are respected). The model is normal-normal:
``estimate_m ~ N(theta_m, se_m^2)``, ``theta_m ~ N(mu, tau^2)``; ``mu`` and ``tau^2`` by the
DerSimonian-Laird moment estimator, and each ``theta_m``'s posterior mean and sd given them.
"This one discriminates" is the two-sided test of ``theta_m = 0`` from its own estimate: the
fit's own p where the table has one (the GEE's, on Student's t with its units' df, none where
a group has one unit: such a row is left out), else the z-test; q-values by
Benjamini-Hochberg over every model and contrast tested together. Re-testing the GEE's
estimate on the normal scale would bring back the anti-conservative p its own test replaced.

Grades: ``discriminates`` (q < 0.05), ``suggestive`` (q < 0.20), ``no evidence`` otherwise; the
direction says who is favoured. Shrinkage ranks the models; the grade never rests on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats.multiple import benjamini_hochberg

#: q-value bands of the grades, strictest first.
GRADES: tuple[tuple[float, str], ...] = ((0.05, "discriminates"), (0.20, "suggestive"))


def shrink(estimate: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Posterior means and sds of the true effects, with the common mean and ``tau^2``
    (DerSimonian-Laird; ``tau^2 = 0`` shrinks every model to the precision-weighted mean)."""
    estimate, se = np.asarray(estimate, dtype=float), np.asarray(se, dtype=float)
    w = 1 / se**2
    fixed = float((w * estimate).sum() / w.sum())
    q = float((w * (estimate - fixed) ** 2).sum())
    scale = w.sum() - (w**2).sum() / w.sum()
    tau2 = max(0.0, (q - (estimate.size - 1)) / scale) if scale > 0 else 0.0
    weights = 1 / (se**2 + tau2)
    mu = float((weights * estimate).sum() / weights.sum())
    keep = tau2 / (tau2 + se**2)
    return mu + keep * (estimate - mu), np.sqrt(keep * se**2), mu, tau2


def grade_models(
    table: pd.DataFrame,
    *,
    model_col: str = "model_label",
    contrast_cols: Sequence[str] = ("group", "reference"),
    estimate_col: str = "estimate",
    se_col: str = "se",
) -> pd.DataFrame:
    """Shrink, test and grade every model's estimate, contrast by contrast.

    Args:
        table: One row per model and contrast with an estimate and its standard error, and
            optionally the fit's ``p_value``; rows with a missing or non-positive se, or a
            missing ``p_value`` where the column is given, are left out (a model that was not
            fitted, or whose fit could not test the contrast).

    Returns:
        The rows kept, with ``z``, ``p_value``, ``q_value`` (BH over every row), ``shrunk``,
        ``shrunk_sd``, ``common_mean``, ``tau`` (sd of the true effects across models),
        ``rank`` (1 = largest shrunk effect in absolute value, per contrast), ``grade`` and
        ``direction`` (``favours <group>`` / ``favours <reference>`` when graded, else empty).
    """
    keys = list(contrast_cols)
    own_p = "p_value" in table.columns
    usable = table[se_col].gt(0) & table[estimate_col].notna()
    if own_p:
        usable &= table["p_value"].notna()
    data = table[usable].reset_index(drop=True)
    if data.empty:
        return data.assign(
            z=[],
            p_value=[],
            q_value=[],
            shrunk=[],
            shrunk_sd=[],
            common_mean=[],
            tau=[],
            rank=[],
            grade=[],
            direction=[],
        )
    out = data.assign(z=data[estimate_col] / data[se_col])
    if not own_p:
        out["p_value"] = 2 * stats.norm.sf(np.abs(out["z"]))
    out["q_value"] = benjamini_hochberg(out["p_value"].to_numpy())
    parts = []
    for _, part in out.groupby(keys, sort=False):
        shrunk, sd, mu, tau2 = shrink(part[estimate_col].to_numpy(), part[se_col].to_numpy())
        part = part.assign(shrunk=shrunk, shrunk_sd=sd, common_mean=mu, tau=np.sqrt(tau2))
        part["rank"] = part["shrunk"].abs().rank(ascending=False, method="min").astype(int)
        parts.append(part)
    out = pd.concat(parts).sort_index()
    grade = np.full(len(out), "no evidence", dtype=object)
    for level, name in reversed(GRADES):
        grade[out["q_value"].to_numpy() < level] = name
    out["grade"] = grade
    favoured = np.where(out[estimate_col] > 0, out[keys[0]].astype(str), out[keys[-1]].astype(str))
    out["direction"] = np.where(grade != "no evidence", "favours " + favoured, "")
    return out
