"""Options several commands share, declared once as a group.

Typer reads a command's options off its signature, so options shared by several commands were
written out in each signature. An :class:`OptionGroup` declares them once; :func:`with_groups`
adds them to a command's signature (Typer lists each in ``--help`` as its own option) and hands
the command one object built from their values.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any


@dataclass(frozen=True)
class GroupOption:
    """One option of a group: its parameter name, type, Typer declaration and default."""

    name: str
    kind: Any
    declared: Any
    default: Any


@dataclass(frozen=True)
class OptionGroup:
    """Options a command receives as one object: ``build(**values)`` under ``name``."""

    name: str
    build: Callable[..., Any]
    options: tuple[GroupOption, ...]

    def parameters(self) -> list[inspect.Parameter]:
        return [
            inspect.Parameter(
                o.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=o.default,
                annotation=Annotated[o.kind, o.declared],
            )
            for o in self.options
        ]


def with_groups(*groups: OptionGroup) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the options of ``groups``: each group's values reach it as one object,
    as the keyword argument the group names."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(func, eval_str=True).parameters.values()
        grouped = {g.name for g in groups}
        kept = [p for p in own if p.name not in grouped]

        @functools.wraps(func)
        def command(**values: Any) -> Any:
            for group in groups:
                given = {o.name: values.pop(o.name) for o in group.options}
                values[group.name] = group.build(**given)
            return func(**values)

        added = [p for g in groups for p in g.parameters()]
        command.__signature__ = inspect.Signature([*kept, *added])  # type: ignore[attr-defined]
        return command

    return decorate
