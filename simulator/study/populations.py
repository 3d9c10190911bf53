"""Populations, reading stages and the pipeline graph of a study file.

A study may hold several populations of agents with different roles (applicants who write,
screeners and managers who read what others wrote). A *reading* stage shows documents that
another population wrote in an earlier stage, matched ``single``, ``pair`` or ``pool``; it may
read only the candidates an earlier reading stage advanced (``after``), which makes the stages a
pipeline. The stages form a directed acyclic graph (networkx), run in topological order
(:mod:`.stage_graph`, above the schema, which holds the sections defined here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from biasim.simulator.study.fields import Identifier, Strict
from biasim.simulator.study.personas import PersonaConfig

if TYPE_CHECKING:
    pass

#: Agent classes a population can hold (``agents`` has one Mesa agent class per role).
AgentRole = Literal[
    "applicant", "letter_writer", "decision_maker", "screener", "hiring_manager", "evaluator"
]
#: The text shown instead of a redacted name (in the document and as its label's name).
REDACTED = "[name withheld]"
#: The implicit population of a study that declares none (today's scenario decision-makers).
DEFAULT_POPULATION = "agents"


class PopulationConfig(Strict):
    """One population of agents."""

    agent: AgentRole = Field(description="The agents' role class.")
    personas: Literal["study"] | PersonaConfig | None = Field(
        None,
        description="`study`: the study's `personas` and `design` (factors, replicates); a "
        "persona section of its own; or none (neutral agents without persona attributes).",
    )
    count: int = Field(
        1,
        ge=1,
        description="Agents per persona (or in all, without personas); ignored with `study`.",
    )


class ReadsConfig(Strict):
    """What a reading stage shows each of its agents, and how documents are matched."""

    stage: Identifier = Field(description="The writing stage whose documents are shown.")
    field: Identifier = Field("text", description="The output field holding the document.")
    after: Identifier | None = Field(
        None,
        description="A reading stage: only the candidates it advanced are read (a pipeline edge).",
    )
    matching: Literal["single", "pair", "pool"] = "single"
    size: int | None = Field(
        None,
        ge=2,
        description="Pool: documents per pool (with `draw: carry`, at most the carried ones).",
    )
    draw: Literal["random", "stratified", "carry"] = Field(
        "random",
        description="Pool: `random` with the study seed, `stratified` so each pool holds every "
        "group of `groups`, or `carry` (the advanced members of each pool of `after`).",
    )
    groups: list[Identifier] = Field(
        default_factory=list,
        description="Stratified pools: persona axes whose cells each pool holds (all when empty).",
    )
    within: list[Identifier] = Field(
        default_factory=list,
        description="Factors or persona axes the documents of one pair or pool share "
        "(e.g. `job`: a screener compares applications for the same job).",
    )
    differ_in: Identifier | None = Field(
        None, description="Pair: the persona axis (two values) on which the two authors differ."
    )
    counterfactual: Identifier | None = Field(
        None,
        description="Single: read each document once per value of this persona axis, with "
        "the author's name replaced by a name of that value (the rest unchanged).",
    )
    author: Literal["name", "redacted"] = Field(
        "name",
        description="`redacted` removes the author's name from the shown document and label.",
    )

    @model_validator(mode="after")
    def _fits_matching(self) -> ReadsConfig:
        pool_only = {"size": self.size, "groups": self.groups or None}
        if self.matching != "pool":
            given = [k for k, v in pool_only.items() if v is not None]
            if given or self.draw != "random":
                raise ValueError(f"{', '.join(given) or 'draw'} only apply to `matching: pool`")
        if self.matching == "pool" and self.draw != "carry" and self.size is None:
            raise ValueError("a pool needs `size` (documents per pool)")
        if self.draw == "carry" and self.after is None:
            raise ValueError("`draw: carry` keeps the pools of the `after` stage: name it")
        if (self.matching == "pair") != (self.differ_in is not None):
            raise ValueError("`matching: pair` needs `differ_in`, and only pairs take it")
        if self.counterfactual is not None and self.matching != "single":
            raise ValueError("`counterfactual` applies to `matching: single`")
        if self.counterfactual is not None and self.author == "redacted":
            raise ValueError("a counterfactual swaps the shown name: it cannot also redact it")
        return self


def stratum_key(
    levels: Sequence[tuple[str, str]], attributes: Sequence[tuple[str, str]], within: Sequence[str]
) -> str:
    """The stratum of a document whose author has these design ``levels`` and persona
    ``attributes``: documents of one stratum share every value named in ``within``."""
    known = {**dict(levels), **dict(attributes)}
    return ",".join(f"{w}={known.get(w, '')}" for w in within)


def pool_slices(count: int, size: int) -> list[slice]:
    """How ``count`` documents of one stratum are cut into pools of ``size``: full pools, the
    last one holding what is left (the engine's matching and the prompts shown both cut so)."""
    return [slice(start, start + size) for start in range(0, count, size)]


def selects_from(k: int, shown: int) -> bool:
    """Whether an evaluation showing ``shown`` documents is a decision: picking ``k`` of ``k``
    or fewer is none (those documents are counted, not read)."""
    return shown > k
