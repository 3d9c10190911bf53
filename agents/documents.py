"""What a reader is shown: a writer's document, the document as one evaluation shows it, and
the evaluation itself (the documents shown together). The engine's matching forms them
(:mod:`biasim.simulator.engine.matching`); a reader agent reads them, so they live here, below
both."""

from __future__ import annotations

from dataclasses import dataclass, field

from biasim.simulator.study.design import AgentSpec


@dataclass(frozen=True, slots=True)
class Document:
    """What a writer produced in a writing stage."""

    author: AgentSpec
    unit_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Shown:
    """A document as one evaluation shows it (position = index in the evaluation + 1).

    Attributes:
        document: The document.
        name: The author name shown (:data:`REDACTED` when redacted, ``None`` when the
            persona has no name).
        attributes: The persona attributes the shown name stands for: the author's, or the
            counterfactual's; empty when redacted (the reader cannot know them).
        text: The text shown (the author's name replaced when redacted or swapped).
        variant: The counterfactual value shown ("" without a counterfactual).
    """

    document: Document
    name: str | None
    attributes: tuple[tuple[str, str], ...]
    text: str
    variant: str = ""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One reader's task: documents shown together, and how many to pick.

    Attributes:
        id: Stable id within the stage (part of the unit id).
        shown: The documents in the order shown.
        cluster: Evaluations whose outcomes are not independent share it (a pair's two orders,
            the readings of one document under several names); for a pool, the pool itself.
        k: Documents the reader picks (0 for a single reading).
    """

    id: str
    shown: tuple[Shown, ...]
    cluster: str
    k: int
    # What `shared` found, per part: the prompt and the results row of a reading both ask.
    _shared: dict[str, dict[str, str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def shared(self, part: str) -> dict[str, str]:
        """What every shown document's author shares: their design ``levels`` (factor ->
        level) or ``variables`` (the template variables those levels give), e.g. the job.
        Worked out once per part; a fresh dict each time, so a template context built from
        it cannot change the evaluation's."""
        found = self._shared.get(part)
        if found is None:
            found = self._shared[part] = self._common(part)
        return dict(found)

    def _common(self, part: str) -> dict[str, str]:
        first = getattr(self.shown[0].document.author, part)
        # Usually every author has the same levels (or none): one tuple comparison each.
        if all(getattr(s.document.author, part) == first for s in self.shown[1:]):
            return dict(first)
        common = dict(first)
        for other in self.shown[1:]:
            theirs = dict(getattr(other.document.author, part))
            common = {k: v for k, v in common.items() if theirs.get(k) == v}
        return common
