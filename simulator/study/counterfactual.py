"""Counterfactual writing stages: the same call with only a protected attribute or name swapped.

``counterfactual: {swap: gender}`` on a stage asks every agent's call again once per other value
of ``gender``: the same agent, the same seed, the same template and earlier answers, with only
the persona's value of the axis swapped (its description re-rendered, and with a name bank its
name too: the bank's name for the swapped combination at the persona's position, since a name
stands for its group). ``{swap: name, within: race}`` swaps only the name shown, for the name
the bank gives the persona's combination with each other value of ``race`` (at the persona's
position in the bank), and leaves the attributes as they were. The agent's own call and its
twins make one counterfactual set: the results record it in ``cf_set``, the value each call
carries in ``cf_swap`` and the writer (the role and the model playing it) in ``cf_writer``, so
any difference inside a set is caused by the swap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from biasim.simulator.study.columns import COUNTERFACTUAL_COLUMNS
from biasim.simulator.study.fields import Identifier, Strict

if TYPE_CHECKING:
    from biasim.personas.attributes import Persona
    from biasim.simulator.study.personas import PersonaConfig

#: Result columns a counterfactual stage adds to every row of the stage.
SET, SWAP, WRITER = COUNTERFACTUAL_COLUMNS
#: ``swap:`` value that swaps the name shown and not the attributes.
NAME = "name"
#: What a twin's call adds to its agent's unit id: its own entry in the call store, in its
#: agent's unit of work (:func:`twin_unit`, :func:`work_unit`).
TWIN_MARK = "/cf="


def twin_unit(unit: str, value: str) -> str:
    """The call-store id of a twin's call: its agent's unit with the value it carries."""
    return f"{unit}{TWIN_MARK}{value}"


def work_unit(call_unit: str, stage: str) -> str:
    """The unit of work a call-store id of ``stage`` belongs to: a twin's call
    (:func:`twin_unit` of an id ending in its stage) is its agent's, as :func:`work_units`
    counts the results. Found after the stage, so a persona axis named ``cf`` or a value with a
    ``/`` is never taken for the mark."""
    at = call_unit.rfind(f"/{stage}{TWIN_MARK}")
    return call_unit if at < 0 else call_unit[: at + len(stage) + 1]


class CounterfactualConfig(Strict):
    """What a counterfactual stage swaps."""

    swap: Identifier = Field(
        description="A persona axis (its value is swapped; e.g. `gender`) or `name` (only the "
        "name shown is swapped, for a name of another value of `within`)."
    )
    within: Identifier | None = Field(
        None, description="With `swap: name`: the axis whose other values the names stand for."
    )

    @model_validator(mode="after")
    def _within_with_names(self) -> CounterfactualConfig:
        if self.swap == NAME and self.within is None:
            raise ValueError("`swap: name` needs `within`, the axis the swapped names stand for")
        if self.swap != NAME and self.within not in (None, self.swap):
            raise ValueError(f"`within` goes with `swap: name`; `swap: {self.swap}` swaps the axis")
        return self

    @property
    def axis(self) -> str:
        """The axis whose values the set spans."""
        return self.within if self.swap == NAME else self.swap  # type: ignore[return-value]


def name_key(attributes: tuple[tuple[str, str], ...], axis: str, value: str) -> str:
    """The name-bank key of ``attributes`` with ``axis`` set to ``value`` (values joined by ``/``
    in axis order, as the bank is keyed)."""
    return "/".join(value if a == axis else v for a, v in attributes)


def twins(
    persona: Persona,
    index: int,
    cf: CounterfactualConfig,
    personas: PersonaConfig,
    render: Callable[[str, dict[str, Any]], str],
) -> list[tuple[str, Persona]]:
    """The personas of ``persona``'s counterfactual twins, with the value each carries: one per
    value of the axis other than the persona's own, in the axis's order. ``index`` is the
    agent's position within its persona group (the name taken from another bank)."""
    from dataclasses import replace

    from biasim.personas.attributes import Persona, attribute_key

    attrs = dict(persona.attributes)
    own = attrs[cf.axis]
    out = []
    for value in personas.axes[cf.axis]:
        if value == own:
            continue
        name = persona.name
        if name is not None:
            names = personas.names[name_key(persona.attributes, cf.axis, value)]
            name = names[index % len(names)]
        if cf.swap == NAME:
            out.append((value, replace(persona, name=name)))
            continue
        swapped = {**attrs, cf.axis: value}
        context = {"attributes": swapped, **swapped, "name": name}
        twin = Persona(
            key=attribute_key(swapped),
            attributes=tuple(swapped.items()),
            description=render(personas.description, context),
            name=name,
        )
        out.append((value, twin))
    return out


def work_units(results: Any) -> int:
    """Units of work among result rows, as the engine, ``validate`` and the progress count them:
    each row is one, except that an agent's counterfactual set (its own call and its twins',
    one ``cf_set``) is one unit, since a twin's call is part of its agent's unit of work."""
    if SET not in results:
        return len(results)
    sets = results[SET]
    return int(sets.isna().sum()) + int(sets.dropna().nunique())
