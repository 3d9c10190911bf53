"""`biasim compare` over eight synthetic models, two of which discriminate: the report grades
those two (and only those) and draws the graded figure. Slow: eight runs and their analysis."""

from __future__ import annotations

import json

import pytest

from biasim.simulator.cli import app
from tests.e2e.test_compare import BIASED, FAIR, _run

pytestmark = pytest.mark.slow


def test_compare_of_eight_models_grades_the_two_that_discriminate(tmp_path, cli) -> None:
    biased = {2, 5}
    paths = [_run(tmp_path, f"m{i}", BIASED if i in biased else FAIR, agents=30) for i in range(8)]
    out = tmp_path / "compared"
    labels = [f"--label=m{i}={p}" for i, p in enumerate(paths)]
    result = cli.invoke(app, ["compare", *map(str, paths), *labels, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    (analysis,) = [a for a in summary["analyses"] if a.get("model_grades")]
    graded = {r["model_label"] for r in analysis["model_grades"] if r["grade"] == "discriminates"}
    assert graded == {"m2", "m5"}
    assert "Models graded by their disparity" in (out / "report.html").read_text()
    assert any("model_grades" in p.name for p in (out / "figures").glob("*.png"))
