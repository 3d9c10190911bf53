"""What a reviewer reads in report.html without opening a CSV, checked in headless Chromium on
two built-in studies: the prompts sent per stage, sample answers per group, every role that
made calls, every figure in figures/ and every table in tables/."""

from __future__ import annotations

import base64
import json

import pytest

from biasim.simulator.cli import app
from tests.browser import open_report

pytestmark = pytest.mark.browser


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    "study",
    ["emergency_response", pytest.param("wan2023_letters", marks=pytest.mark.slow)],
)
def test_report_shows_prompts_answers_roles_figures_and_tables(study, tmp_path, cli) -> None:
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", study, "--backend", "synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = open_report(out / "report.html", tmp_path / "report.png")
    assert page.console_errors == [] and page.requests == [] and page.failed_images == []
    shown = _words(page.text)
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())

    # The first text of every template, as `validate --show-prompts` renders it.
    assert manifest["prompts"]
    for field in {p["field"] for p in manifest["prompts"]}:
        first = next(p for p in manifest["prompts"] if p["field"] == field)
        assert _words(first["text"]) in shown, field
    # Sample answers: some for each group of the first axis, each shown (escaped, cut).
    samples = summary["samples"]
    assert {s["group"] for s in samples} == set(
        manifest["study"]["personas"]["axes"][samples[0]["axis"]]
    )
    for sample in samples:
        assert _words(sample["answer"]) in shown
    # Every role with calls, named in the models table.
    for row in summary["accounting"]["by_role"]:
        assert row["calls"] > 0 and row["role"] in shown
    # Every figure written is embedded, byte for byte, and every table is listed.
    html = (out / "report.html").read_text()
    figures = sorted((out / "figures").glob("*.png"))
    assert figures
    for png in figures:
        assert f"({png.name})" in shown
        assert base64.b64encode(png.read_bytes()).decode() in html
    for table in sorted((out / "tables").glob("*.csv")):
        assert f"tables/{table.name}" in shown
