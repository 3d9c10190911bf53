"""Which persona axis each explicit question asks about (``explicit.stages`` of
``demographic_parity``).

An explicit trial asks the model outright for the likely attribute of whoever acted; its case
is the attribute asked about, not the axes of the agent that happened to run the trial. So each
explicit stage is tied to one attribute: an axis of ``by`` or the intersectional label of all of
them (``race×gender``, the label the implicit analysis gives crossed groups). Two stages tied to
one attribute would pool two questions in one case, so they are refused at validate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from biasim.simulator.common.yamlsource import FieldPath

#: How a mapping key may spell the intersection of several axes.
_JOINERS = re.compile(r"\s*[×*]\s*")


@dataclass
class QuestionTies:
    """Stage -> attribute it asks about, and the reasons a design cannot be analysed."""

    attribute: dict[str, str] = field(default_factory=dict)
    problems: list[tuple[FieldPath, str]] = field(default_factory=list)


def intersection_label(axes: Sequence[str]) -> str:
    """The label the implicit analysis gives crossed groups (``race×gender``)."""
    return "×".join(axes)


def _entries(stages: list[str] | dict[str, str]) -> list[tuple[FieldPath, str, str | None]]:
    """(path, stage, declared attribute or None) per entry of ``explicit.stages``."""
    if isinstance(stages, dict):
        return [(("explicit", "stages", key), stage, key) for key, stage in stages.items()]
    return [(("explicit", "stages", j), stage, None) for j, stage in enumerate(stages)]


def _declared(key: str, by: list[str], axes: list[str]) -> tuple[str | None, str | None]:
    """(attribute, problem) for a mapping key: an axis of ``by`` or all of them crossed."""
    names = [n for n in _JOINERS.split(key.strip()) if n]
    if len(names) == 1 and names[0] in by:
        return names[0], None
    if len(names) > 1 and set(names) == set(by) and len(names) == len(by):
        return intersection_label(axes), None
    crossed = f" or `{intersection_label(by)}`" if len(by) > 1 else ""
    return None, (
        f"`{key}` is not an axis of `by` ({', '.join(f'`{a}`' for a in by)}){crossed}: each "
        "explicit question is tied to the axis (or the crossed axes) it asks about"
    )


def _inferred(when: str | None, by: list[str], attributes: list[str]) -> str | None:
    """The attribute of a listed stage: the one axis its `when` names, else the analysis's
    only attribute; None when it cannot be told."""
    named = [a for a in by if when and (f"'{a}'" in when or f'"{a}"' in when)]
    if len(named) == 1:
        return named[0]
    return attributes[0] if len(attributes) == 1 and not named else None


def tie_questions(
    stages: list[str] | dict[str, str],
    by: list[str],
    separately: bool,
    study: Any,
) -> QuestionTies:
    """Tie each explicit stage to the attribute it asks about, or say why it cannot be.

    Args:
        stages: ``explicit.stages``: a list (each stage's axis is the one its `when` names, or
            the analysis's only attribute) or a mapping attribute -> stage.
        by: The analysis's grouping axes.
        separately: Whether each axis is its own case (then each axis is an attribute; else the
            crossed label of the study's axes in ``by`` is the only one).
        study: The study config (its stages' `when` and its persona axes).
    """
    axes = [a for a in by if a in study.personas.axes]
    attributes = axes if separately else ([intersection_label(axes)] if axes else [])
    whens = {stage.name: stage.when for stage in study.stages}
    ties = QuestionTies()
    first: dict[str, tuple[FieldPath, str]] = {}
    for path, stage, key in _entries(stages):
        if key is not None:
            attribute, problem = _declared(key, by, axes)
        else:
            attribute, problem = _inferred(whens.get(stage), by, attributes), None
            if attribute is None:
                problem = _untold(stage, by)
        if problem is not None:
            ties.problems.append((path, problem))
            continue
        if attribute in first:
            ties.problems.append((path, _pooled(first[attribute][1], stage, attribute)))
            continue
        first[attribute] = (path, stage)
        ties.attribute[stage] = attribute
    return ties


def _untold(stage: str, by: list[str]) -> str:
    example = ", ".join(f"{a}: explicit_{a}" for a in by)
    return (
        f"cannot tell which axis explicit stage `{stage}` asks about (its `when` names no "
        f"single axis of `by`, and the analysis has several): write `stages` as a mapping "
        f"from each axis to its question's stage, e.g. {{{example}}}"
    )


def _pooled(earlier: str, stage: str, attribute: str) -> str:
    return (
        f"explicit stages `{earlier}` and `{stage}` are both tied to `{attribute}`: their "
        "answers would be pooled into one case as if one question's labels; tie each stage to "
        "the axis it asks about with a mapping (axis: stage), or analyse one of them"
    )
