"""What the CLI prints is whole: no number cut at a narrow width, and where everything went."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.cli import common as cli_common
from biasim.simulator.common.tables import print_table
from biasim.simulator.engine.runner import RunOptions, execute, load_run, prepare, study_folder
from biasim.simulator.report.outputs import analyze, print_report
from tests.conftest import write_study
from tests.golden_studies import GOLDEN_DIR, STUDIES

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?%?")


def _printed(summary: dict[str, Any], width: int) -> str:
    buffer = io.StringIO()
    print_report(summary, Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue()


def _builtin_summaries(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """A report of every kind of built-in study: the recorded small runs of the seed studies
    (their recorded analyses), and small live runs of the others on the synthetic responder."""
    summaries = {}
    for name in STUDIES:
        run = tmp_path / "golden" / name
        run.mkdir(parents=True)
        for file in ("results.parquet", "manifest.json"):
            shutil.copy(GOLDEN_DIR / name / file, run / file)
        # The recorded inputs keep no results.csv nor digests: read as they are. The analyses
        # are this version's (the recorded analyses.json is an older version's summary).
        study, results = load_run(run, accept_edits=True)
        summaries[name] = analyze(results, study.config, data_dir=study_folder(study)).summary
    for name, agents in (("emergency_response", 4), ("hiring_pipeline", 2)):
        options = RunOptions(study=name, backend="synthetic", agents=agents, out=tmp_path / name)
        summaries[name] = execute(prepare(options)).summary
    return summaries


def test_a_summary_an_older_biasim_wrote_prints_what_it_is(tmp_path: Path) -> None:
    """A run's analysis whose summary lacks a field the kind now reads (an older version wrote
    it) prints the line the page shows, naming the field and the command, not a traceback."""
    recorded = json.loads((GOLDEN_DIR / "li2025_small" / "analyses.json").read_text())
    summary = _builtin_summaries(tmp_path)["li2025_small"]
    missing = next(k for k in summary["analyses"][0] if k not in recorded[0])
    del summary["analyses"][0][missing]
    text = " ".join(_printed(summary, 100).split())
    assert f"written by an older version of biasim (it has no '{missing}')" in text
    assert "biasim analyze run RUN_DIR" in text


def test_no_table_cuts_a_number_at_60_columns(tmp_path: Path) -> None:
    for name, summary in _builtin_summaries(tmp_path).items():
        narrow, wide = _printed(summary, 60), _printed(summary, 400)
        assert "…" not in narrow, (name, narrow)
        assert max(len(line) for line in narrow.splitlines()) <= 60, name
        # The numbers of the wide report, whole (the long layout repeats headers such as
        # "95% CI", so as a set): none cut, none folded in two. A note naming the rows left
        # out names as many as the width fits, "and N more": N is the width's, not a result.
        narrow, wide = (re.sub(r"and\s+\d+\s+more\b", "", text) for text in (narrow, wide))
        assert set(NUMBER.findall(narrow)) == set(NUMBER.findall(wide)), name


def test_table_wraps_text_but_never_splits_a_number() -> None:
    table = Table(title="t")
    for col in ("group", "note", "p"):
        table.add_column(col, justify="right")
    table.add_row("non-binary", "a long explanation that can wrap over lines", "0.0123456")
    buffer = io.StringIO()
    print_table(table=table, console=Console(file=buffer, width=40, color_system=None))
    text = buffer.getvalue()
    assert "0.0123456" in text and "non-binary" in text and "…" not in text
    assert text.count("\n") > 5  # a grid, the note wrapped
    assert "┃" in text or "│" in text


def test_run_ends_with_where_everything_was_written(tmp_path: Path) -> None:
    study = write_study(tmp_path / "study.yaml", agents=4)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    tables = sorted((out / "tables").glob("*.csv"))
    figures = sorted((out / "figures").glob("*.png"))
    assert tables and figures
    assert f"tables:  {out / 'tables'}  ({len(tables)} CSV)" in lines
    assert f"figures: {out / 'figures'}  ({len(figures)} PNG)" in lines
    assert f"report:  {out / 'report.html'}" in lines and (out / "report.html").is_file()
    assert f"summary: {out / 'summary.json'}" in lines


@pytest.mark.parametrize("command", [["list"], ["kinds"]])
def test_listing_tables_stay_whole_at_60_columns(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI's console reads COLUMNS once, at import: set its width as a 60-column terminal.
    monkeypatch.setattr(cli_common.out_console, "width", 60)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 60
