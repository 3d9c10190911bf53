"""Expected decisions of a stage answered with ``answer: logprobs``: per group the mean
probability of the targeted decision, and per case the DPD of those means with a permutation
test whose unit is the persona instance (``<name>_expected`` and ``<name>_expected_cases``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from rich.console import Console

from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.kinds.base import AnalysisContext, Section
from biasim.simulator.kinds.lazy import expected_stats, pd
from biasim.simulator.kinds.sections.discrim_eval import (
    add_discrim_eval,
    html_discrim_eval,
    print_discrim_eval,
)

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


def add_expected_decisions(
    section: Section,
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    target: Any,
    case_cols: list[str],
    n_permutations: int,
    unit_col: str | None = None,
) -> None:
    """Put the expected-decision tables and their summary into ``section``; ``unit_col``: the
    kind's own unit column, where it derives one (else the persona instance)."""
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
            highest, lowest = means["mean"].idxmax(), means["mean"].idxmin()
            case.update(
                highest=highest,
                lowest=lowest,
                mean_difference=float(means["mean"].max() - means["mean"].min()),
                dpd=test.dpd,
                p_value=test.p_value,
                n_permutations=test.n_permutations,
            )
        cases.append(case)
    section.tables[f"{ctx.name}_expected"] = pd.DataFrame(groups)
    section.tables[f"{ctx.name}_expected_cases"] = pd.DataFrame(cases)
    section.summary["expected"] = {
        "groups": groups,
        "cases": cases,
        "unit": unit,
        "case_columns": case_cols,
        "target": "the case's target" if isinstance(target, pd.Series) else str(target),
    }
    add_discrim_eval(section, ctx, rows, case_cols)


def _unit_means(expected: dict[str, Any]) -> str:
    """What the expected-decision test's unit is, for the note under its table."""
    return UNIT_MEANS if expected.get("unit", UNIT) == UNIT else "replicates pooled"


def dpd_extremes(dpd: Any, highest: Any, lowest: Any) -> tuple[str, str]:
    """The highest and lowest group as the console names them; a DPD of 0 has none (every
    group's rate is the same), so it says so instead of naming one group twice."""
    if dpd == 0:
        return "no difference", "-"
    return fmt(highest, "text"), fmt(lowest, "text")


def print_expected(summary: dict[str, Any], console: Console) -> None:
    """One line per case: the DPD of expected decisions and its p-value."""
    expected = summary.get("expected")
    if not expected:
        return
    for case in expected["cases"]:
        if "dpd" not in case:
            continue
        where = ", ".join(str(case.get(c)) for c in expected["case_columns"])
        highest, lowest = dpd_extremes(case["dpd"], case["highest"], case["lowest"])
        between = highest if case["dpd"] == 0 else f"{highest} vs {lowest}"
        console.print(
            f"expected decisions ({where}): DPD {case['dpd']:.3f} ({between}), permutation "
            f"p {format_p(case['p_value'])} over {case['n_units']} "
            f"units ({case['unit']}; replicates pooled)",
            highlight=False,
            soft_wrap=True,
        )
    print_discrim_eval(summary, console)


def html_expected(summary: dict[str, Any], section: HtmlSection) -> None:
    """The expected-decision tables of the page."""
    expected = summary.get("expected")
    if not expected:
        return
    cases = [c for c in expected["case_columns"] if c != "model_label"]
    text = [Column("model_label", "model"), *[Column(c) for c in cases]]
    section.table(
        expected["groups"],
        key=("expected", "groups"),
        title=f"Expected decisions: mean probability of {expected['target']} by group",
        columns=[
            *text,
            Column("value", "group"),
            Column("n", "n", "int"),
            Column("mean_probability", "mean probability", ".3f"),
        ],
    )
    section.table(
        expected["cases"],
        key=("expected", "cases"),
        title="DPD of expected decisions per case",
        columns=[
            *text,
            Column("dpd", "DPD", ".3f"),
            Column("p_value", "p", "p"),
            Column("n_units", "units", "int"),
        ],
        note=f"Probabilities from the log-probabilities of the decision's first token. p: "
        f"permutation test relabelling whole units, the unit being the "
        f"{expected.get('unit', UNIT)} ({_unit_means(expected)}).",
    )
    html_discrim_eval(summary, section)
