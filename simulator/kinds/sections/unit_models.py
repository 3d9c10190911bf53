"""How the decision kinds show model-based estimates (``analysis.stats.unit_models``): each
group's odds ratio from the cluster-robust GEE and the crossed mixed model, per fitted case,
in a table, the summary, the console and the page."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.common.tables import Hidden, print_table
from biasim.simulator.kinds.base import AnalysisContext, Section, slug
from biasim.simulator.kinds.lazy import figures, grading, pd, unit_models

NOTE = (
    "Odds ratio of each group against the reference, with a 95% interval that respects the "
    "unit: GEE = logistic model with the item as fixed effects and a covariance clustered on "
    "the unit; mixed = logistic model with crossed random intercepts for the unit and the item "
    "(Laplace approximation, as lme4's glmer). The mixed model prints no p-value: its interval "
    "is conditional on the estimated variances and too narrow with few units (it excluded a "
    "true null in 12 % of simulated studies with 20 names per group), so read it as an "
    "estimate and test with the GEE (calibrated: 3-7 %). 'no' under converged: the estimate "
    "is not to be read (see note)."
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
) -> None:
    """Fit both models in every combination of ``fit_cols`` and put the table
    (``<name>_model_estimates``) and its records (``model_estimates``) into ``section``."""
    parts = []
    for key, part in rows.groupby(fit_cols, sort=True, dropna=False):
        where = dict(zip(fit_cols, key if isinstance(key, tuple) else (key,), strict=True))
        for fit in (unit_models.gee_odds_ratios, unit_models.mixed_odds_ratios):
            table = fit(part, group_col, hit_col, unit_col, item_col)
            parts.append(table.assign(**where))
    columns = [*fit_cols, *unit_models.COLUMNS]
    table = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    section.tables[f"{ctx.name}_model_estimates"] = table
    section.summary["model_estimates"] = table.to_dict("records")
    section.summary["model_estimates_item"] = item_col
    if "model_label" in fit_cols and table["model_label"].nunique() > 1:
        _add_grades(section, ctx, table, [c for c in fit_cols if c != "model_label"])


GRADES_NOTE = (
    "Each model's cluster-robust log odds ratio (GEE) against the reference group; shrunk = "
    "empirical-Bayes posterior mean toward the models' common mean (DerSimonian-Laird); "
    "q = Benjamini-Hochberg over every model and contrast; grade: discriminates (q < 0.05), "
    "suggestive (q < 0.20), no evidence. Kline, Rose & Walters (2022) grade employers so."
)


def _add_grades(section: Section, ctx: AnalysisContext, table: pd.DataFrame, keys: list[str]):
    """Grade the models by their GEE estimates, contrast by contrast (``<name>_model_grades``,
    ``model_grades`` and one figure per contrast)."""
    every = table[table["model"].str.startswith("GEE")]
    contrast = [*keys, "group", "reference"]
    grades = grading.grade_models(every[every["converged"].astype(bool)], contrast_cols=contrast)
    section.tables[f"{ctx.name}_model_grades"] = grades
    section.summary["model_grades"] = grades.to_dict("records")
    for key, part in grades.groupby(contrast, sort=True):
        label = " / ".join(map(str, key[:-2])) + (": " if key[:-2] else "")
        section.figures[slug(ctx.name, "model_grades", *map(str, key))] = figures.plot_model_grades(
            part,
            missing=_ungraded(every, contrast, key, part),
            title=f"{label}{key[-2]} vs {key[-1]}",
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


def print_model_estimates(rows: list[dict[str, Any]], keys: list[str], console: Console) -> None:
    """The estimates as a console table, then the note."""
    if not rows:
        return
    table = Table(title="Model-based estimates: odds ratio against the reference group")
    for col in (*keys, "model", "group", "vs", "OR", "95% CI", "p", "units", "converged"):
        table.add_column(col, justify="right")
    fitted = [row for row in rows if not _unfitted(row)]
    for row in fitted:
        # An estimate that did not converge (e.g. separation) is not to be read: its numbers
        # (an odds ratio of 10^8, p 0.000) are left out of the console, kept in the CSV.
        read = bool(row["converged"])
        table.add_row(
            *[str(row[c]) for c in keys],
            _model_name(row["model"]),
            str(row["group"]),
            str(row["reference"]),
            fmt(row["odds_ratio"], ".2f") if read else "-",
            f"[{fmt(row['or_low'], '.2f')}, {fmt(row['or_high'], '.2f')}]" if read else "-",
            format_p(row["p_value"]).removeprefix("= ") if read else "-",
            f"{row['n_units']} {row['unit']}",
            "yes" if read else f"no: {row['note']}",
        )
    print_table(console, table, _hidden_unfitted(rows, keys))
    if fitted:
        console.print(NOTE)


def _unfitted(row: dict[str, Any]) -> bool:
    """A model that was not fitted (e.g. every unit answers alike): its row says nothing."""
    return not row["converged"] and str(row.get("note") or "").startswith("not fitted")


def _hidden_unfitted(rows: list[dict[str, Any]], keys: list[str]) -> Hidden:
    """The unfitted models, each named by the table's key columns (model, group vs reference)."""
    unfitted = [row for row in rows if _unfitted(row)]
    reasons = sorted({str(row["note"]).removeprefix("not fitted: ") for row in unfitted})
    names = tuple(
        " ".join([*(str(row[k]) for k in keys), _model_name(row["model"])])
        + f" {row['group']} vs {row['reference']}"
        for row in unfitted
    )
    return Hidden(names, "the model was not fitted: " + "; ".join(reasons))


