"""A reading stage's committee (``readers:``) and its selection rule across pools
(``selection:``): the schema only; the engine's rules are :mod:`biasim.simulator.engine.committees`.

A committee reads every evaluation of the stage ``count`` times, each time by another reader of
the stage's population (its own call, seed and row, stage ``<stage>.reader<j>``); the stage's own
row of the evaluation is the committee's decision (``aggregate``). A selection rule is decided
after every pool of the stage is read, from each document's *support* (the share of the stage's
readers who advanced it, or the committee's mean ``score``), and replaces or corrects the pools'
own decisions before the next stage reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from biasim.simulator.study.fields import Identifier, Strict

#: The most readers one committee may have (each is a call per evaluation).
MAX_READERS = 9


class CommitteeConfig(Strict):
    """Several readers per evaluation and how their answers combine into the stage's decision."""

    count: int = Field(
        ge=2,
        le=MAX_READERS,
        description="Readers per evaluation: evaluation i is read by readers i*count+1 .. "
        "i*count+count of the stage's population (in turn, as single readers are dealt), each "
        "its own call recorded as a row of stage `<stage>.reader<j>`.",
    )
    aggregate: Literal["any", "all", "majority", "mean_score"] = Field(
        description="How the readers' answers decide: `any` advances a document one reader "
        "advanced (the union of picks), `all` one every reader advanced, `majority` one more "
        "than half advanced; `mean_score` in a pool or pair advances the `select` documents "
        "with the most picks (ties broken by a seeded draw), in a single reading it averages "
        "the answer field `score` and applies the stage's `advance` to the first reader's "
        "answer with `score` replaced by the mean."
    )
    score: Identifier | None = Field(
        None,
        description="Single readings with `mean_score`: the numeric answer field averaged (it "
        "also ranks documents for a selection rule).",
    )


class SelectionConfig(Strict):
    """A rule deciding who advances from a stage across its pools, after all are read."""

    rule: Literal["global_top_k", "four_fifths"] = Field(
        description="`global_top_k`: the `k` documents of the stage with the highest support "
        "advance, whatever their pool; `four_fifths`: the pools' decisions stand, then while a "
        "group of `by` has a stage selection rate (advanced / read in a valid evaluation) "
        "below 0.8 of the highest group's, its not-advanced document with the highest support "
        "is moved to advanced (one at a time, the lowest-rate group first, ties by the group's "
        "name; documents are only added, never removed). Support = the mean `score` of a "
        "committee that declares one, else the share of the evaluation's readers who advanced "
        "the document; ties are broken by a draw seeded by the study seed and the stage."
    )
    k: int | None = Field(None, ge=1, description="`global_top_k`: how many advance.")
    by: Identifier | None = Field(None, description="`four_fifths`: the persona axis of groups.")

    @model_validator(mode="after")
    def _fits_rule(self) -> SelectionConfig:
        if self.rule == "global_top_k" and (self.k is None or self.by is not None):
            raise ValueError("`rule: global_top_k` takes `k` (how many advance) and no `by`")
        if self.rule == "four_fifths" and (self.by is None or self.k is not None):
            raise ValueError("`rule: four_fifths` takes `by` (the persona axis) and no `k`")
        return self
