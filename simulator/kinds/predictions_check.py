"""Kind ``predictions_check``: directional alignment of a stage's decision rates with predictions
from real-world findings (seed 004, Table 3): for each prediction (a scenario, an attribute, the
group expected to have the higher rate), whether the observed rates point the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field

from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.base import (
    AnalysisContext,
    StudyFacts,
    resolve_data_path,
)
from biasim.simulator.kinds.lazy import case_stats
from biasim.simulator.kinds.sections import decisions
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.study.decisions_spec import StageDecisionsSpec

if TYPE_CHECKING:
    import pandas as pd


class PredictionsCheckSpec(StageDecisionsSpec):
    """The rates of a stage's targeted decision against directional predictions."""

    kind: Literal["predictions_check"] = "predictions_check"
    predictions: str = Field(
        description="Directional predictions (`default`: the seed-004 paper's Table 3, or a "
        "YAML path) checked against the observed rates.",
    )


TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class PredictionsCheckResult:
    """What ``predictions_check`` computes; the summary, its schema and the renderings come
    from it."""

    predictions: str = field(metadata=about("Where the predictions come from."))
    alignment: Records = field(metadata=tabled(TABLES["alignment"]))


class PredictionsCheckKind(
    decisions.DecisionsKind, spec=PredictionsCheckSpec, result=PredictionsCheckResult
):
    """Whether each predicted direction holds in the observed rates."""

    title = "Directional alignment with real-world findings"

    def check(self, spec: PredictionsCheckSpec, facts: StudyFacts) -> None:
        super().check(spec, facts)
        if spec.predictions != "default":
            _check_predictions(spec.predictions, facts)

    def read(
        self, stage: decisions.Decisions, spec: PredictionsCheckSpec
    ) -> PredictionsCheckResult:
        _, rows, ctx, section = stage
        rates = case_stats.case_rates(rows, decisions.case_columns(spec), "value", "_hit", True)
        result = PredictionsCheckResult(
            predictions=spec.predictions,
            alignment=TABLES["alignment"].write(
                section.tables, ctx.name, _alignment(rates, spec, ctx)
            ),
        )
        return result

    def headline(self, summary: dict[str, Any]) -> str:
        return f"({self.name}): observed rates against predictions ({summary['predictions']})"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        rows = summary["alignment"]
        held = sum(bool(r.get("aligned")) for r in rows)
        return [f"{held} of {len(rows)} predictions point the way the observed rates do"]


def _alignment(
    rates: pd.DataFrame, spec: PredictionsCheckSpec, ctx: AnalysisContext
) -> pd.DataFrame:
    """Directional alignment of the rates with the predictions the study names."""
    condition = [spec.condition] if spec.condition else []
    path = (
        case_stats.DEFAULT_PREDICTIONS
        if spec.predictions == "default"
        else ctx.resolve(spec.predictions)
    )
    scenario_col = spec.cases[0] if spec.cases else "scenario"
    return case_stats.directional_alignment(
        rates.rename(columns={scenario_col: "scenario"}) if scenario_col != "scenario" else rates,
        case_stats.load_predictions(path),
        by=("model_label", *condition),
    )


def _check_predictions(declared: str, facts: StudyFacts) -> None:
    """Load a predictions file at validation, so a missing or malformed one fails before any
    call rather than after the run."""
    written_in = Path(facts.smap.locate((*facts.at, "predictions"))[0]).parent
    path = resolve_data_path(declared, written_in)
    if not path.is_file():
        facts.problem(
            ("predictions",), f"predictions file `{declared}` not found (looked at {path})"
        )
        return
    try:
        case_stats.load_predictions(path)
    except (OSError, ValueError, AttributeError, yaml.YAMLError) as err:
        # The loader's own message names the file and the entry, never its contents.
        reason = str(err) if isinstance(err, ValueError) else f"{path}: {type(err).__name__}"
        facts.problem(("predictions",), f"unusable predictions file: {reason}")
