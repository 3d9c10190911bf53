"""What every analysis of one stage's decisions names: the stage, the decision and its target,
the persona groups, the cases, the unit of exchangeability and the test settings.

``demographic_parity`` (rates and DPD per case) and the kinds that read the same decisions for
more evidence (``condition_differences``, ``explicit_bias``, ``rationale_terms``,
``predictions_check``) subclass :class:`StageDecisionsSpec`, so each says these once. It lives
with the study, not with the kinds, because loading a study rewrites the older single-entry form
of these analyses (:mod:`.decisions_compat`) before any kind is loaded.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from biasim.simulator.study.analysis_spec import AnalysisSpec


class StageDecisionsSpec(AnalysisSpec):
    """The decisions of one stage: which answer is the targeted one, by which persona groups,
    split into which cases, with which unit and test settings."""

    stage: str
    field: str
    target: str | None = Field(None, description="The targeted decision whose rate is compared.")
    target_from: str | None = Field(
        None,
        description="Recorded design variable holding each case's targeted decision (e.g. one "
        "per scenario); instead of `target`.",
    )
    by: list[str] | str = Field(description="Persona axis (or axes) defining groups.")
    separately: bool = Field(
        False, description="Each axis in `by` is its own case (agents carry one axis each)."
    )
    cases: list[str] = Field(
        default_factory=list, description="Design factors that split the analysis into cases."
    )
    condition: str | None = Field(
        None,
        description="Design factor whose levels split every case (e.g. a persona ablation's "
        "conditions); `condition_differences` compares its levels.",
    )
    unit: Literal["persona", "name"] = Field(
        "persona",
        description="What repeats, the unit of exchangeability of the DPD tests: `persona` (an "
        "agent across its replicates and the design cells outside the case) or `name` (agents "
        "sharing a name from the name bank). Where a unit answers more than once in a case "
        "(replicates) its case is tested by relabelling whole units between groups.",
    )
    alpha: float = Field(0.05, gt=0, lt=1)
    n_simulations: int = Field(10_000, ge=100)
    n_permutations: int = Field(
        2000,
        ge=100,
        description="Permutations of each test of a difference between models or conditions.",
    )
    adjust: Literal["holm", "bh", "none"] = Field(
        "holm",
        description="Adjustment over each family of tests of differences (between models, "
        "between conditions).",
    )

    @property
    def groups(self) -> list[str]:
        """The grouping axes as a list."""
        return [self.by] if isinstance(self.by, str) else list(self.by)

    @model_validator(mode="after")
    def _one_target(self) -> StageDecisionsSpec:
        if (self.target is None) == (self.target_from is None):
            raise ValueError("give exactly one of `target` and `target_from`")
        return self


#: The fields every analysis of a stage's decisions shares (copied into each entry when the
#: older single-entry form is expanded).
STAGE_FIELDS = tuple(f for f in StageDecisionsSpec.model_fields if f not in ("kind", "name"))
