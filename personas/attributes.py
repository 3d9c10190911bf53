"""Persona attributes: axis values, their combinations, and the personas built from them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Persona:
    """Who an agent is.

    Attributes:
        key: Stable text of the attribute values, e.g. ``gender=female``.
        attributes: ``(axis, value)`` pairs in axis order.
        description: Persona text the prompts show.
        name: The agent's name when the persona has one (name banks, generated personas).
    """

    key: str
    attributes: tuple[tuple[str, str], ...]
    description: str
    name: str | None = None

    def context(self) -> dict[str, Any]:
        """Template view: ``persona.name``, ``persona.description``, ``persona.<axis>`` and
        ``persona.axes`` (the axes this persona carries, e.g. one when axes are not crossed)."""
        return {
            "name": self.name,
            "description": self.description,
            "key": self.key,
            "axes": [axis for axis, _ in self.attributes],
            **dict(self.attributes),
        }


class PersonaSettings(Protocol):
    """The parts of a study's ``personas`` section persona building reads."""

    axes: Mapping[str, Sequence[str]]
    source: str
    cross: bool
    description: str
    names: Mapping[str, Sequence[str]]


def attribute_combinations(
    axes: Mapping[str, Sequence[str]], *, cross: bool
) -> list[dict[str, str]]:
    """Attribute sets the design covers.

    Args:
        axes: Axis name -> values.
        cross: All combinations (intersectional design) when true; otherwise each axis varies on
            its own and the persona carries only that axis.
    """
    if cross:
        names = list(axes)
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]
    return [{axis: value} for axis, values in axes.items() for value in values]


def persona_keys(axes: Mapping[str, Sequence[str]], *, cross: bool) -> list[str]:
    """Name-bank keys: the values of a combination joined by ``/`` in axis order."""
    return ["/".join(c.values()) for c in attribute_combinations(axes, cross=cross)]


def attribute_key(attributes: Mapping[str, str]) -> str:
    """Stable identifier text of an attribute set, e.g. ``race=White,gender=female``."""
    return ",".join(f"{k}={v}" for k, v in attributes.items())


Renderer = Callable[[str, dict[str, Any]], str]


def combination_count(axes: Mapping[str, Sequence[str]], *, cross: bool) -> int:
    """How many attribute sets :func:`attribute_combinations` gives, without building them."""
    sizes = [len(values) for values in axes.values()]
    return math.prod(sizes) if cross else sum(sizes)


def build_personas(
    settings: PersonaSettings, agents_per_value: int, render: Renderer
) -> list[Persona]:
    """One persona per attribute combination and agent index, in a fixed order.

    Attribute-only personas are identical across indices (agents differ only in their sampling
    seed); name-bank personas take the bank's names in turn, and their description template
    sees the name as ``name`` (none without a bank).

    Args:
        settings: The study's persona section.
        agents_per_value: Agents per attribute combination.
        render: Renders the description template (the engine's sandboxed renderer).
    """
    return list(iter_personas(settings, agents_per_value, render))


def iter_personas(
    settings: PersonaSettings, agents_per_value: int, render: Renderer
) -> Iterator[Persona]:
    """The personas of :func:`build_personas`, one at a time (a large design never holds them
    all)."""
    for attrs, names in _persona_groups(settings):
        descriptions: dict[str | None, Persona] = {}
        for index in range(agents_per_value):
            name = names[index % len(names)] if names else None
            if name not in descriptions:  # names repeat in turn: render each once
                descriptions[name] = _persona(settings, attrs, name, render)
            yield descriptions[name]


def distinct_personas(
    settings: PersonaSettings, agents_per_value: int, render: Renderer
) -> Iterator[tuple[Persona, int]]:
    """Each persona :func:`iter_personas` yields, once, with how many times it yields it
    (names of a bank repeat in turn), without going through every agent."""
    for attrs, names in _persona_groups(settings):
        if not names:
            yield _persona(settings, attrs, None, render), agents_per_value
            continue
        turns, extra = divmod(agents_per_value, len(names))
        for i, name in enumerate(names[:agents_per_value]):
            yield _persona(settings, attrs, name, render), turns + (i < extra)


def _persona_groups(settings: PersonaSettings) -> Iterator[tuple[dict[str, str], list[str]]]:
    """Each combination of attributes with the names of its bank (none unless name_bank)."""
    for attrs in attribute_combinations(settings.axes, cross=settings.cross):
        names = (
            settings.names.get("/".join(attrs.values()), [])
            if settings.source == "name_bank"
            else []
        )
        yield attrs, names


def _persona(
    settings: PersonaSettings, attrs: dict[str, str], name: str | None, render: Renderer
) -> Persona:
    context = {"attributes": attrs, **attrs, "name": name}
    return Persona(
        key=attribute_key(attrs),
        attributes=tuple(attrs.items()),
        description=render(settings.description, context),
        name=name,
    )
