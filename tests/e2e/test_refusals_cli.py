"""`biasim analyze --decisions` on a file whose refusals replace one group's rejections: a
validity table by group, the exclusion bounds, and no unqualified claim."""

from __future__ import annotations

import pandas as pd

from biasim.simulator.cli import app
from tests.unit.analysis.test_refusals import mnar_decisions


def test_cli_prints_validity_and_qualifies_claims_when_refusals_replace_rejections(
    tmp_path, cli
) -> None:
    path = tmp_path / "d.csv"
    mnar_decisions().to_csv(path, index=False)
    out = tmp_path / "tables"
    args = ["analyze", "--decisions", str(path), "--group-cols", "group", "--outcome-col"]
    result = cli.invoke(
        app,
        [
            *args,
            "decision",
            "--invalid",
            "refused",
            "--unit-col",
            "name",
            "--permutations",
            "400",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "unit: name, 120 units" in text
    assert "the bounds include parity, so the disparity may come from who is excluded" in text
    # The naive reading flags A (impact ratio ~0.74) and calls B favoured; both are qualified.
    assert "A: impact ratio 0.7" in text
    assert "the four-fifths flag may come from who is excluded" in text
    assert (
        "B: `accept` more often than the population among valid answers; the bounds "
        "include parity" in text
    )
    validity = pd.read_csv(out / "validity.csv").set_index("group")
    assert validity.loc["A", "validity_rate"] == 1.0 and validity.loc["B", "validity_rate"] < 0.8
    bounds = pd.read_csv(out / "group_bounds.csv").set_index("group")
    assert not bounds.loc["A", "flag_holds"] and not bounds.loc["B", "direction_holds"]
