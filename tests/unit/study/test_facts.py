"""A kind's check names the close name and the known ones for a misspelt stage, output field,
persona axis or design column (``StudyFacts``), as the registry does for a misspelt `kind:`."""

from __future__ import annotations

from pathlib import Path

import pytest
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


DP = {"kind": "demographic_parity", "stage": "decide", "field": "decision", "target": "A"}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"stage": "decid"},
            ["analyses[0].stage: no stage named `decid`; did you mean `decide`? (known: `decide`)"],
        ),
        (
            {"field": "decison", "by": "gendr"},
            [
                "has no output field `decison`; did you mean `decision`? (known: `decision`)",
                "`gendr` is not a persona axis; did you mean `gender`? (known: `gender`, `region`)",
            ],
        ),
        # Nothing close: the known ones only.
        ({"by": "colour"}, ["`colour` is not a persona axis (known: `gender`, `region`)"]),
    ],
)
def test_a_misspelt_name_names_the_close_one_and_the_known_ones(
    tmp_path: Path, change: dict[str, str], said: list[str]
) -> None:
    out = " ".join(validate_errors(tmp_path, {**DP, "by": "gender", **change}).split())
    for line in said:
        assert line in out
