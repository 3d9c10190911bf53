"""No function of the project grows past :data:`LIMIT` lines of code.

A function's length is its lines from ``def`` (decorators excluded) to its last line, less its
docstring: the Args/Returns a public function documents are not what makes it hard to read.
Functions already over the limit are listed in :data:`ALLOWED` with the length they have now;
they may shrink but not grow, and an entry that is no longer needed must go, so the list only
gets shorter. Split a long function by extracting helpers with one purpose each.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tests.paths import ROOT

LIMIT = 80

#: The project's code: the installed folders and the benchmarks.
FOLDERS = ("biasim", "simulator", "analysis", "agents", "personas", "scenarios", "benchmarks")

#: "path::Qualified.name" -> its length now, for a function allowed over LIMIT for a while (each
#: entry says why). Empty: every function of the project is under the limit.
ALLOWED: dict[str, int] = {}


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's end, less its docstring."""
    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return lines


def _functions(tree: ast.AST, prefix: str = ""):
    """``(qualified name, node)`` of every function, methods and nested functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _lengths(root: Path) -> dict[str, int]:
    lengths: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for name, node in _functions(ast.parse(path.read_text(encoding="utf-8"))):
                lengths[f"{rel}::{name}"] = _code_lines(node)
    return lengths


def test_no_function_grows_past_the_limit():
    lengths = _lengths(ROOT)
    too_long = {key: n for key, n in lengths.items() if n > LIMIT and n > ALLOWED.get(key, LIMIT)}
    assert not too_long, (
        f"functions over {LIMIT} lines of code (or longer than their allowance); split them "
        f"into helpers: {too_long}"
    )


def test_allow_list_holds_only_functions_still_over_the_limit():
    lengths = _lengths(ROOT)
    stale = {key: lengths.get(key) for key in ALLOWED if lengths.get(key, 0) <= LIMIT}
    assert not stale, f"no longer over {LIMIT} lines (or gone): remove them from ALLOWED: {stale}"


def test_the_measure_counts_code_not_docstrings(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    doc = '    """' + "\n".join(["Doc."] * 30) + '"""'
    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "long.py").write_text(
        f"class K:\n    def over(self):\n{textwrap.indent(doc, '    ')}\n"
        f"{textwrap.indent(body, '    ')}\n\n"
        f"def under():\n{doc}\n    return 1\n",
        encoding="utf-8",
    )
    lengths = _lengths(tmp_path)
    assert lengths["simulator/long.py::K.over"] == LIMIT + 1  # the def line and 80 statements
    assert lengths["simulator/long.py::under"] == 2
