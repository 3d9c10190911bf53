"""report.html in a real headless Chromium: it renders offline with no console error and no
request, shows every figure, and every number it shows equals summary.json. The screenshots are
looked at: a rendered page is tall, wide and not blank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.browser import assert_numbers_match, open_report
from tests.e2e.test_compare import BIASED, FAIR, STUDY
from tests.golden_studies import STUDIES

pytestmark = pytest.mark.browser


def _run(tmp_path: Path, name: str, text: str, **options) -> Path:
    study = tmp_path / f"{name}.yaml"
    study.write_text(text)
    out = tmp_path / name
    execute(prepare(RunOptions(study=str(study), out=out, **options)))
    return out


def _check(out: Path, screenshot: Path) -> tuple[str, int]:
    page = open_report(out / "report.html", screenshot)
    assert page.console_errors == []
    assert page.requests == []  # self-contained: nothing fetched, not even a font
    assert page.failed_images == []
    summary = json.loads((out / "summary.json").read_text())
    checked = assert_numbers_match(page, summary)
    image = imread(screenshot)
    height, width = image.shape[:2]
    assert width >= 800 and height >= 1000
    assert float(np.std(image[..., :3])) > 0.05  # not a blank page
    return page.text, checked


def test_report_of_a_two_model_seed_004_run(tmp_path) -> None:
    from biasim.scenarios import builtin_path

    text = STUDY.format(
        base=builtin_path("li2025_decisions"), models=f"{FAIR}, {BIASED}", agents=10
    )
    out = _run(tmp_path, "both", text)
    shown, checked = _check(out, tmp_path / "both.png")
    assert checked > 100
    for heading in (
        "Models and parameters",
        "Decision rates and demographic parity: decisions",
        "Differences between models per case",
        "Implicit bias per case across models (Li, Shirado & Das 2025, Fig. 12)",
        "Answer outcomes by group",
        "Limits",
        "SYNTHETIC RESPONDER",
    ):
        assert heading in shown
    assert "li2025_decisions" not in shown.split("Limits")[0][:40]  # title is the study's own
    assert "Li, Shirado & Das 2025" in shown  # the source
    assert "Small samples: the smallest group has 10 valid answers" in shown


def test_report_of_a_hiring_judge_run_with_its_audit(tmp_path, cli) -> None:
    text, options = STUDIES["hiring_judge_small"]
    out = _run(tmp_path, "judge", text, **options)
    audited = cli.invoke(app, ["audit", str(out), "--format", "ll144"])
    assert audited.exit_code == 0, audited.output
    shown, checked = _check(out, tmp_path / "judge.png")
    assert "Bias audit (NYC Local Law 144)" in shown
    assert "Intersectional categories (sex x race/ethnicity)" in shown
    assert checked > 50
    assert "LLM judge vs the rule classifier" in shown
    assert re.search(r"Impact ratios \(.*\): rate / highest rate", shown)
    assert "Small samples" not in shown  # 164 emails per group


def test_report_of_a_pipeline_run(tmp_path) -> None:
    import yaml

    from tests import pipeline_studies

    data = pipeline_studies.study()
    data["design"]["agents_per_value"] = 16
    data["stages"].append(pipeline_studies.COUNTERFACTUAL_STAGE)
    data["analyses"][0]["stages"] = ["screen", "offer", "rate"]
    out = _run(tmp_path, "pipeline", yaml.safe_dump(data, sort_keys=False))
    shown, checked = _check(out, tmp_path / "pipeline.png")
    assert checked > 80
    for heading in (
        "selection by stage and race",
        "end-to-end impact ratio by race, decomposed",
        "is the first document shown picked more than chance?",
        "picked when shown at screen, by gender, against chance",
        "counterfactual readings at rate",
    ):
        assert heading in shown, heading
    # The decision studies' small-sample line, for the screen's pools (counted from results).
    import pandas as pd

    results = pd.read_parquet(out / "results.parquet")
    pools = results.loc[results["stage"] == "screen", "cluster"].nunique()
    name = data["analyses"][0]["name"]
    assert pools < 30
    assert f"Small samples: the tables of `{name}` rest on {pools} first-stage pools" in shown


def test_report_of_the_declared_result_kinds(tmp_path) -> None:
    """picks and association render from their declared tables (issue 45): every number the
    page shows is summary.json's, and the tables carry their declared titles and notes."""
    from tests.builtin_runs import run_builtin

    out = run_builtin("bias_transmission_supplemental", tmp_path / "supplemental")
    shown, checked = _check(out, tmp_path / "supplemental.png")
    assert checked > 100
    for heading in (
        "by category (Table 4)",
        "items by status",
        "calls by outcome",
        "valid answers by first_named",
        "not shown (kept in the CSV tables): every call named the target in one position",
        "each item tested at alpha 0.05, adjusted: none",
    ):
        assert heading in shown
