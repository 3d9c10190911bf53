"""Modules imported on first use: an analysis kind is loaded to read its part of a study file
(``biasim validate``), long before, if ever, it draws a figure or runs a test, and the
libraries behind those (matplotlib, scipy.stats) cost seconds to import."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """``name``, executed when one of its attributes is first read (already imported: as is)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, module)
    return module
