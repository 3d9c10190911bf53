"""One analysis whose computation raises loses only itself: the study's other analyses are
computed and written as usual, summary.json (valid against its schema) and the manifest record
which one failed and why, and `run`, `analyze run` and `compare` exit 1. A run whose recorded
study no longer loads is named by its own manifest, each run once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import jsonschema
import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.kinds import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    register_kind,
    unregister_kind,
)
from biasim.simulator.report.schema import summary_schema
from tests.conftest import write_study

TAIL = "  - kind: flaky\n    name: shaky\n"
#: The error's first line: what summary.json, the manifest and the console say.
SAID = "shaky (flaky): ValueError: no answer to rate"


class FlakySpec(AnalysisSpec):
    kind: Literal["flaky"] = "flaky"


class FlakyKind(AnalysisKind, spec=FlakySpec):
    """Raises while ``broken``, as a kind whose codebook or statistic is wrong; then counts."""

    title = "Flaky"
    broken = True

    def compute(self, results: pd.DataFrame, spec: FlakySpec, ctx: AnalysisContext) -> Section:
        if self.broken:
            raise ValueError("no answer to rate\nthe rest of a long message")
        return Section(summary={"rows": len(results)})


@pytest.fixture
def flaky():
    register_kind(FlakyKind)
    yield
    unregister_kind("flaky")


def _study(tmp_path: Path) -> Path:
    study = write_study(tmp_path / "s.yaml", agents=6)
    study.write_text(study.read_text() + TAIL)
    return study


def _summary(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    jsonschema.Draft202012Validator(summary_schema()).validate(summary)
    return summary


def _kept_beside_the_failure(folder: Path) -> dict:
    """The folder's summary: demographic parity's entry and tables there, the toy recorded."""
    summary = _summary(folder)
    [parity] = summary["analyses"]
    assert parity["kind"] == "demographic_parity"
    tables = [p.name for p in (folder / "tables").iterdir()]
    assert tables and all(name.startswith(f"{parity['name']}_") for name in tables)
    assert all(f"tables/{name}" in summary["outputs"] for name in tables)
    error = "ValueError: no answer to rate"
    assert summary["failed_analyses"] == [{"kind": "flaky", "name": "shaky", "error": error}]
    return summary


def test_a_failing_analysis_keeps_the_others_and_is_recorded(flaky, tmp_path, cli, monkeypatch):
    study, out, twin = _study(tmp_path), tmp_path / "run", tmp_path / "twin"
    ran = cli.invoke(app, ["run", str(study), "--out", str(out)])
    redone = cli.invoke(app, ["analyze", "run", str(out)])
    shutil.copytree(out, twin)
    labels = ["--label", f"a={out}", "--label", f"b={twin}"]
    target = tmp_path / "compared"
    compared = cli.invoke(app, ["compare", str(out), str(twin), *labels, "--out", str(target)])
    for result in (ran, redone, compared):
        assert result.exit_code == 1, result.output
        assert f"analysis failed: {SAID}" in " ".join(result.stderr.split())
        assert "Traceback" not in result.output + result.stderr
        assert "the rest of a long message" not in result.stderr  # the first line only
    # The run: its status is the calls' (all answered), its message and manifest say the rest.
    summary = _kept_beside_the_failure(out)
    assert summary["status"] == "complete"
    assert summary["message"] == f"analysis failed: {SAID}"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["analysis_failed"] == SAID
    page = (out / "report.html").read_text()
    # Said at the top, where the reader starts, before any section.
    assert '<p class="banner">An analysis failed: shaky (flaky)' in page
    assert page.index("An analysis failed") < page.index("<h2>")
    _kept_beside_the_failure(target)
    # Fixed, the analysis is redone: no failure is left recorded anywhere.
    monkeypatch.setattr(FlakyKind, "broken", False)
    fixed = cli.invoke(app, ["analyze", "run", str(out)])
    assert fixed.exit_code == 0, fixed.output
    summary = _summary(out)
    assert [a["kind"] for a in summary["analyses"]] == ["demographic_parity", "flaky"]
    assert "failed_analyses" not in summary and summary["message"] == ""
    assert "analysis_failed" not in json.loads((out / "manifest.json").read_text())


def test_compare_names_each_run_whose_recorded_study_names_an_unknown_kind(
    tmp_path, cli, monkeypatch
):
    study, out, twin = _study(tmp_path), tmp_path / "run", tmp_path / "twin"
    monkeypatch.setattr(FlakyKind, "broken", False)
    register_kind(FlakyKind)
    try:
        assert cli.invoke(app, ["run", str(study), "--out", str(out)]).exit_code == 0
    finally:
        unregister_kind("flaky")  # as a plug-in uninstalled since the runs
    shutil.copytree(out, twin)
    target = tmp_path / "compared"
    compared = cli.invoke(app, ["compare", str(out), str(twin), "--out", str(target)])
    redone = cli.invoke(app, ["analyze", "run", str(out)])
    # The line of the kind in the manifest, where the run's study is recorded.
    lines = (out / "manifest.json").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if '"kind": "flaky"' in text)
    unknown = "analyses[1].kind: unknown analysis kind `flaky`"
    for result, runs in ((compared, (out, twin)), (redone, (out,))):
        assert result.exit_code == 2, result.output
        said = " ".join(result.stderr.split())
        for run in runs:
            assert said.count(f"error {run}/manifest.json:{line}: {unknown}") == 1, said
        assert said.count("error ") == len(runs)
    assert not target.exists()
