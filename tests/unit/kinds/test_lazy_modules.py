"""The modules the kinds load on first use are named once, in ``simulator/kinds/lazy.py``: a kind
imports them from there rather than calling ``lazy_module`` again for a module already named."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import ROOT

KINDS = ROOT / "simulator" / "kinds"


def _lazy_names(path: Path) -> dict[str, int]:
    """``{module: line}`` of each ``lazy_module("module")`` call at the top level of ``path``."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        call = node.value if isinstance(node, ast.Assign) else None
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", "") == "lazy_module"
            and isinstance(call.args[0], ast.Constant)
        ):
            found[call.args[0].value] = node.lineno
    return found


def test_a_module_a_kind_loads_lazily_is_named_once() -> None:
    named = _lazy_names(KINDS / "lazy.py")
    assert "pandas" in named and "biasim.analysis.stats.units" in named  # the probe read it
    again = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted(KINDS.rglob("*.py"))
        if path.name != "lazy.py"
        for module, line in _lazy_names(path).items()
        if module in named
    ]
    assert not again, "named in simulator/kinds/lazy.py already:\n" + "\n".join(again)
