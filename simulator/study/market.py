"""The ``market:`` section: a pipeline study run over ``cycles`` with a workforce that persists.

Each cycle draws applicants from a population, runs the pipeline's stages with readers drawn
from the current workforce, adds the last reading stage's hires to the workforce (up to the
cycle's openings) and applies attrition. Referrals and reader committees are named in the
schema so that a study declaring them is refused with the reason, not with "unknown field".
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from biasim.simulator.study.fields import Identifier, Strict

#: Most cycles a study may run (each cycle is a whole pipeline round).
MAX_CYCLES = 200
#: Most replicate markets one run may hold (each is ``cycles`` whole pipeline rounds).
MAX_REPLICATES = 1_000
#: The per-cycle composition table a market run writes beside its results.
MARKET_CSV = "market.csv"
#: Its columns: per replicate market, cycle and group, who applied, who decided (the cycle's
#: readers, drawn from the workforce at its start), who was hired, who left, and who works
#: there at the end of the cycle (after attrition and hiring), with its total tenure (cycles
#: worked, summed). Cycle 0 is each replicate's initial workforce.
COMPOSITION_COLUMNS = (
    "replicate",
    "cycle",
    "group",
    "applicants",
    "readers",
    "hires",
    "left",
    "workforce",
    "tenure",
)
#: Why the parts of issue 46 not built yet are refused.
_NOT_YET = "is not supported yet in market studies (issue 46 adds it in a later step)"


class ApplicantDraw(Strict):
    """Who applies in each cycle."""

    population: Identifier = Field(description="The writing population applicants come from.")
    per_cycle: int = Field(ge=2, le=100_000, description="Applicants drawn in each cycle.")


class Attrition(Strict):
    """Who leaves the workforce at the end of each cycle (after the hires join)."""

    rate: float | None = Field(
        None, ge=0.0, le=1.0, description="Each employee leaves with this probability."
    )
    leavers: int | None = Field(
        None, ge=0, le=100_000, description="Exactly this many employees, drawn at random, leave."
    )

    @model_validator(mode="after")
    def _one_rule(self) -> Attrition:
        if (self.rate is None) == (self.leavers is None):
            raise ValueError("declare one of `rate` (a probability) or `leavers` (a count)")
        return self


class MarketConfig(Strict):
    """A labour market over cycles: applicants, openings, a workforce and its readers."""

    applicants: ApplicantDraw
    workforce: int = Field(
        ge=1,
        le=100_000,
        description="Initial workforce: employees drawn from the applicants' population.",
    )
    openings: int = Field(ge=1, le=100_000, description="Hires per cycle at most.")
    readers: list[Identifier] = Field(
        min_length=1,
        description="Reader populations whose agents are drawn from the current workforce each "
        "cycle (so their personas change as hiring does).",
    )
    by: Identifier = Field(
        description="The persona axis the per-cycle composition table counts (hires, "
        "workforce, decision-makers)."
    )
    attrition: Attrition
    replicates: int = Field(
        1,
        ge=1,
        le=MAX_REPLICATES,
        description="Independent markets run over the same cycles, each with its own draws "
        "(initial workforce, applicants, readers, leavers) keyed by the study seed and its "
        "index; replicate 0 draws what a single market draws. The analyses' intervals and "
        "tests take the replicate market as their unit.",
    )
    referrals: Any = Field(None, description=f"Referral hiring {_NOT_YET}.")
    committees: Any = Field(None, description=f"Reader committees {_NOT_YET}.")

    @model_validator(mode="after")
    def _refuse_later_parts(self) -> MarketConfig:
        for name, what in (("referrals", "referral hiring"), ("committees", "a reader committee")):
            if getattr(self, name) is not None:
                raise ValueError(f"`{name}`: {what} {_NOT_YET}")
        return self
