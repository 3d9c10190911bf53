"""Skip marks for optional packages, decided without importing them: ``pytest.importorskip``
at a module's top imports torch (seconds) while the suite is only being collected."""

from __future__ import annotations

from importlib.util import find_spec

import pytest


def installed(name: str) -> bool:
    """Whether the top-level package ``name`` can be imported (found, not imported)."""
    return find_spec(name) is not None


def requires(*names: str) -> pytest.MarkDecorator:
    """Skip the tests it marks when one of these top-level packages is not installed."""
    missing = [name for name in names if not installed(name)]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")
