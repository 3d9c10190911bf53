"""Policies: variants of a pipeline's reading stages, run on the same applicants and documents.

A policy (``policies:`` in a study file) changes settings of some reading stages: the shown
author (``author: redacted``), how many a reader picks (``select``), the prompt or system
message (a rubric), the advance rule of a single reading (a threshold), a committee of readers
(``readers``: a second reader, a panel) or a selection rule across pools (``selection``).
Loading a study expands each policy into copies of every reading stage, named
``<stage>__<policy>``, that read the documents the study's writing stages wrote once; each
copy draws its pools as the stage it copies does (:attr:`StageConfig.policy_of`). So every
policy reads the same applicants in the same pools (common random numbers), and the difference
between policies is estimated paired.
The study's own stages are the policy :data:`BASE`. This module is the ``policies:`` section
the schema holds; the copies are made in :mod:`.policy_copies`, above the schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from biasim.simulator.study.committees import CommitteeConfig, SelectionConfig
from biasim.simulator.study.fields import Identifier, Strict

#: The policy the study's own stages implement.
BASE = "base"
#: What a policy may change in a reading stage; anything else would change the design itself.
CHANGEABLE = ("author", "select", "prompt", "system", "advance", "readers", "selection")
_WHY_NOT = {
    "size": "a different pool size draws different pools, so no pool is read under both "
    "policies and the paired comparison has no shared unit; run it as a second study and "
    "compare the two designs unpaired with `biasim compare --designs`",
    "reads": "a policy changes `author` of what a stage reads, not which documents it reads; "
    "a design that reads others is a second study, compared unpaired with `biasim compare "
    "--designs`",
    "population": "a policy keeps the readers; declare another population in a second study "
    "and compare the two designs with `biasim compare --designs`",
    "role": "a policy keeps the role (and so the model); compare models with `biasim compare`",
    "output": "the answer fields stay the same, so every policy's answers are read alike",
}
#: Names a policy analyst may reach for, and the field that does it.
_SPELLED = {
    "reader": "a second reader (or a panel) is `readers: {count: 2, aggregate: any}` "
    "(aggregate: any, all, majority or mean_score); other readers (another population) make "
    "a second design, compared unpaired with `biasim compare --designs`",
    "four_fifths": "a per-stage four-fifths rule is `selection: {rule: four_fifths, by: <axis>}`",
}
_SPELLED.update(
    second_reader=_SPELLED["reader"],
    committee=_SPELLED["reader"],
    four_fifths_rule=_SPELLED["four_fifths"],
    global_top_k="a selection across pools is `selection: {rule: global_top_k, k: <count>}`",
)


class PolicyStage(Strict):
    """The settings one policy changes in one reading stage (the rest stays as declared)."""

    author: Literal["name", "redacted"] | None = Field(
        None, description="`redacted`: the reader sees no author name (names withheld)."
    )
    select: int | None = Field(None, ge=1, description="How many the reader picks.")
    prompt: str | None = Field(None, description="The user message template (e.g. a rubric).")
    system: str | None = Field(None, description="The system message template.")
    advance: str | None = Field(
        None, description="Single readings: the advance rule (e.g. a higher score threshold)."
    )
    readers: CommitteeConfig | None = Field(
        None,
        description="A committee reading every evaluation (e.g. a second reader: "
        "`{count: 2, aggregate: any}`), read on the same pools as the other policies.",
    )
    selection: SelectionConfig | None = Field(
        None,
        description="A rule across the stage's pools (`global_top_k`, `four_fifths`) deciding "
        "who advances after every pool is read.",
    )

    @model_validator(mode="before")
    @classmethod
    def _only_changeable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in CHANGEABLE:
                    why = _WHY_NOT.get(key) or _SPELLED.get(
                        key, "the engine applies no such change while keeping the documents"
                    )
                    raise ValueError(
                        f"a policy cannot change `{key}`: {why} (a policy may change "
                        f"{', '.join(f'`{c}`' for c in CHANGEABLE)})"
                    )
        return data


class PolicyConfig(Strict):
    """One policy: a name, what it is, and the reading stages it changes."""

    description: str = Field("", description="What the policy is, in words (for the report).")
    stages: dict[Identifier, PolicyStage] = Field(
        min_length=1, description="Reading stage name -> the settings this policy changes."
    )
    from_cycle: int | None = Field(
        None,
        description="Market studies: the cycle (1 .. cycles - 1) the policy starts in. Before "
        "it the policy's trajectory is the base's (its workforce, hires and leavers, with no "
        "calls of its own); from it on the policy reads with its own stage copies, forked from "
        "the base's workforce (a fork of a run: `biasim run --replay` answers the base's calls "
        "from the earlier run's store).",
    )


def policy_stage_name(stage: str, policy: str) -> str:
    """The name of ``stage`` as run under ``policy`` (the stage itself under :data:`BASE`)."""
    return stage if policy == BASE else f"{stage}__{policy}"
