"""The registry that finds an analysis kind by the name a study file gives in ``kind:``.

Built-in kinds are registered by import path, so a study that uses one kind never imports the
others' dependencies (scikit-learn for the hiring emails). Third-party packages add kinds
through the ``biasim.analyses`` entry-point group; tests and scripts call
:func:`register_kind`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from .base import AnalysisKind

ENTRY_POINT_GROUP = "biasim.analyses"
#: The kind of an ``analyses:`` entry that names none (the original decision-rate analysis).
DEFAULT_KIND = "demographic_parity"

_BUILTIN: dict[str, str] = {
    "demographic_parity": "biasim.simulator.kinds.decisions:DecisionsKind",
    "acceptance": "biasim.simulator.kinds.acceptance:AcceptanceKind",
    "pipeline": "biasim.simulator.kinds.pipeline:PipelineKind",
    "letters": "biasim.simulator.kinds.letters:LettersKind",
    "prism": "biasim.simulator.kinds.prism:PrismKind",
    "association": "biasim.simulator.kinds.association:AssociationKind",
    "picks": "biasim.simulator.kinds.picks:PicksKind",
    "letter_evaluation": "biasim.simulator.kinds.letter_evaluation:LetterEvaluationKind",
    "transmission": "biasim.simulator.kinds.transmission:TransmissionKind",
}
_EXTRA: dict[str, Any] = {}
_LOADED: dict[str, AnalysisKind] = {}


class UnknownKind(KeyError):
    """No kind of that name is registered."""


def register_kind(kind: AnalysisKind | type[AnalysisKind] | str, name: str | None = None) -> None:
    """Register a kind: an instance, a class, or a ``"module:attr"`` path.

    Args:
        kind: The kind.
        name: Its ``kind:`` name; the kind's ``name`` attribute when absent (required for a
            path).
    """
    key = name or getattr(kind, "name", None)
    if not key:
        raise ValueError("a kind given by path needs `name`")
    _EXTRA[key] = kind
    _LOADED.pop(key, None)


def unregister_kind(name: str) -> None:
    """Remove a kind registered with :func:`register_kind` (tests)."""
    _EXTRA.pop(name, None)
    _LOADED.pop(name, None)


def kind_names() -> list[str]:
    """Names of every available kind."""
    plugins = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(set(_BUILTIN) | set(_EXTRA) | plugins)


def get_kind(name: str) -> AnalysisKind:
    """The kind registered as ``name``.

    Raises:
        UnknownKind: Nothing is registered under that name.
    """
    if name in _LOADED:
        return _LOADED[name]
    target: Any = _EXTRA.get(name) or _BUILTIN.get(name)
    if target is None:
        plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        if name not in plugins:
            raise UnknownKind(name)
        target = plugins[name].load()
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
    kind = target() if isinstance(target, type) else target
    if not isinstance(kind, AnalysisKind):
        raise TypeError(f"analysis kind `{name}` is not an AnalysisKind: {kind!r}")
    _LOADED[name] = kind
    return kind
