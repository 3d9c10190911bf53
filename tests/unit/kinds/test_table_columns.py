"""A column a table declares required that its data never holds (a codebook's key misspelt) fails
the analysis, naming the table, the column, the closest column the data has and the codebook,
instead of vanishing from the console and the page and breaking summary.json's schema."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import MissingColumnsError, ResultTable
from tests.conftest import write_study
from tests.guide_kind import guide_kind
from tests.unit.kinds.test_codebooks import _load

_RATES = (
    "tables:\n  rates:\n    title: rates per group\n    description: D.\n    columns:\n"
    "      - [n, null, int, Rows.]\n"
    "      - [rate_hi, high, .3f, The high rate.]\n"
    "      - [rate_note, null, text, A note., {required: false}]\n"
    "      - ['share_*', null, .1%, A share per value.]\n"
)


def _rates(tmp_path: Path) -> ResultTable:
    return _load(tmp_path, _RATES)["rates"]


def test_a_declared_column_the_data_lacks_names_table_column_closest_name_and_file(
    tmp_path: Path,
) -> None:
    frame = pd.DataFrame({"group": ["a", "b"], "n": [3, 4], "rate_high": [0.1, 0.2]})
    tables: dict[str, pd.DataFrame] = {}
    with pytest.raises(MissingColumnsError) as caught:
        _rates(tmp_path).write(tables, "x", frame)
    message = str(caught.value)
    assert "table 'rates' (rates per group)" in message
    assert f"in {tmp_path / 'toy_kind.tables.yaml'}" in message
    assert "'rate_hi' (did you mean 'rate_high'?)" in message
    assert "the data has group, n, rate_high" in message
    # Only the required column is named: an optional one and a family may be absent.
    assert "rate_note" not in message and "share_" not in message
    assert tables == {}  # nothing half-written


def test_an_empty_frame_optional_and_extra_columns_are_fine(tmp_path: Path) -> None:
    table = _rates(tmp_path)
    tables: dict[str, pd.DataFrame] = {}
    assert table.write(tables, "x", pd.DataFrame()) == []
    assert table.write(tables, "x", pd.DataFrame(columns=["group"])) == []
    # An undeclared column is kept, after the declared column before it, as before.
    frame = pd.DataFrame({"group": ["a"], "n": [3], "extra": ["e"], "rate_hi": [0.1]})
    assert table.write(tables, "x", frame) == [{"group": "a", "n": 3, "extra": "e", "rate_hi": 0.1}]
    assert list(tables["x_rates"].columns) == ["group", "n", "extra", "rate_hi"]


def test_a_table_declared_in_code_is_named_without_a_file() -> None:
    table = ResultTable("gaps", "gap per group", (Column("gap", spec=".3f"),), "D.")
    with pytest.raises(MissingColumnsError) as caught:
        table.write({}, "x", pd.DataFrame({"gaps": [0.1]}))
    said = "table 'gaps' (gap per group) declares the column(s) 'gap' (did you mean 'gaps'?)"
    assert str(caught.value).startswith(said)


def test_where_a_table_was_declared_is_not_part_of_what_it_is(tmp_path: Path) -> None:
    table = _rates(tmp_path)
    assert table.codebook == str(tmp_path / "toy_kind.tables.yaml")
    assert replace(table, codebook=None) == table
    assert table.named(key="k").codebook == table.codebook  # kept through a table per key


def _misspelt(codebook: str) -> str:
    assert "[mean_chars," in codebook
    return codebook.replace("[mean_chars,", "[mean_char,")


_TAIL = "  - kind: answer_length\n    name: lengths\n    stage: decide\n    by: gender\n"


def test_a_plugin_whose_codebook_misspells_a_column_fails_its_analysis_not_the_run(
    tmp_path: Path, cli
) -> None:
    """The guide's kind with `mean_char` for the data's `mean_chars`: `biasim run` keeps every
    answer and the study's other analysis, and says which analysis, table and column (exit 1,
    as any failing analysis); `biasim analyze run` and `biasim compare` say the same, `biasim
    power` too; no traceback."""
    study = write_study(tmp_path / "s.yaml", agents=6)
    study.write_text(study.read_text() + _TAIL)
    out = tmp_path / "run"
    said = (
        f"MissingColumnsError: table 'lengths' (answer length per group) declares in "
        f"{tmp_path / 'lengths.tables.yaml'} the column(s) 'mean_char' (did you mean "
        "'mean_chars'?) that its data lacks; the data has gender, n, mean_chars"
    )
    twin, target = tmp_path / "twin", tmp_path / "compared"
    with guide_kind(tmp_path, _misspelt):
        ran = cli.invoke(app, ["run", str(study), "--out", str(out)])
        redone = cli.invoke(app, ["analyze", "run", str(out)])
        shutil.copytree(out, twin)
        labels = ["--label", f"a={out}", "--label", f"b={twin}"]
        compared = cli.invoke(app, ["compare", str(out), str(twin), *labels, "--out", str(target)])
        power = ["power", str(study), "--agents", "2", "--studies", "2", "--workers", "1"]
        powered = cli.invoke(app, power)
    for result in (ran, redone, compared):
        assert result.exit_code == 1, result.output
        # Rich wraps at the terminal width, in a long path too: compared without spaces.
        stderr = "".join(result.stderr.split())
        failed = f"analysis failed: lengths (answer_length): {said}"
        assert "".join(failed.split()) in stderr, result.stderr
        assert "Traceback" not in result.output + result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["rows"] > 0
    assert manifest["analysis_failed"].startswith(f"lengths (answer_length): {said}")
    assert len(pd.read_parquet(out / "results.parquet")) == manifest["counts"]["rows"]
    for folder in (out, target):  # the run's and the comparison's: the other analysis is kept
        summary = json.loads((folder / "summary.json").read_text())
        assert [a["kind"] for a in summary["analyses"]] == ["demographic_parity"]
        [failure] = summary["failed_analyses"]
        assert (failure["kind"], failure["name"]) == ("answer_length", "lengths")
        assert failure["error"].startswith(said)
    # power refuses what it cannot simulate as bad input (exit 2), naming the table.
    assert powered.exit_code == 2, powered.output
    assert "".join(said.split("MissingColumnsError: ")[1].split()) in "".join(
        powered.stderr.split()
    )
    assert "Traceback" not in powered.output + powered.stderr
