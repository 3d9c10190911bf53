"""What a kind's check reads of the study (:class:`StudyFacts`), and where it reports problems.

Beside the spec (:mod:`.analysis_spec`), which the schema (:mod:`.config`) holds, and above the
schema, whose study it reads: loading and checking a study finds a kind by name
(:data:`biasim.registry.KINDS`) without importing the kinds' layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from biasim.registry import nearest
from biasim.simulator.study.columns import COUNTERFACTUAL_COLUMNS

if TYPE_CHECKING:
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.common.yamlsource import FieldPath, SourceMap
    from biasim.simulator.study.config import OutputField, StudyConfig


@dataclass
class StudyFacts:
    """What a kind checks its spec against, and where its problems are reported.

    Attributes:
        config: The study (without its analyses' typed specs checked yet).
        smap: Source locations of the study file.
        at: Path of this analysis in the study, e.g. ``("analyses", 0)``.
        problems: Problems found so far; the helpers append to it.
        stages_read: Each stage the check named (through :meth:`need_stage`) and the field that
            names it, so the study's checks can refuse what a kind cannot read (a stage of
            counterfactual sets, whose twins are not independent units).
    """

    config: StudyConfig
    smap: SourceMap
    at: FieldPath
    problems: list[Problem] = field(default_factory=list)
    stages_read: list[tuple[str, FieldPath]] = field(default_factory=list)

    @property
    def axes(self) -> dict[str, list[str]]:
        """Persona axes and their values."""
        return self.config.personas.axes

    @property
    def stage_fields(self) -> dict[str, dict[str, OutputField]]:
        """Stage name -> its output fields (empty for free-text stages, which give `text`)."""
        return {stage.name: dict(stage.output or {}) for stage in self.config.stages}

    @property
    def columns(self) -> set[str]:
        """Results columns a spec may name besides the persona axes: factors, recorded
        variables, ``model_label`` and, with a counterfactual stage, its set columns."""
        design = self.config.design
        sets = any(stage.counterfactual is not None for stage in self.config.stages)
        return {
            *design.factors,
            *design.record,
            "model_label",
            *(COUNTERFACTUAL_COLUMNS if sets else ()),
        }

    def problem(self, path: FieldPath, message: str) -> None:
        """Report ``message`` at ``path`` relative to this analysis."""
        self.problems.append(self.smap.problem((*self.at, *path), message))

    def need_stage(self, stage: str, path: FieldPath) -> bool:
        """Report a stage the study does not have; True when it exists."""
        if stage in self.stage_fields:
            self.stages_read.append((stage, path))
            return True
        self.problem(path, f"no stage named `{stage}`" + _known(stage, self.stage_fields))
        return False

    def need_field(self, stage: str, name: str, path: FieldPath, stage_path: FieldPath) -> None:
        """Report a stage that does not exist or has no output field ``name``."""
        if not self.need_stage(stage, stage_path):
            return
        fields = self.stage_fields[stage] or {"text": None}
        if name not in fields:
            self.problem(
                path, f"stage `{stage}` has no output field `{name}`" + _known(name, fields)
            )

    def need_column(self, name: str | None, path: FieldPath) -> None:
        """Report a name that is not a design factor, recorded variable or ``model_label``."""
        if name is not None and name not in self.columns:
            self.problem(
                path,
                f"`{name}` is not a design factor or recorded variable"
                + _known(name, self.columns),
            )

    def need_axes(self, axes: list[str], path: FieldPath) -> None:
        """Report every name in ``axes`` that is not a persona axis."""
        for axis in axes:
            if axis not in self.axes:
                self.problem(path, f"`{axis}` is not a persona axis" + _known(axis, self.axes))


def _known(name: str, known: Iterable[str]) -> str:
    """The closest of ``known`` to a misspelt ``name`` and all of them, so the fix is in the
    message rather than in the study file's other sections."""
    names = sorted(known)
    return nearest(name, names) + f" (known: {', '.join(f'`{n}`' for n in names) or 'none'})"
