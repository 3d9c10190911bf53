"""Model-based estimates of the decision kinds (``analysis.stats.unit_models``): each group's
odds ratio from the cluster-robust GEE and the crossed mixed model, per fitted case, and with
several models their grades; each table declared once as a table of the result."""

from __future__ import annotations

from typing import Any

import numpy as np

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import ResultTable
from biasim.simulator.kinds.base import AnalysisContext, Section, slug
from biasim.simulator.kinds.lazy import figures, grading, pd, unit_models
from biasim.simulator.kinds.sections.columns import interval

NOTE = (
    "Odds ratio of each group against the reference, with a 95% interval that respects the "
    "unit: GEE = logistic model with the item as fixed effects and a covariance clustered on "
    "the unit; mixed = logistic model with crossed random intercepts for the unit and the item "
    "(Laplace approximation, as lme4's glmer). The mixed model prints no p-value: its interval "
    "is conditional on the estimated variances and too narrow with few units (it excluded a "
    "true null in 12 % of simulated studies with 20 names per group), so read it as an "
    "estimate and test with the GEE (calibrated: 3-7 %). 'no' under converged: the fit did "
    "not converge, its numbers are left out (not to be read) and its note says why."
)


#: The numbers of a fit, left out where it did not converge.
_FIT_NUMBERS = ("estimate", "se", "ci_low", "ci_high", "p_value", "odds_ratio", "or_low", "or_high")


def _unfitted(row: dict[str, Any]) -> bool:
    """A model that was not fitted (e.g. every unit answers alike): its row says nothing."""
    return not row["converged"] and str(row.get("note") or "").startswith("not fitted")


#: The contrast a row estimates, in the estimates and the grades alike.
_CONTRAST = (
    Column("group", "group", description="The group compared."),
    Column("reference", "vs", description="The reference group."),
)

MODEL_ESTIMATES = ResultTable(
    key="model_estimates",
    title="Model-based estimates: odds ratio against the reference group",
    columns=(
        Column("model", "model", description="GEE or the crossed mixed model."),
        *_CONTRAST,
        Column("p_value", "p", "p", description="Wald p (GEE; none for the mixed model)."),
        Column("odds_ratio", "OR", ".2f", description="Odds ratio against the reference."),
        interval("or_low", "or_high", "Its 95% interval, respecting the unit."),
        Column("n_units", "units", "int", description="Units (clusters) fitted."),
        Column("unit", "unit", description="What a unit is."),
        Column("converged", "converged", "bool", description="Whether the fit converged."),
        Column("note", "note", description="Why a fit is not to be read, if so."),
    ),
    description="Model-based group estimates per fit.",
    note=NOTE,
    says_nothing=_unfitted,
    why="the model was not fitted (the CSV table's note says why)",
)


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


GRADES_NOTE = (
    "Each model's cluster-robust log odds ratio (GEE) against the reference group; shrunk = "
    "empirical-Bayes posterior mean toward the models' common mean (DerSimonian-Laird); "
    "q = Benjamini-Hochberg over every model and contrast; grade: discriminates (q < 0.05), "
    "suggestive (q < 0.20), no evidence. Kline, Rose & Walters (2022) grade employers so."
)


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


GRADES = ResultTable(
    key="model_grades",
    title="Models graded by their disparity (empirical Bayes, BH q-values)",
    columns=(
        *_CONTRAST,
        Column("estimate", "log OR", "+.3f", description="The model's GEE log odds ratio."),
        Column("q_value", "q (BH)", ".3f", description="BH q over every model and contrast."),
        Column("shrunk", "shrunk", "+.3f", description="Empirical-Bayes posterior mean."),
        Column("shrunk_sd", "sd", ".3f", description="Its posterior sd."),
        Column("rank", "rank", "int", description="1 = largest shrunk effect."),
        Column("grade", "grade", description="discriminates, suggestive or no evidence."),
        Column("direction", "direction", description="The group favoured, when graded."),
    ),
    description="Each model's grade across fits.",
    note=GRADES_NOTE,
    # Every graded estimate is the GEE's: the column would say so on every row.
    hide=("model",),
)


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
