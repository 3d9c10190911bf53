"""Model-based estimates of the decision kinds (``analysis.stats.unit_models``): each group's
odds ratio from the cluster-robust GEE and the crossed mixed model, per fitted case, and with
several models their grades; each table declared once in its codebook
(``unit_models.tables.yaml``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from biasim.simulator.kinds.base import AnalysisContext, Section, slug
from biasim.simulator.kinds.lazy import figures, grading, pd, unit_models
from biasim.simulator.kinds.sections.codebook import tables_of

#: The numbers of a fit, left out where it did not converge.
_FIT_NUMBERS = ("estimate", "se", "ci_low", "ci_high", "p_value", "odds_ratio", "or_low", "or_high")


def _unfitted(row: dict[str, Any]) -> bool:
    """A model that was not fitted (e.g. every unit answers alike): its row says nothing."""
    return not row["converged"] and str(row.get("note") or "").startswith("not fitted")


#: The tables of the estimates and the grades, declared in unit_models.tables.yaml.
TABLES = tables_of(__name__)
MODEL_ESTIMATES = replace(TABLES["model_estimates"], says_nothing=_unfitted)


def add_model_estimates(
    section: Section,
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    fit_cols: list[str],
    group_col: str,
    hit_col: str,
    unit_col: str,
    item_col: str | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Fit both models in every combination of ``fit_cols``; return their table and, with
    several models, the models' grades (their figures into ``section``)."""
    parts = []
    for key, part in rows.groupby(fit_cols, sort=True, dropna=False):
        where = dict(zip(fit_cols, key if isinstance(key, tuple) else (key,), strict=True))
        for fit in (unit_models.gee_odds_ratios, unit_models.mixed_odds_ratios):
            table = fit(part, group_col, hit_col, unit_col, item_col)
            parts.append(table.assign(**where))
    columns = [*fit_cols, *unit_models.COLUMNS]
    table = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    # A fit that did not converge (e.g. separation) is not to be read: its numbers (an odds
    # ratio of 10^18, p 0.000) are left out of every route alike; its note says why.
    table.loc[~table["converged"].astype(bool), list(_FIT_NUMBERS)] = np.nan
    grades = None
    if "model_label" in fit_cols and table["model_label"].nunique() > 1:
        grades = _add_grades(section, ctx, table, [c for c in fit_cols if c != "model_label"])
    return table, grades


def _add_grades(
    section: Section, ctx: AnalysisContext, table: pd.DataFrame, keys: list[str]
) -> pd.DataFrame:
    """Grade the models by their GEE estimates, contrast by contrast (one figure per contrast
    into ``section``), and return the grades."""
    every = table[table["model"].str.startswith("GEE")]
    contrast = [*keys, "group", "reference"]
    grades = grading.grade_models(every[every["converged"].astype(bool)], contrast_cols=contrast)
    for key, part in grades.groupby(contrast, sort=True):
        label = " / ".join(map(str, key[:-2])) + (": " if key[:-2] else "")
        section.figures[slug(ctx.name, "model_grades", *map(str, key))] = figures.plot_model_grades(
            part,
            missing=_ungraded(every, contrast, key, part),
            title=f"{label}{key[-2]} vs {key[-1]}",
        )
    return grades


def _ungraded(
    every: pd.DataFrame, contrast: list[str], key: tuple, graded: pd.DataFrame
) -> dict[str, str]:
    """Model -> why it has no grade in this contrast (its figure names it, not drops it)."""
    rows = every[(every[contrast] == pd.Series(key, index=contrast)).all(axis=1)]
    rows = rows[~rows["model_label"].isin(graded["model_label"])]
    return {str(row.model_label): _why_ungraded(row) for row in rows.itertuples()}


def _why_ungraded(row: Any) -> str:
    if isinstance(row.note, str) and row.note:
        return row.note
    return "did not converge" if not row.converged else "no standard error"
