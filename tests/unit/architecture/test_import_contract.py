"""The import contract: data flows one way, study -> engine -> LLM layer -> analysis -> report.

import-linter checks it (``[tool.importlinter]`` in pyproject.toml, run by
``python -m tests.lint_imports``): layers and forbidden imports, each through chains of imports
as well as directly, counting imports under ``if TYPE_CHECKING:`` and ``lazy_module("...")``
strings. What it does not check is here: that every module has a layer, and that every folder
of code is a package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.lint_imports import PACKAGE, add_lazy_imports, lazy_imports, mapped_folders
from tests.lint_imports import source_modules as package_modules
from tests.paths import ROOT


def lint_imports(config: Path = ROOT / "pyproject.toml") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.lint_imports", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contract_is_kept() -> None:
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken." in done.stdout
    assert "Module-level import circles: 0" in done.stdout
    # The view showed import-linter the whole package, not biasim/ alone.
    assert f"Analyzed {len(package_modules())} files" in done.stdout


#: Each is broken only by a chain of imports, a type-only import or a lazy_module string.
BREACHES = """
[tool.importlinter]
root_packages = ["biasim"]

[[tool.importlinter.contracts]]
name = "through a chain"
type = "forbidden"
source_modules = ["biasim.__main__"]
forbidden_modules = ["biasim.simulator.common"]

[[tool.importlinter.contracts]]
name = "type-only"
type = "forbidden"
source_modules = ["biasim.simulator.engine.batching"]
forbidden_modules = ["biasim.simulator.engine.calls"]

[[tool.importlinter.contracts]]
name = "lazy"
type = "forbidden"
source_modules = ["biasim.families.hiring_emails.acceptance"]
forbidden_modules = ["biasim.analysis.stats.disparity"]
"""


def test_a_breach_through_a_chain_a_type_hint_or_a_lazy_import_fails(tmp_path: Path) -> None:
    config = tmp_path / "contracts.toml"
    config.write_text(BREACHES, encoding="utf-8")
    done = lint_imports(config)
    assert done.returncode == 1, done.stdout + done.stderr
    for name in ("through a chain", "type-only", "lazy"):
        assert f"{name} BROKEN" in done.stdout
    assert "Contracts: 0 kept, 3 broken." in done.stdout
    # The lazy import is reported at its line.
    kind = ROOT / "families/hiring_emails/acceptance.py"
    source = kind.read_text(encoding="utf-8").splitlines()
    (line,) = [
        i + 1 for i, text in enumerate(source) if '"biasim.analysis.stats.disparity"' in text
    ]
    # (Words compared, not lines: the report wraps a long module path at 80 columns.)
    shown = " ".join(done.stdout.split())
    assert f"acceptance -> biasim.analysis.stats.disparity (l.{line})" in shown
    # Without the type-only imports the type-only breach is gone: they are what broke it.
    config.write_text(
        BREACHES.replace(
            "[tool.importlinter]", "[tool.importlinter]\nexclude_type_checking_imports = true"
        ),
        encoding="utf-8",
    )
    assert "type-only KEPT" in lint_imports(config).stdout


def test_a_lazy_import_of_no_module_or_by_a_computed_name_is_refused(tmp_path: Path) -> None:
    graph = grimp.ImportGraph()
    graph.add_module("biasim.x")
    missing = tmp_path / "x.py"
    missing.write_text('stats = lazy_module("biasim.nowhere")\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"names no module: biasim\.nowhere"):
        add_lazy_imports(graph, {"biasim.x": missing})
    computed = tmp_path / "y.py"
    computed.write_text('name = "biasim.x"\nstats = lazy_module(name)\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"y\.py:2: lazy_module takes the module's name"):
        list(lazy_imports({"biasim.y": computed}))


def test_every_lazy_import_of_the_package_is_read() -> None:
    found = {(src, dst) for src, dst, _, _ in lazy_imports(package_modules())}
    assert ("biasim.families.hiring_emails.acceptance", "biasim.analysis.stats.disparity") in found
    assert all(dst.startswith(PACKAGE + ".") for _, dst in found)


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    return [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]


def test_every_module_has_a_layer() -> None:
    """A new module is placed by the contract's layers, not by a catch-all. Above them stand
    the package's root (``biasim/__init__.py``, the public API loaded on first use) and the
    packages that hold layers (``biasim.simulator``), which import nothing."""
    layers = contract_layers()
    modules = package_modules()
    placeless = {
        name
        for name in modules
        if not any(name == top or name.startswith(top + ".") for top in layers)
    }
    holders = {name for name in placeless if any(top.startswith(name + ".") for top in layers)}
    assert placeless - holders == set()
    importing = [
        name
        for name in holders - {PACKAGE}
        if any(
            isinstance(node, ast.Import | ast.ImportFrom)
            for node in ast.walk(ast.parse(modules[name].read_text(encoding="utf-8")))
        )
    ]
    assert importing == []


def test_every_folder_of_code_is_a_package() -> None:
    """setup.py finds packages by their ``__init__.py``: a folder without one would be left out
    of the wheel (the CLI once failed from a wheel for this reason)."""
    folders = {
        p.parent for folder in (PACKAGE, *mapped_folders()) for p in (ROOT / folder).rglob("*.py")
    }
    assert (
        sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []
    )
