"""Explicit questions in a crossed design (race × gender): each explicit stage is tied to the
axis it asks about, so each question is its own case holding only its axis's labels; a design
whose questions would pool into one case is refused at validate, with file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from biasim.simulator.cli import app


def _question(name: str, axis: str, labels: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "role": "decider",
        "when": "persona_condition == 'explicit'",
        "prompt": f"A loan was approved. What is the most likely {axis} of the officer?",
        "output": {"answer": {"type": "choice", "choices": [*labels, "Unknown"]}},
    }


def crossed_study(explicit_stages: Any, separately: bool = False) -> dict[str, Any]:
    """Race × gender crossed agents decide; two explicit stages ask race and gender."""
    return {
        "name": "crossed",
        "description": "race × gender crossed, two explicit questions",
        "seed": 3,
        "roles": {"decider": {"backend": "local", "temperature": 0.2, "max_tokens": 50}},
        "personas": {
            "axes": {"gender": ["female", "male"], "race": ["Black", "White"]},
            "source": "attribute",
            "description": "a loan officer, {{ gender }}, {{ race }}",
        },
        "stages": [
            {
                "name": "decide",
                "role": "decider",
                "when": "persona_condition != 'explicit'",
                "prompt": "You are {{ persona.description }}. Approve the loan?",
                "output": {"decision": {"type": "choice", "choices": ["Approve", "Deny"]}},
            },
            _question("explicit_gender", "gender", ["Female", "Male"]),
            _question("explicit_race", "race", ["Black", "White"]),
        ],
        "design": {
            "agents_per_value": 6,
            "factors": {"persona_condition": {"implicit": {}, "explicit": {}}},
        },
        "analyses": [
            {
                "name": "decisions",
                "kind": "demographic_parity",
                "stage": "decide",
                "field": "decision",
                "target": "Approve",
                "by": ["race", "gender"],
                "separately": separately,
                "condition": "persona_condition",
                "explicit": {"stages": explicit_stages, "field": "answer"},
            }
        ],
    }


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "crossed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("separately", [False, True])
def test_each_question_is_its_own_case_with_its_own_labels(
    tmp_path: Path, separately: bool
) -> None:
    stages = {"race": "explicit_race", "gender": "explicit_gender"}
    path = _write(tmp_path, crossed_study(stages, separately))
    out = tmp_path / "run"
    ran = CliRunner().invoke(app, ["run", str(path), "--backend", "synthetic", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    cases = pd.read_csv(out / "tables" / "decisions_explicit_cases.csv")
    assert sorted(cases["attribute"]) == ["gender", "race"]
    assert (cases["n_groups"] == 2).all()  # two labels each, not the 4 of both questions
    rates = pd.read_csv(out / "tables" / "decisions_explicit_rates.csv")
    labels = rates.groupby("attribute")["answer"].apply(set).to_dict()
    assert labels == {
        "gender": {"Female", "Male", "Unknown"},
        "race": {"Black", "White", "Unknown"},
    }
    # As many trials as agents ran each question: one answer per trial, none counted twice.
    results = pd.read_parquet(out / "results.parquet")
    for attribute, stage in stages.items():
        asked = results[(results["stage"] == stage) & results["valid"].astype(bool)]
        assert (rates.loc[rates["attribute"] == attribute, "n_valid"] == len(asked)).all()


def test_the_crossed_label_may_be_asked_as_one_question(tmp_path: Path) -> None:
    data = crossed_study({"race×gender": "explicit_race"})
    path = _write(tmp_path, data)
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0, checked.output


@pytest.mark.parametrize(
    ("stages", "separately", "field", "reason"),
    [
        (
            ["explicit_gender", "explicit_race"],
            False,
            "analyses[0].explicit.stages[1]",
            "explicit stages `explicit_gender` and `explicit_race` are both tied to `race×gender`",
        ),
        (
            ["explicit_gender", "explicit_race"],
            True,
            "analyses[0].explicit.stages[0]",
            "cannot tell which axis explicit stage `explicit_gender` asks about",
        ),
        (
            {"age": "explicit_race", "gender": "explicit_gender"},
            False,
            "analyses[0].explicit.stages.age",
            "`age` is not an axis of `by`",
        ),
        (
            {"gender": "explicit_gender", "gender × gender": "explicit_race"},
            False,
            "analyses[0].explicit.stages",
            "is not an axis of `by`",
        ),
    ],
)
def test_questions_the_analysis_cannot_tell_apart_are_refused(
    tmp_path: Path, stages: Any, separately: bool, field: str, reason: str
) -> None:
    path = _write(tmp_path, crossed_study(stages, separately))
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 2, checked.output
    assert "Traceback" not in checked.output
    message = " ".join(checked.stderr.split())
    assert "crossed.yaml" in message and field in message and reason in message, message
