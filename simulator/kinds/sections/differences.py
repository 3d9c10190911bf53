"""Tests of the differences between models per case (``analysis.models``), declared once in its
codebook (``differences.tables.yaml``), with the case columns the kind has."""

from __future__ import annotations

from biasim.simulator.kinds.base import AnalysisContext, without_model
from biasim.simulator.kinds.lazy import model_tests, pd
from biasim.simulator.kinds.sections.codebook import tables_of

#: The tests of the differences between models, declared in differences.tables.yaml.
MODEL_DIFFERENCES = tables_of(__name__)["model_differences"]


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
