"""A call: one unit's request for a stage, as the dispatcher (:mod:`.dispatch`) and the batch
path (:mod:`.batching`) both handle it."""

from __future__ import annotations

from dataclasses import dataclass

from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import OutputSchema
from biasim.simulator.llm.types import LLMRequest


@dataclass(slots=True)
class Call:
    """One unit's request for a stage."""

    unit_id: str
    stage: str
    role: str
    request: LLMRequest
    schema: OutputSchema | None
    runtime: BackendRuntime
    reask: bool = True
    #: For ``answer: logprobs``: the choice field and its options, read from the answer's
    #: log-probabilities.
    decision: tuple[str, tuple[str, ...]] | None = None
    #: Units of work the answer settles: the agents that share this very request (progress
    #: counts units, not calls); 0 for a formatter's call, whose unit its first call counts.
    units: int = 1
