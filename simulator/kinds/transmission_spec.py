"""The ``transmission`` kind's part of a study file: which stages wrote, compared, scored and
guessed. Apart from the kind so that its statistics (:mod:`.transmission`) and the outputs the
paper states in its text (:mod:`.transmission_extras`) both read it without importing each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from biasim.analysis.studies.bias_transmission.trait_dimensions import DIMENSIONS
from biasim.simulator.kinds.base import AnalysisSpec
from biasim.simulator.kinds.letter_evaluation import trait_types_field
from biasim.simulator.study.fields import Strict


class AssociationShares(Strict):
    """A CSV of each job's association share (the share of female names paired with it)."""

    file: str = Field(
        description="CSV file (relative paths: the study's folder, else a built-in data file "
        "of scenarios/data, e.g. `bias_transmission_association_shares.csv`)."
    )
    item_column: str = Field("job", description="Column naming the job as `cluster` does.")
    share_column: str = Field("association_share", description="Column of the share.")
    source: str = Field("", description="Where the shares come from, printed beside them.")


class TransmissionSpec(AnalysisSpec):
    """Which stages wrote, compared, scored and guessed, and what groups the writers."""

    kind: Literal["transmission"]
    writing: str = Field(description="The stage whose letters the readers read.")
    group: str = Field("gender", description="The writers' persona axis compared.")
    positive: str = Field("female", description="The group whose share of hires is reported.")
    reference: str = Field("female", description="The group the other is compared against.")
    category: str | None = Field(
        "dominance", description="Recorded variable grouping jobs (Table 4)."
    )
    cluster: str = Field("job", description="Recorded variable naming the job.")
    relative: list[str] = Field(default_factory=list, description="Pair reading stages.")
    absolute: str | None = Field(None, description="A single reading stage with the scores.")
    traits: list[str] = Field(default_factory=lambda: list(DIMENSIONS))
    trait_types: dict[str, list[str]] = trait_types_field()
    describe: list[str] = Field(
        default_factory=list,
        description="Further recorded variables shown per job in the trait-type table "
        "(e.g. `job_status`).",
    )
    predictions: dict[str, str] = Field(
        default_factory=dict, description="Single reading stage -> its guessed-gender field."
    )
    predicted: str = Field("woman", description="The guess whose share is reported.")
    rationale: str | None = Field(
        None,
        description='Answer field of the pair stages holding the rationale ("I would hire '
        "Applicant ... because ...\"): Table 12, and its terms by the chosen letter's group.",
    )
    association: AssociationShares | None = Field(
        None,
        description="Each job's association share (e.g. Table 5's Experiment 1 column, or "
        "`association_items.csv` of your own association run): the jobs whose hiring bias is "
        'weaker than it (section 4.1\'s "11/30").',
    )
    probes: list[str] = Field(
        default_factory=list,
        description="Single reading stages with free-text answers (appendix A.4's probe "
        "prompts): their terms by the writer's group, the letter as the unit.",
    )
    alpha: float = Field(0.001, gt=0, lt=1, description="Level of every test (the paper's).")
    n_boot: int = Field(2000, ge=100, description="Bootstrap resamples of pairs.")
