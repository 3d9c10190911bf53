"""Finding an analysis kind by the name a study file gives in ``kind:``.

Kinds live in :data:`biasim.registry.KINDS`, the one registry of every plug-in type; third-party
packages add kinds through the ``biasim.analyses`` entry-point group, tests and scripts call
:func:`register_kind`.
"""

from __future__ import annotations

from biasim.registry import KINDS, UnknownPlugin
from biasim.simulator.study.analysis_spec import DEFAULT_KIND

from .base import AnalysisKind

ENTRY_POINT_GROUP = KINDS.group
UnknownKind = UnknownPlugin

__all__ = ["DEFAULT_KIND", "ENTRY_POINT_GROUP", "UnknownKind", "get_kind", "kind_names"]


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
    KINDS.register(key, kind)


def unregister_kind(name: str) -> None:
    """Remove a kind registered with :func:`register_kind` (tests)."""
    KINDS.unregister(name)


def kind_names() -> list[str]:
    """Names of every available kind."""
    return KINDS.names()


def get_kind(name: str) -> AnalysisKind:
    """The kind registered as ``name``.

    Raises:
        UnknownKind: Nothing is registered under that name.
        biasim.registry.MissingExtra: It needs an optional extra that is not installed.
        biasim.registry.PluginNotLoaded: Its import raised, or it is registered under another
            name than its spec's ``kind`` Literal (the message names both and the fix).
    """
    kind = KINDS.instance(name)
    if not isinstance(kind, AnalysisKind):
        raise TypeError(f"analysis kind `{name}` is not an AnalysisKind: {kind!r}")
    return kind
