"""The kinds over one stage's decisions (``demographic_parity`` and the seed-004 kinds split
from it) never import another kind's module: what they share lives in
``simulator/kinds/sections/decisions.py`` and ``study/decisions_spec.py``."""

from __future__ import annotations

import ast
from pathlib import Path

from biasim.registry import KINDS
from biasim.simulator.kinds import get_kind
from biasim.simulator.study.decisions_spec import StageDecisionsSpec
from tests.lint_imports import source_modules


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_decisions_kind_imports_another_kind_module() -> None:
    modules = {name: target.split(":", 1)[0] for name, target in KINDS.builtin.items()}
    decisions = {n for n in modules if issubclass(get_kind(n).spec, StageDecisionsSpec)}
    assert decisions == {
        "demographic_parity",
        "condition_differences",
        "explicit_bias",
        "rationale_terms",
        "predictions_check",
    }
    sources = source_modules()
    crossing = {
        (name, imported)
        for name in decisions
        for imported in _imports(sources[modules[name]])
        if imported in set(modules.values()) - {modules[name]}
    }
    assert not crossing, crossing
