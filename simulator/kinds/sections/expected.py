"""Expected decisions of a stage answered with ``answer: logprobs``: per group the mean
probability of the targeted decision, and per case the DPD of those means with a permutation
test whose unit is the persona instance (``<name>_expected`` and ``<name>_expected_cases``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.base import AnalysisContext
from biasim.simulator.kinds.lazy import case_stats, expected_stats, pd
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.discrim_eval import DISCRIM_EVAL, add_discrim_eval

#: The unit the test relabels where the kind names no unit column, as the tables name it.
UNIT = "persona instance"
#: What :data:`UNIT` is, for the notes under the tables.
UNIT_MEANS = "persona name, or persona value and agent index; replicates pooled"


def is_logprob_stage(ctx: AnalysisContext, stage: str) -> bool:
    """Whether ``stage`` was answered with log-probabilities."""
    return any(s.name == stage and s.answer == "logprobs" for s in ctx.study.stages)


def target_probability(rows: pd.DataFrame, target: Any) -> pd.Series:
    """Each answer's probability of its targeted decision (NA without one)."""
    targets = target if isinstance(target, pd.Series) else pd.Series(target, index=rows.index)
    values = []
    for raw, wanted in zip(rows["probabilities"], targets, strict=True):
        table = orjson.loads(raw) if isinstance(raw, str) and raw else None
        values.append(table.get(wanted) if table else None)
    return pd.Series(values, index=rows.index, dtype="Float64")


#: The tables of the expected decisions, declared in expected.tables.yaml.
TABLES = tables_of(__name__)
EXPECTED_CASES = replace(TABLES["cases"], says_nothing=lambda row: row.get("dpd") is None)


@dataclass(kw_only=True)
class ExpectedDecisions:
    """Expected decisions of a stage answered with log-probabilities, per group and case."""

    target: str = field(metadata=about("The targeted decision."))
    unit: str = field(metadata=about("The unit the permutation test relabels."))
    unit_means: str = field(metadata=about("What that unit is."))
    case_columns: list[str] = field(metadata=about("What splits the answers into cases."))
    groups: Records = field(metadata=tabled(TABLES["groups"]))
    cases: Records = field(metadata=tabled(EXPECTED_CASES))
    discrim_eval: Records = field(metadata=tabled(DISCRIM_EVAL))


def add_expected_decisions(
    tables: dict[str, pd.DataFrame],
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    target: Any,
    case_cols: list[str],
    n_permutations: int,
    unit_col: str | None = None,
) -> ExpectedDecisions:
    """The expected decisions (their CSV tables into ``tables``); ``unit_col``: the kind's own
    unit column, where it derives one (else the persona instance)."""
    rows = rows.assign(_p=target_probability(rows, target))
    rows = rows[rows["_p"].notna()].copy()
    unit = UNIT if unit_col is None else unit_col
    if unit_col is not None:
        rows["_unit"] = rows[unit_col]
    else:
        rows["_unit"] = (
            rows["persona_name"].fillna("").astype(str) + "|" + rows["agent_index"].astype(str)
            if "agent_index" in rows
            else rows["persona_name"].fillna("").astype(str)
        )
    groups, cases = [], []
    for i, (key, part) in enumerate(rows.groupby(case_cols, sort=False, dropna=False)):
        key = key if isinstance(key, tuple) else (key,)
        at = dict(zip(case_cols, key, strict=True))
        means = part.groupby("value", sort=False)["_p"].agg(["mean", "size"])
        units = part.groupby(["value", "_unit"], sort=False)["_p"].agg(["size", "sum"])
        for value, row in means.iterrows():
            groups.append(
                {**at, "value": value, "n": int(row["size"]), "mean_probability": row["mean"]}
            )
        codes = pd.Categorical(units.index.get_level_values("value")).codes
        n_units = int(units.index.get_level_values("_unit").nunique())
        case = {**at, "groups": len(means), "n_units": n_units, "unit": unit}
        if len(means) >= 2:
            test = expected_stats.expected_parity_test(
                units["size"].to_numpy(),
                units["sum"].to_numpy(),
                np.asarray(codes),
                n_permutations=n_permutations,
                seed=ctx.study.seed + i,
            )
            case.update(
                **case_stats.rate_extremes(pd.Series(means.index), means["mean"].to_numpy()),
                mean_difference=float(means["mean"].max() - means["mean"].min()),
                dpd=test.dpd,
                p_value=test.p_value,
                n_permutations=test.n_permutations,
            )
        cases.append(case)
    return ExpectedDecisions(
        target="the case's target" if isinstance(target, pd.Series) else str(target),
        unit=unit,
        unit_means=UNIT_MEANS if unit == UNIT else "replicates pooled",
        case_columns=case_cols,
        groups=TABLES["groups"].write(tables, ctx.name, pd.DataFrame(groups)),
        cases=EXPECTED_CASES.write(tables, ctx.name, _nones(pd.DataFrame(cases))),
        discrim_eval=add_discrim_eval(tables, ctx, rows, case_cols),
    )


def _nones(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with None where a value is missing (a case of one group has no DPD)."""
    return frame.astype(object).where(frame.notna(), None)
