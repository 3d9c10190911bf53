"""A kind's check names the close name and the known ones for a misspelt stage, output field,
persona axis or design column (``StudyFacts``), as the registry does for a misspelt `kind:`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from biasim.simulator.cli import app
from tests.unit.study.test_design_features import base_study, write


def validate_errors(tmp_path: Path, analysis: dict[str, object]) -> str:
    data = base_study()
    data["personas"]["axes"]["region"] = ["north", "south"]
    data["analyses"] = [analysis]
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path / "s.yaml", data))])
    assert result.exit_code == 2, result.output
    return result.output


def test_a_misspelt_stage_names_the_close_one_and_the_known_ones(tmp_path: Path) -> None:
    dp = {"kind": "demographic_parity", "stage": "decid", "field": "decision", "target": "A"}
    out = validate_errors(tmp_path, {**dp, "by": "gender"})
    assert (
        "analyses[0].stage: no stage named `decid`; did you mean `decide`? (known: `decide`)" in out
    )


def test_a_misspelt_field_and_axis_name_the_close_one_and_the_known_ones(tmp_path: Path) -> None:
    dp = {"kind": "demographic_parity", "stage": "decide", "field": "decison", "target": "A"}
    out = validate_errors(tmp_path, {**dp, "by": "gendr"})
    assert "has no output field `decison`; did you mean `decision`? (known: `decision`)" in out
    assert (
        "`gendr` is not a persona axis; did you mean `gender`? (known: `gender`, `region`)" in out
    )


def test_a_name_close_to_none_lists_the_known_ones_only(tmp_path: Path) -> None:
    dp = {"kind": "demographic_parity", "stage": "decide", "field": "decision", "target": "A"}
    out = validate_errors(tmp_path, {**dp, "by": "colour"})
    assert "`colour` is not a persona axis (known: `gender`, `region`)" in out
