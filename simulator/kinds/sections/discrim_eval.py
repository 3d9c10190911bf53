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

import numpy as np

from biasim.simulator.common.result_tables import Records
from biasim.simulator.kinds.base import AnalysisContext
from biasim.simulator.kinds.lazy import pd, unit_models
from biasim.simulator.kinds.sections.codebook import tables_of

# scipy.stats behind the model costs seconds to import; validate never fits it.

#: Probabilities are clipped here before the log-odds (a declared 0 or 1 has none).
CLIP = 1e-4
#: The model's grouping columns, as its table names them.
SCENARIO, UNIT = "scenario", "persona instance"
#: Columns that split the fits rather than name a scenario.
_SPLIT = ("model_label", "attribute")


#: The model's table, declared in discrim_eval.tables.yaml.
DISCRIM_EVAL = tables_of(__name__)["discrim_eval"]


def add_discrim_eval(
    tables: dict[str, pd.DataFrame], ctx: AnalysisContext, rows: pd.DataFrame, case_cols: list[str]
) -> Records:
    """Fit the model per model label and attribute on ``rows`` (with ``_p`` and ``_unit``):
    its CSV table into ``tables``, its records returned."""
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
    fitted = []
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
        # The fit's own columns (model_label, attribute) lead, as the tables' labels.
        fitted.append(table.assign(**dict(zip(split, key, strict=True)))[[*split, *table]])
    table = (
        pd.concat(fitted, ignore_index=True)
        if fitted
        else pd.DataFrame(columns=[*split, *unit_models.COLUMNS])
    )
    table["scenario_columns"] = "+".join(scenario_cols) or None
    return DISCRIM_EVAL.write(tables, ctx.name, table.astype(object).where(table.notna(), None))
