"""The import contract: data flows one way, study -> engine -> LLM layer -> analysis -> report.

The graph is read from the source (every ``import``, including those inside functions, except
under ``if TYPE_CHECKING:``), so a lazy import cannot hide a circle or a call back up the layers.
Plug-ins (kinds, backends, scorers) are found through :mod:`biasim.registry` by name, which is
why the engine can run a kind without importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

FOLDERS = ("biasim", "simulator", "analysis", "agents", "personas", "scenarios")

#: Lowest first. A module may import its own layer and the layers below, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("biasim.registry", "biasim.personas", "biasim.scenarios", "biasim.analysis"),
    ("biasim.simulator.common",),
    ("biasim.simulator.llm",),
    ("biasim.simulator.study",),
    ("biasim.agents",),
    ("biasim.simulator.kinds",),
    ("biasim.simulator.report",),
    ("biasim.simulator.engine",),
    ("biasim.simulator.tools", "biasim.simulator.api"),
    ("biasim.simulator.cli", "biasim.simulator.__main__", "biasim.__main__", "biasim"),
)
#: Imports that break a rule of their own besides the layers: (importer prefix, imported
#: prefix, the rule).
FORBIDDEN = (
    ("biasim.simulator.engine", "biasim.analysis.studies", "the engine imports no study's code"),
    ("biasim.simulator.engine", "biasim.simulator.kinds", "the engine finds kinds by name"),
    ("biasim.simulator.study", "biasim.simulator.kinds", "the study finds kinds by name"),
    ("biasim.simulator.study.config", "biasim.simulator.study.checks", "schema imports no checks"),
    ("biasim.simulator.study.config", "biasim.simulator.study.design", "schema imports no design"),
    ("biasim.personas", "biasim.analysis", "personas are data"),
)


def module_name(path: Path) -> str:
    """``simulator/study/config.py`` -> ``biasim.simulator.study.config``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "biasim" else ["biasim", *parts])


def source_modules() -> dict[str, Path]:
    """Every module of the package, by its installed name."""
    return {
        module_name(p): p
        for folder in FOLDERS
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports at run time."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def layer_of(name: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    return best


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert [name for name in graph if layer_of(name) < 0] == []


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    assert circles(graph) == []


def test_no_import_runs_back_up_the_layers(graph: dict[str, set[str]]) -> None:
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in graph.items()
        for dst in targets
        if layer_of(dst) > layer_of(src)
    )
    assert upward == []


def test_no_forbidden_imports(graph: dict[str, set[str]]) -> None:
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    broken = sorted(
        f"{src} -> {dst}: {rule}"
        for src, targets in graph.items()
        for dst in targets
        for importer, imported, rule in FORBIDDEN
        if under(src, importer) and under(dst, imported)
    )
    assert broken == []


def test_the_contract_catches_a_circle_and_an_upward_import() -> None:
    """The checks themselves can fail: a made-up graph with both faults is caught."""
    fake = {
        "biasim.simulator.study.config": {"biasim.simulator.engine.model"},
        "biasim.simulator.engine.model": {"biasim.simulator.study.config"},
    }
    assert circles(fake) == [sorted(fake)]
    assert layer_of("biasim.simulator.engine.model") > layer_of("biasim.simulator.study.config")


def test_every_folder_of_code_is_a_package() -> None:
    """setup.py finds packages by their ``__init__.py``: a folder without one would be left out
    of the wheel (the CLI once failed from a wheel for this reason)."""
    folders = {p.parent for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}
    assert (
        sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []
    )
