"""Tests of the differences between models per case (``analysis.models``), declared once as a
table of the result, with the case columns the kind has."""

from __future__ import annotations

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import ResultTable
from biasim.simulator.kinds.base import AnalysisContext, without_model
from biasim.simulator.kinds.lazy import model_tests, pd

MODEL_DIFFERENCES = ResultTable(
    key="model_differences",
    title="Differences between models per case",
    columns=(
        Column("model_a", "model A", description="The first model of the pair."),
        Column("model_b", "model B", description="The second."),
        Column("n_matched", "matched prompts", "int", description="Prompts both answered."),
        Column("dpd_a", "DPD A", ".3f", description="The case's DPD under model A."),
        Column("dpd_b", "DPD B", ".3f", description="Under model B."),
        Column("p_value", "p", "p", description="Permutation p of |DPD A - DPD B|."),
        Column(
            "p_adjusted",
            "p adj.",
            "p",
            star="significant",
            description="Adjusted over every case and model pair.",
        ),
    ),
    description="Tests of DPD differences between models.",
    note=(
        "p = permutation test of |DPD A - DPD B|: model labels are swapped within each agent "
        "(same persona, index, replicate and design cell) under the null that both models "
        "answer each agent alike; p adj. over every case and model pair (* = significant)."
    ),
)


def model_differences(
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    models: list[str],
    case_cols: list[str],
    group_col: str,
    outcome_col: str,
    id_col: str,
    n_permutations: int,
    adjust: str,
) -> pd.DataFrame:
    """Test every case and pair of models, prompts matched by ``id_col`` without its model."""
    return model_tests.model_difference_tests(
        rows.assign(_match=without_model(rows, id_col)),
        model_col="model_label",
        models=models,
        case_cols=case_cols,
        group_col=group_col,
        outcome_col=outcome_col,
        match_col="_match",
        n_permutations=n_permutations,
        adjust=adjust,
        seed=ctx.study.seed,
    )
