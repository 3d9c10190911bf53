"""The ``market:`` section: a pipeline study run over ``cycles`` with a workforce that persists.

Each cycle draws applicants from a population, runs the pipeline's stages with readers drawn
from the current workforce, adds the last reading stage's hires to the workforce (up to the
cycle's openings) and applies attrition. A social graph (``network``) may carry referrals by
employees, and rejected applicants may reapply. Reader committees are named in the schema so
that a study declaring them is refused with the reason, not with "unknown field".
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from biasim.simulator.study.fields import Identifier, Strict
from biasim.simulator.study.policies import BASE

if TYPE_CHECKING:
    from biasim.personas import Persona

#: The per-cycle composition table a market run writes beside its results (the engine writes
#: it, analyses read it: named here, where both may look).
MARKET_CSV = "market.csv"
#: Who was hired: one row per hire, naming the applicant (``agent_id``, the writing stage's
#: row) with its replicate market, cycle and trajectory (``policy``, ``off``). The engine writes
#: it from the same list of hires it counts in :data:`MARKET_CSV`'s ``hires``; ``audit`` reads
#: it, so its selected are the hired, not all those the last stage advanced.
HIRES_CSV = "market_hires.csv"
#: Its columns.
HIRES_COLUMNS = ("replicate", "cycle", "policy", "off", "agent_id")
#: Most cycles a study may run (each cycle is a whole pipeline round).
MAX_CYCLES = 200
#: Most replicate markets one run may hold (each is ``cycles`` whole pipeline rounds).
MAX_REPLICATES = 1_000
#: The columns of :data:`MARKET_CSV`: per replicate market, cycle and group, who applied (and
#: of them, who was referred by an employee and who applied again after a rejection; 0
#: without referrals and reapplication), who decided (the cycle's readers, drawn from the
#: workforce at its start), who was hired, who left, and who works there at the end of the
#: cycle (after attrition and hiring), with its total tenure (cycles worked, summed); for the
#: cycle as a whole (the same on each group's row, never summed over groups), the openings no
#: hire filled (``unfilled``: fewer advanced than there were openings) and the applicants asked
#: for that nobody out of work was left to be (``applicants_short``: an employee never applies,
#: so a population barely larger than the workforce cannot supply them all); the
#: policy whose trajectory the row is (``base``: the study's own stages), and the mechanisms a
#: decomposition switched off in it (``none``, or e.g. ``readers|attrition``). Cycle 0 is each
#: replicate's initial workforce.
COMPOSITION_COLUMNS = (
    "replicate",
    "cycle",
    "group",
    "applicants",
    "referred",
    "reapplied",
    "readers",
    "hires",
    "left",
    "workforce",
    "tenure",
    "unfilled",
    "applicants_short",
    "policy",
    "off",
)
#: The ``off`` value of a trajectory with every mechanism on (the base's and each policy's).
NO_SWITCH = "none"
#: The mechanisms ``decompose`` may switch off, and what switching each off means (one entry
#: per mechanism: the engine's switch of the same name implements it).
SWITCHES = {
    "readers": "the readers' picks are replaced by a uniform random pick of as many in each "
    "evaluation (no call): no reader preference of any kind, on any backend",
    "attrition": "nobody leaves: the workforce only grows by its hires (attrition at random "
    "regardless of group is what the market already does, so it would remove nothing)",
}
#: Most switches a decomposition runs: every subset is a trajectory (2 ** n of them).
MAX_SWITCHES = 3
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


class NetworkConfig(Strict):
    """The social graph among the people of the applicants' population (employees come from
    it), built for each replicate market from the study seed and the replicate."""

    model: Literal["homophily"] = Field(
        description="`homophily`: each person links to `degree` others, a share `homophily` of "
        "them of their own group of `by` (the rest drawn from the other groups)."
    )
    degree: int = Field(ge=1, le=100, description="Links each person makes (out-links).")
    homophily: float = Field(
        ge=0.0, le=1.0, description="Expected share of a person's links within their own group."
    )
    by: Identifier = Field(description="The persona axis whose groups `homophily` is about.")


class ReferralConfig(Strict):
    """Applicants referred by current employees over the social graph."""

    share: float = Field(
        gt=0.0,
        le=1.0,
        description="Share of each cycle's applicants (rounded) referred by employees: an "
        "employee drawn at random refers a random neighbour who is not an employee.",
    )
    letters: Identifier | None = Field(
        None,
        description="A writing stage of the applicants' population (a reference letter) whose "
        "prompt names `referrer`: for a referred applicant the referring employee writes it, "
        "their persona in the prompt.",
    )


class Reapplication(Strict):
    """Rejected applicants who apply again in a later cycle."""

    probability: float = Field(
        gt=0.0,
        le=1.0,
        description="Each cycle, each earlier applicant who was rejected (and is not employed) "
        "applies again with this probability.",
    )


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
        "index; replicate 0 draws what a single market draws. Each policy's and "
        "decomposition's trajectory runs in every replicate from that replicate's initial "
        "workforce on its draws. The analyses' intervals and tests take the replicate market "
        "as their unit.",
    )
    decompose: list[str] = Field(
        default_factory=list,
        max_length=MAX_SWITCHES,
        description="Mechanisms to switch off, each subset on the same random numbers as the "
        "base, to decompose the drift of the workforce: "
        + "; ".join(f"`{k}`: {v}" for k, v in SWITCHES.items()),
    )
    network: NetworkConfig | None = Field(
        None, description="The social graph among people that referrals follow."
    )
    referrals: ReferralConfig | None = Field(
        None,
        description="Referral hiring over `network` (docs/guides/labor-market.md); refused "
        "beside `policies:` or `decompose` (referrers and histories are kept for the base's "
        "trajectory only).",
    )
    reapply: Reapplication | None = Field(
        None,
        description="Rejected applicants may apply again, with their history; refused beside "
        "`policies:` or `decompose`.",
    )
    committees: Any = Field(None, description=f"Reader committees {_NOT_YET}.")

    @field_validator("decompose")
    @classmethod
    def _known_switches(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in SWITCHES:
                raise ValueError(
                    f"no switch `{name}`; switches: {', '.join(f'`{k}`' for k in SWITCHES)}"
                )
        if len(set(value)) < len(value):
            raise ValueError("each switch once")
        return value

    @model_validator(mode="after")
    def _refuse_later_parts(self) -> MarketConfig:
        if self.committees is not None:
            raise ValueError(f"`committees`: a reader committee {_NOT_YET}")
        if self.referrals is not None and self.network is None:
            raise ValueError("`referrals` follow the social graph: declare `network:` too")
        return self


#: The cycle (and replicate market) segments a market puts in an agent id after its
#: population (``MarketModel._tag``, ``engine.market._in_cycle``): ``c003`` or ``r001/c003``.
_CYCLE_SEGMENTS = re.compile(r"^([^/]+)/(?:r\d{3}/)?c\d{3}/")


def person_of(agent_id: str) -> str:
    """The person behind a market agent's id: the id without its cycle and replicate segments,
    so that one member of a population drawn in several cycles (rejected and applying again)
    or replicate markets (the same persona, whom a model sees alike) is one person. Ids
    without them come back unchanged."""
    return _CYCLE_SEGMENTS.sub(r"\1/", agent_id, count=1)


def switch_subsets(market: MarketConfig) -> list[frozenset[str]]:
    """Every non-empty subset of the switches ``decompose`` names (by size, then as declared):
    the trajectories a decomposition runs besides the base."""
    names = market.decompose
    return [
        frozenset(chosen)
        for size in range(1, len(names) + 1)
        for chosen in itertools.combinations(names, size)
    ]


def several_trajectories(study: Any) -> bool:
    """Whether a study's market runs trajectories besides the base (policies, or a
    decomposition): each draws its own applicants."""
    market = study.market
    return market is not None and (bool(study.policies) or bool(market.decompose))


def in_base(applies_in: Any) -> Any:
    """Per applicant row, whether the base drew the applicant: its :data:`APPLIES_IN`
    (a pandas Series of ``|``-joined trajectory keys; empty in a market of the base alone)
    names the base. Analyses of the base read its applicants only."""
    keys = "|" + applies_in.astype("string").fillna(BASE) + "|"
    return keys.str.contains(f"|{BASE}|", regex=False).astype(bool)


def switch_label(off: frozenset[str]) -> str:
    """How ``market.csv`` names the switches off in a trajectory (``none``: all on)."""
    return "|".join(k for k in SWITCHES if k in off) or NO_SWITCH


def switch_policy(off: frozenset[str]) -> str | None:
    """The stage copies a trajectory with ``off`` reads with (``off_<switches>``), or None
    when its readers are switched off (nobody reads: a random pick)."""
    if "readers" in off:
        return None
    return "off_" + "_".join(k for k in SWITCHES if k in off)


#: The applicants' results column of a market with several trajectories: the trajectories
#: (``market.csv``'s policy, or ``off_<switches>``) that drew the applicant, joined by ``|``.
APPLIES_IN = "applies_in"


def applicant_columns(market: MarketConfig, several: bool = False) -> dict[str, str]:
    """The results columns a market adds to its applicants' rows, with their types: with
    several trajectories (policies or a decomposition: ``several``), :data:`APPLIES_IN`, since
    each trajectory draws its own applicants and analyses of the base read the base's; with
    referrals, ``referred_by`` (the referring employee's id in the applicants' population, empty
    when not referred); with reapplication, ``reapplied`` and the history before the cycle."""
    columns = {APPLIES_IN: "string"} if several else {}
    if market.referrals is not None:
        columns["referred_by"] = "string"
    if market.reapply is not None:
        columns.update(
            reapplied="boolean", applications_before="integer", rejections_before="integer"
        )
    return columns


@dataclass(frozen=True)
class History:
    """An applicant's earlier applications in a market: the cycles they applied in before
    this one, and how many of those ended without a hire."""

    cycles: tuple[int, ...] = ()
    rejections: int = 0

    def view(self) -> dict[str, Any]:
        """``applicant.history`` as templates see it."""
        return {
            "cycles": list(self.cycles),
            "applications": len(self.cycles),
            "rejections": self.rejections,
        }


def applicant_context(history: History, referrer: Persona | None) -> dict[str, Any]:
    """The template variables a market gives its applicants' stages: ``applicant.history``,
    and ``referrer`` (the referring employee's persona: ``name``, ``description`` and each
    attribute; none for an applicant not referred). Validation renders with these too."""
    return {
        "applicant": {"history": history.view()},
        "referrer": referrer.context() if referrer is not None else None,
    }
