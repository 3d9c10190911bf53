"""Each model writes its own personas: in a study comparing models, the roles feeding the
compared role (persona writer, formatter) run per model unless shared, roles that only read the
models' work (a judge) keep one model, and `biasim validate` says which model writes what."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.casting import cast
from biasim.simulator.study.load import load_study

#: Seed 004 with two synthetic "models" on the decision role, one scenario and gender only.
STUDY = """\
extends: {base}
name: li2025_two_writers
roles:
  persona_writer: {{backend: synthetic{writer}}}
  agent:
    backend: synthetic
    models:
      - {{label: fair, model: fair-m}}
      - label: biased
        model: biased-m
        synthetic: {{decision: {{default: {{Evacuate: 0.9, Stay: 0.1}}}}}}
  formatter: {{backend: synthetic}}
personas: {{axes: {{race: null, ideology: null}}}}
design:
  agents_per_value: 4
  factors:
    scenario: {{authority_compliance: null, negative_information_sharing: null,
               career_path_selection: null}}
"""


def _study(tmp_path: Path, writer: str = "") -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(STUDY.format(base=builtin_path("li2025_decisions"), writer=writer))
    return path


def _calls(out: Path) -> pd.DataFrame:
    with sqlite3.connect(out / "calls.sqlite") as conn:
        return pd.read_sql("SELECT unit_id, stage, role, model, text FROM calls", conn)


def test_each_model_writes_the_personas_its_agents_act_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = execute(prepare(RunOptions(study=str(_study(tmp_path)), out=out))).results
    assert (results["status"] != "error").all()
    stored = _calls(out)
    writing = stored[stored["role"] == "persona_writer"]
    # 3 genders x 4 agents x 3 conditions with a persona writer (naming or persona), per model.
    assert writing.groupby("model").size().to_dict() == {"fair-m": 36, "biased-m": 36}
    for label, model in (("fair", "fair-m"), ("biased", "biased-m")):
        rows = results[results["model_label"] == label]
        assert set(rows["model"]) == {model}
        assert set(rows.loc[rows["stage"].isin(["naming", "persona"]), "role"]) == {
            "persona_writer"
        }
        # Each unit of the persona stage is that label's own call, by that label's model.
        persona_units = set(rows.loc[rows["stage"] == "persona", "unit_id"])
        assert persona_units and persona_units <= set(
            writing.loc[writing["model"] == model, "unit_id"]
        )


def test_a_shared_persona_writer_writes_once_for_both_models(tmp_path: Path) -> None:
    out = tmp_path / "run"
    study = _study(tmp_path, writer=", shared: true")
    results = execute(prepare(RunOptions(study=str(study), out=out))).results
    writing = _calls(out)
    writing = writing[writing["role"] == "persona_writer"]
    assert writing.groupby("model").size().to_dict() == {"synthetic-responder": 36}
    personas = results[results["stage"] == "persona"]
    assert set(personas["model"]) == {"synthetic-responder"}
    # Both models' agents act on the one persona written for their slot.
    per_agent = personas.assign(slot=personas["agent_id"].str.split("/", n=1).str[1])
    assert (per_agent.groupby("slot")["persona"].nunique() == 1).all()
    assert per_agent.groupby("slot").size().eq(2).all()


def test_validate_names_the_writer_of_each_stage_per_model(tmp_path: Path, cli) -> None:
    result = cli.invoke(app, ["validate", str(_study(tmp_path))])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "models: fair, biased" in lines
    assert (
        "  persona by `persona_writer`: fair -> synthetic:fair-m, biased -> synthetic:biased-m"
        in lines
    )
    assert "  decide by `agent`: fair -> synthetic:fair-m, biased -> synthetic:biased-m" in lines
    assert "  decide formatted by `formatter`: synthetic:default for every model" in lines


def test_single_model_validate_prints_no_casting(tmp_path: Path, cli) -> None:
    result = cli.invoke(app, ["validate", "li2025_decisions"])
    assert result.exit_code == 0, result.output
    assert "models:" not in result.stdout and " by `" not in result.stdout


def test_a_judge_reading_the_models_work_keeps_one_model(tmp_path: Path) -> None:
    study = tmp_path / "judged.yaml"
    study.write_text(
        f"extends: {builtin_path('an2024_hiring_judge')}\n"
        "roles:\n  hiring_manager: {models: [m1, m2]}\n"
    )
    players = cast(load_study(study, check_backends=False).config)
    assert list(players["hiring_manager"]) == ["m1", "m2"]
    assert list(players["judge"]) == [""]


def test_a_formatter_played_by_a_completion_model_is_an_input_error(tmp_path: Path) -> None:
    study = _study(tmp_path)
    text = study.read_text().replace(
        "{label: fair, model: fair-m}", "{label: fair, model: fair-m, structured_output: false}"
    )
    study.write_text(
        text.replace("  formatter: {backend: synthetic}\n", "  formatter: {shared: false}\n")
    )
    with pytest.raises(InputError) as info:
        load_study(study)
    found = [p for p in info.value.problems if p.field.endswith("completion.formatter")]
    assert found and all(p.line is not None for p in found)
    assert "would be played by completion models (fair)" in found[0].message
    assert "`shared: true`" in found[0].message
