"""What a user should not have to spell out: `audit` takes a column named `selected` (and
`sex`/`race`) and says which columns it used; `compare` of two runs of one model labels them by
their run directories and prints each label beside its own model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.conftest import write_study
from tests.e2e.test_audit import _decisions


def test_audit_finds_the_selected_sex_and_race_columns_and_says_so(tmp_path, cli) -> None:
    path = tmp_path / "decisions.csv"
    _decisions().rename(columns={"hired": "selected"}).to_csv(path, index=False)
    out = tmp_path / "audit"
    result = cli.invoke(app, ["audit", str(path), "--format", "ll144", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "columns used: outcome = selected, sex = sex, race_ethnicity = race" in result.stdout
    race = pd.read_csv(out / "ll144_race_ethnicity.csv").set_index("race")
    assert race.loc["White", "selection_rate"] == pytest.approx(0.7)


def test_audit_without_an_outcome_column_still_asks_for_one(tmp_path, cli) -> None:
    path = tmp_path / "decisions.csv"
    _decisions().to_csv(path, index=False)  # `hired`, not an obvious name
    result = cli.invoke(
        app, ["audit", str(path), "--format", "ll144", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 2 and "give exactly one of --selected-col" in result.stderr


def test_compare_labels_two_runs_of_one_model_by_their_directories(tmp_path, cli) -> None:
    study = write_study(tmp_path / "s.yaml", agents=4)
    runs = []
    for name in ("monday", "tuesday"):
        execute(prepare(RunOptions(study=str(study), out=tmp_path / name)))
        runs.append(str(tmp_path / name))
    out = tmp_path / "cmp"
    result = cli.invoke(app, ["compare", *runs, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_labels"] == ["monday", "tuesday"]
    assert "as monday = synthetic:synthetic-responder, tuesday = synthetic:synthetic-responder" in (
        " ".join(result.stdout.split())
    )
    # A label given on the command line leaves no collision: the other run keeps its model's.
    named = cli.invoke(
        app, ["compare", *runs, "--label", f"first={runs[0]}", "--out", str(tmp_path / "cmp2")]
    )
    assert named.exit_code == 0, named.output
    labels = json.loads((tmp_path / "cmp2" / "summary.json").read_text())["model_labels"]
    assert labels == ["first", "synthetic:synthetic-responder"]
