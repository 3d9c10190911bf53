"""The part of an ``analyses:`` entry the study knows before any kind is loaded.

A kind's spec subclasses :class:`AnalysisSpec`; its check reads the study through
:class:`~biasim.simulator.study.facts.StudyFacts`. Both live with the study, not with the kinds,
so loading and checking a study finds a kind by name (:data:`biasim.registry.KINDS`) without
importing the kinds' layer. The schema (:mod:`.config`) holds this spec, so it imports nothing
above the schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from biasim.simulator.study.fields import Identifier, Strict

if TYPE_CHECKING:
    pass

#: The kind of an ``analyses:`` entry that names none (the original decision-rate analysis).
DEFAULT_KIND = "demographic_parity"


class AnalysisSpec(Strict):
    """The part of ``analyses:`` every kind shares; a kind's spec subclasses it."""

    kind: str = Field(description="Analysis kind (see `biasim kinds`).")
    name: Identifier | None = Field(None, description="Name of the output tables and figures.")
