"""The DiscrimEval-style model of a stage answered with ``answer: logprobs`` (Tamkin et al.
2023): each answer's log-odds of the targeted decision, with random intercepts and group slopes
per decision scenario (``analysis.stats.unit_models.discrim_eval_effects``), one fit per model
and attribute (``<name>_discrim_eval``).

The scenario is the case: the combination of the analysis's ``cases`` (and condition) columns.
A study with one scenario has no scenario variance to model, and the table says so instead of
printing a number.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from rich.console import Console

from biasim.simulator.common.html import Column, HtmlSection, format_p
from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import pd, unit_models

# scipy.stats behind the model costs seconds to import; validate never fits it.

#: Probabilities are clipped here before the log-odds (a declared 0 or 1 has none).
CLIP = 1e-4
#: The model's grouping columns, as its table names them.
SCENARIO, UNIT = "scenario", "persona instance"
#: Columns that split the fits rather than name a scenario.
_SPLIT = ("model_label", "attribute")


def add_discrim_eval(
    section: Section, ctx: AnalysisContext, rows: pd.DataFrame, case_cols: list[str]
) -> None:
    """Fit the model per model label and attribute on ``rows`` (with ``_p`` and ``_unit``)."""
    split = [c for c in case_cols if c in _SPLIT]
    scenario_cols = [c for c in case_cols if c not in _SPLIT]
    p = rows["_p"].astype(float).clip(CLIP, 1 - CLIP)
    rows = rows.assign(
        _logodds=np.log(p / (1 - p)),
        # The persona instance within its group (an agent index recurs in every group).
        **{
            UNIT: rows["value"].astype(str) + "|" + rows["_unit"],
            SCENARIO: rows[scenario_cols].astype(str).agg("|".join, axis=1)
            if scenario_cols
            else "",
        },
    )
    tables = []
    for key, part in rows.groupby(split, sort=False, dropna=False) if split else [((), rows)]:
        key = key if isinstance(key, tuple) else (key,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what matters is in the table's note
            table = unit_models.discrim_eval_effects(part, "value", "_logodds", SCENARIO, UNIT)
        if not scenario_cols:
            table["note"] = (
                "not fitted: one decision scenario (the model's random effects are per "
                "scenario: name the scenario factor in the analysis's `cases`)"
            )
        tables.append(table.assign(**dict(zip(split, key, strict=True))))
    table = (
        pd.concat(tables, ignore_index=True)
        if tables
        else pd.DataFrame(columns=unit_models.COLUMNS)
    )
    table["scenario_columns"] = "+".join(scenario_cols) or None
    section.tables[f"{ctx.name}_discrim_eval"] = table
    section.summary.setdefault("expected", {})["discrim_eval"] = (
        table.astype(object).where(table.notna(), None).to_dict("records")
    )


def print_discrim_eval(summary: dict[str, Any], console: Console) -> None:
    """One line per group: the log-odds difference, its interval and p, or why none."""
    for row in (summary.get("expected") or {}).get("discrim_eval", []):
        where = f"{row.get('model_label')}, " if row.get("model_label") else ""
        head = f"DiscrimEval model ({where}{row['group']} vs {row['reference']}): "
        if row.get("estimate") is None:
            text = head + str(row.get("note") or "not fitted")
        else:
            p = row.get("p_value")
            text = (
                f"{head}log-odds {row['estimate']:+.3f} [{row['ci_low']:.3f}, "
                f"{row['ci_high']:.3f}]"
                + (f", p {format_p(p)}" if p is not None else "")
                + f" over {row['n_units']} scenarios"
                + (f" ({row['note']})" if row.get("note") else "")
            )
        console.print(text, highlight=False, soft_wrap=True)


def html_discrim_eval(summary: dict[str, Any], section: HtmlSection) -> None:
    """The model's table on the page."""
    rows = (summary.get("expected") or {}).get("discrim_eval")
    if not rows:
        return
    section.table(
        rows,
        key=("expected", "discrim_eval"),
        title="DiscrimEval mixed model of the log-odds (random effects per scenario)",
        columns=[
            Column("model_label", "model"),
            Column("group", "group"),
            Column("reference", "reference"),
            Column("estimate", "log-odds difference", ".3f"),
            Column("ci_low", "95% CI low", ".3f"),
            Column("ci_high", "95% CI high", ".3f"),
            Column("p_value", "p", "p"),
            Column("n_units", "scenarios", "int"),
            Column("note", "note"),
        ],
        note="Each answer's log-odds of the targeted decision (from its probabilities), "
        "regressed on the group with random intercepts and group slopes per scenario "
        "(Tamkin et al. 2023); Wald interval. Where a persona instance answers in several "
        "scenarios its own random intercept is in the model too.",
    )