def _model_name(model: str) -> str:
    """The model as the table's ``model`` column shows it."""
    return "GEE" if model.startswith("GEE") else "mixed"


def print_grades(rows: list[dict[str, Any]], console: Console) -> None:
    """The graded models as a console table, then the note."""
    if not rows:
        return
    keys = [
        k for k in rows[0] if k not in _GRADE_SHOWN and k not in unit_models.COLUMNS and k != "z"
    ]
    table = Table(title="Models graded by their disparity (empirical Bayes, BH q-values)")
    for col in ("model", *keys, "group", "vs", "log OR", "shrunk", "q", "rank", "grade"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            str(row["model_label"]),
            *[str(row[k]) for k in keys],
            str(row["group"]),
            str(row["reference"]),
            fmt(row["estimate"], "+.3f"),
            f"{fmt(row['shrunk'], '+.3f')} ± {fmt(row['shrunk_sd'], '.3f')}",
            fmt(row["q_value"]),
            str(row["rank"]),
            f"{row['grade']} {row['direction']}".strip(),
        )
    print_table(console, table)
    console.print(GRADES_NOTE)


_GRADE_SHOWN = (
    "model_label",
    "p_value",
    "q_value",
    "shrunk",
    "shrunk_sd",
    "common_mean",
    "tau",
    "rank",
    "grade",
    "direction",
)


def html_grades(section: HtmlSection, rows: list[dict[str, Any]]) -> None:
    """The same table in the page, with the figures."""
    if not rows:
        return
    keys = [
        k for k in rows[0] if k not in _GRADE_SHOWN and k not in unit_models.COLUMNS and k != "z"
    ]
    section.table(
        rows,
        key="model_grades",
        title="Models graded by their disparity",
        columns=[
            Column("model_label", "model"),
            *[Column(k) for k in keys],
            Column("group", "group", "text"),
            Column("reference", "reference", "text"),
            Column("estimate", "log OR", "+.3f"),
            Column("shrunk", "shrunk", "+.3f"),
            Column("shrunk_sd", "sd", ".3f"),
            Column("q_value", "q (BH)", ".3f"),
            Column("rank", "rank", "int"),
            Column("grade", "grade", "text"),
            Column("direction", "direction", "text"),
        ],
        note=GRADES_NOTE,
    )
    for name in section.figures:
        if "_model_grades" in name:
            section.figure(name, "Models graded by their disparity")


def html_model_estimates(section: HtmlSection, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """The same table in the page."""
    if not rows:
        return
    section.table(
        rows,
        key="model_estimates",
        title="Model-based estimates: odds ratio against the reference group",
        columns=[
            *[Column(k) for k in keys],
            Column("model", "model", "text"),
            Column("group", "group", "text"),
            Column("reference", "reference", "text"),
            Column("odds_ratio", "odds ratio", ".2f"),
            Column("or_low", "95% CI", "ci", upper="or_high"),
            Column("p_value", "p", "p"),
            Column("n_units", "units", "int"),
            Column("converged", "converged", "text"),
            Column("note", "note", "text"),
        ],
        note=NOTE,
    )
