"""Every p-value written into text goes through one formatter: a p below 0.001 reads
``< 0.001``, never ``0.000``; the built-in studies' console and page print no ``p 0.000``."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.common.html import format_p
from biasim.simulator.kinds.sections.exclusions import EXCLUSIONS
from biasim.simulator.kinds.sections.prism_baseline import reading

ZERO_P = re.compile(r"\bp (= )?0\.000\b")


def test_format_p_reads_small_values_as_below_a_thousandth() -> None:
    assert format_p(0.00001) == "< 0.001"
    assert format_p(0.0123) == "= 0.012"
    assert format_p(float("nan")) == "= -" and format_p(None) == "= -"


def test_the_exclusion_bounds_table_and_a_baseline_reading_print_small_p_as_such() -> None:
    row = {"case": "a", "n_excluded": 3, "validity_gap": 0.2, "validity_p_value": 0.5}
    row |= {"bounds_include_parity": False, "test": "permutation"}
    for scenario in ("valid_only", "excluded_as_negative", "excluded_as_positive"):
        row |= {f"dpd_{scenario}": 0.4, f"p_{scenario}": 0.00001}
    out = io.StringIO()
    EXCLUSIONS.print(Console(file=out, width=200), [row], "dp")
    printed = out.getvalue()
    # The three DPDs' p-values, each in its own column.
    (line,) = [ln for ln in printed.splitlines() if ln.startswith("│ a ")]
    assert line.count("< 0.001") == 3 and "0.000" not in line and not ZERO_P.search(printed)
    said = reading(
        {"side": "a", "dimension": "d", "observed": 0.5, "baseline": 0.1, "low": 0.0}
        | {"high": 0.2, "verdict": "masculine", "p": 0.00001}
    )
    assert said.endswith("(p < 0.001)")


@pytest.mark.parametrize("study", ["emergency_response", "an2024_hiring_gpt35"])
def test_no_builtin_output_prints_p_zero(study: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", study, "--backend", "synthetic", "--agents", "2", "--out", str(out)]
    ran = CliRunner().invoke(app, args)
    assert ran.exit_code == 0, ran.output
    page = re.sub(r"<[^>]+>", " ", (out / "report.html").read_text())
    for shown in (ran.stdout, page):
        assert not ZERO_P.search(" ".join(shown.split()))


def test_audit_cells_print_a_tiny_p_as_below_a_thousandth() -> None:
    """The audit's console cells: a preset's p column (spec ``p``) and a p column it gives no
    spec (the score tables' Mann-Whitney p) both read ``< 0.001``, not ``1.85e-07`` or ``0.000``."""
    from biasim.analysis.audit.presets import EEOC
    from biasim.simulator.cli.tool_commands import _cell

    specs = {c[0]: c[2] for c in EEOC.columns}
    assert _cell(1.85e-07, specs["fisher_p"], "fisher_p") == "< 0.001"
    assert _cell(1.85e-07, None, "mann_whitney_p") == "< 0.001"
    assert _cell(0.7271, None, "mann_whitney_p") == "0.727"
    assert _cell(0.5, None, "impact_ratio") == "0.500"
