"""Analysis kinds as plug-ins: each kind is one module declaring its spec, its checks against
the study, its computation on the results (through ``analysis/``) and its renderings.

Adding a kind is one new module and a :func:`register_kind` call (or an entry point in the
``biasim.analyses`` group); see ``docs/extending/kinds.md``.
"""

from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    slug,
)
from biasim.simulator.kinds.registry import (
    DEFAULT_KIND,
    ENTRY_POINT_GROUP,
    UnknownKind,
    get_kind,
    kind_names,
    register_kind,
    unregister_kind,
)

__all__ = [
    "DEFAULT_KIND",
    "ENTRY_POINT_GROUP",
    "AnalysisContext",
    "AnalysisKind",
    "AnalysisSpec",
    "Section",
    "StudyFacts",
    "UnknownKind",
    "get_kind",
    "kind_names",
    "register_kind",
    "slug",
    "unregister_kind",
]
