"""``lint-imports`` over the package as installed: the import contract of pyproject.toml
(``[tool.importlinter]``, see docs/architecture.md) over every import, type-only and lazy ones too.

Usage: ``python -m tests.lint_imports [--config FILE] [--root CHECKOUT]`` (``make check`` and
``tests/unit/architecture/test_import_contract.py`` run it); exit 0 when every contract is kept.

import-linter (grimp) finds a package by walking its folder, and ``biasim``'s subpackages sit at
the checkout's top (setup.py maps ``simulator/`` to ``biasim.simulator``), so it is shown a view:
a temporary ``biasim/`` of links to the package's own files and to each folder setup.py maps.
``lazy_module("biasim.x")`` imports a module named by a string, which grimp cannot read: each
such call is added to the graph as an import at its line, so the contracts hold for it too.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.paths import ROOT

if TYPE_CHECKING:
    from grimp import ImportGraph

#: The package's own folder; the others are the folders setup.py maps into it.
PACKAGE = "biasim"


def mapped_folders(root: Path = ROOT) -> tuple[str, ...]:
    """The top-level folders setup.py installs as subpackages of ``biasim`` (its ``FOLDERS``)."""
    tree = ast.parse((root / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "FOLDERS"
        ]:
            return tuple(ast.literal_eval(node.value))
    raise LookupError("setup.py names no FOLDERS")


def source_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its installed name (``simulator/study/config.py`` ->
    ``biasim.simulator.study.config``)."""
    modules: dict[str, Path] = {}
    for folder in (PACKAGE, *mapped_folders(root)):
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts if parts[0] == PACKAGE else [PACKAGE, *parts])] = path
    return modules


def make_view(dest: Path, root: Path = ROOT) -> Path:
    """``dest/biasim``: links to the package's own files and to each mapped folder; returns
    ``dest``, the folder to put on ``sys.path``."""
    package = dest / PACKAGE
    package.mkdir(parents=True)
    for path in (root / PACKAGE).iterdir():
        if path.suffix == ".py":
            (package / path.name).symlink_to(path)
    for folder in mapped_folders(root):
        (package / folder).symlink_to(root / folder, target_is_directory=True)
    return dest


def lazy_imports(modules: dict[str, Path]) -> Iterator[tuple[str, str, int, str]]:
    """``(importer, imported, line number, line)`` of each ``lazy_module("biasim...")`` call.

    Raises:
        ValueError: A ``lazy_module`` call whose argument is not a string literal (the contract
            could not read it).
    """
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        if "lazy_module(" not in source or name.endswith(".common.lazy"):
            continue
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and _called_name(node.func) == "lazy_module"):
                continue
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise ValueError(
                    f"{path}:{node.lineno}: lazy_module takes the module's name as a string "
                    "literal, so the import contract can read it"
                )
            if arg.value == PACKAGE or arg.value.startswith(PACKAGE + "."):
                yield name, arg.value, node.lineno, lines[node.lineno - 1].strip()


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def add_lazy_imports(graph: ImportGraph, modules: dict[str, Path]) -> None:
    """Add each lazy import to ``graph``; one naming no module of the package is an error."""
    for importer, imported, line, text in lazy_imports(modules):
        if imported not in graph.modules:
            raise ValueError(f"{modules[importer]}:{line}: lazy_module names no module: {imported}")
        graph.add_import(importer=importer, imported=imported, line_number=line, line_contents=text)


def circles(graph: ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (module by module:
    the contracts see circles inside a package, and between layers, not between the packages
    that share a layer)."""
    import networkx as nx

    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from(
            (module, other) for other in graph.find_modules_directly_imported_by(module)
        )
    return sorted(sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1)


def lint(config: Path, root: Path = ROOT) -> bool:
    """import-linter's ``lint-imports`` with ``config``, lazy imports added to its graph; then
    no module-level import circle in that graph."""
    from importlinter import configuration
    from importlinter.adapters.building import GraphBuilder
    from importlinter.application import use_cases
    from importlinter.application.app_config import settings

    modules = source_modules(root)
    built: list[ImportGraph] = []

    class WithLazyImports(GraphBuilder):
        def build(self, *args: Any, **kwargs: Any) -> ImportGraph:
            graph = super().build(*args, **kwargs)
            add_lazy_imports(graph, modules)
            built.append(graph)
            return graph

    configuration.configure()
    settings.configure(GRAPH_BUILDER=WithLazyImports())
    kept = use_cases.lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    found = [c for graph in built for c in circles(graph)]
    for circle in found:
        print("Import circle: " + " <-> ".join(circle))
    print(f"Module-level import circles: {len(found)}")
    return kept and not found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lint_imports", description=__doc__)
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml")
    # Another checkout's folders (a test's copy holding a module that breaks a contract).
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    if PACKAGE in sys.modules:
        # Imported from the checkout, ``biasim`` would be found there, not in the view.
        parser.error("run it in a fresh interpreter (python -m tests.lint_imports)")
    with tempfile.TemporaryDirectory(prefix="biasim-import-view-") as tmp:
        sys.path.insert(0, str(make_view(Path(tmp), args.root.resolve())))
        return 0 if lint(args.config.resolve(), args.root.resolve()) else 1


if __name__ == "__main__":
    sys.exit(main())
