"""Every built-in study's console report fits a default terminal and a wide one: tables as
grids (wrapped, abbreviated or split into column groups), never a ``- key: value`` block per
row, no internal (``_``) column, no line wider than the console, no ``{field}`` of a codebook
left unfilled."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from biasim.simulator.report.outputs import print_report
from tests.builtin_runs import STUDIES, BuiltinRuns

BLOCK = re.compile(r"^\s*- \w+:")
#: A codebook's ``{field}`` that neither its group nor ``named()`` filled.
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")
RULE = re.compile(r"^[\s─━┡┩╇]+$")


def _headers(text: str) -> list[str]:
    """The header lines of every table printed: boxed (between ┃) or compact (above a rule)."""
    lines = text.splitlines()
    boxed = [line for line in lines if "┃" in line]
    compact = [
        lines[i - 1] for i, line in enumerate(lines) if i and "─" in line and RULE.match(line)
    ]
    return boxed + compact


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES, scope="session")
def test_console_report_fits_80_and_200_columns(name: str, builtin_runs: BuiltinRuns) -> None:
    summary = json.loads((builtin_runs(name) / "summary.json").read_text(encoding="utf-8"))
    for width in (80, 200):
        buffer = io.StringIO()
        print_report(summary, Console(file=buffer, width=width, color_system=None, markup=False))
        text = buffer.getvalue()
        lines = text.splitlines()
        assert not [line for line in lines if BLOCK.match(line)], (name, width, text)
        assert max(map(len, lines)) <= width, (name, width)
        assert not PLACEHOLDER.search(text), (name, width, PLACEHOLDER.findall(text))
        headers = _headers(text)
        assert headers, (name, width)  # every report prints at least one table
        for header in headers:
            assert not re.search(r"(^|[\s┃│])_\w", header), (name, width, header)
