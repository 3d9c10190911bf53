"""Authoring help: errors that say how to fix a study, `init`, `validate --show-prompts`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.study.load import load_study
from tests.conftest import write_study


def problems(path: Path) -> list[str]:
    with pytest.raises(InputError) as info:
        load_study(path)
    return [str(p) for p in info.value.problems]


def test_name_pattern_error_says_in_words_which_names_are_allowed(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    path.write_text(path.read_text().replace("name: synthetic_flood", "name: my-study 2"))
    assert problems(path) == [
        f"{path}:1: name: `my-study 2` is not allowed: a name may use only letters, digits and "
        "`_`, and must not start with a digit (no spaces, `-` or `.`); e.g. `my_study_2`"
    ]


def test_factor_level_and_model_label_patterns_in_words(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace(
        "  replicates: 1",
        "  replicates: 1\n  factors:\n    place:\n      'down town': {where: city}",
    )
    text = text.replace(
        "    max_tokens: 64", "    max_tokens: 64\n    models: [{label: 'big model', model: m}]"
    )
    path.write_text(text)
    found = "\n".join(problems(path))
    assert (
        "`down town` is not allowed: a level name may use only letters, digits, `_`, `.` and "
        "`-` (no spaces); e.g. `down_town`" in found
    )
    assert (
        "`big model` is not allowed: a model label may use only letters, digits, `_`, `.`, `:` "
        "and `-` (no spaces); e.g. `big_model`" in found
    )


def test_attribute_error_lists_the_keys_of_what_was_read(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    path.write_text(
        path.read_text().replace("{{ persona.description }}", "{{ persona.descrption }}")
    )
    (found,) = problems(path)
    assert found.endswith(
        "stages[0].prompt: `persona.descrption` does not exist; did you mean `description`? "
        "(available here: axes, description, gender, key, name)"
    )


def test_persona_description_error_lists_its_own_variables(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    path.write_text(path.read_text().replace("identity is {{ gender }}", "identity is {{ gendr }}"))
    (found,) = problems(path)
    assert "personas.description: template variable `gendr` does not exist; did you mean " in found
    assert "`gender`? (available here: attributes, gender" in found


def test_no_suggestion_when_nothing_is_close(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    path.write_text(path.read_text().replace("{{ scenario }}", "{{ zzz }}"))
    (found,) = problems(path)
    assert "template variable `zzz` does not exist (available here: condition," in found
    assert "did you mean" not in found


def test_synthetic_error_suggests_synthetic_null_and_the_fix_works(tmp_path: Path) -> None:
    base = builtin_path("li2025_decisions")
    child = tmp_path / "mine.yaml"
    child.write_text(f"extends: {base}\nname: mine\npersonas:\n  axes:\n    gender: [man, woman]\n")
    found = problems(child)
    assert found and all(
        "write `synthetic: null` under `roles.agent`" in p and "roles.agent.synthetic" in p
        for p in found
    )
    child.write_text(child.read_text() + "roles:\n  agent:\n    synthetic: null\n")
    study = load_study(child)
    assert study.config.roles["agent"].synthetic == {}


def test_broken_description_is_an_input_error_not_a_traceback(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace("identity is {{ gender }}", "identity is {{ gender ")
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "identity is" in ln)
    (found,) = problems(path)
    assert found.startswith(f"{path}:{line}: personas.description: template syntax error:")


def test_init_writes_a_commented_skeleton_that_validates_and_runs_on_synthetic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["init", "loan_study"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "loan_study.yaml"
    text = path.read_text()
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 10
    study = load_study(path)
    assert study.config.name == "loan_study"
    checked = runner.invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0 and "ok - 1 stage(s), 30 agent(s), 30 unit(s)" in checked.stdout
    out = tmp_path / "run"
    ran = runner.invoke(app, ["run", str(path), "--backend", "synthetic", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 30 and results["status"].eq("answered").all()
    assert set(results["decision"]) <= {"Approve", "Deny"}
    # Never over an existing file; a bad name is explained and writes nothing.
    again = runner.invoke(app, ["init", "loan_study"])
    assert again.exit_code == 2 and "already exists; not overwritten" in again.stderr
    assert path.read_text() == text
    bad = runner.invoke(app, ["init", "loan-study"])
    assert bad.exit_code == 2
    assert "`loan-study` is not allowed: a name may use only letters" in bad.stderr
    assert not (tmp_path / "loan-study.yaml").exists()


def test_show_prompts_renders_each_distinct_prompt_once(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text()
    text = text.replace("    prompt: |-\n", "    system: Answer in JSON.\n    prompt: |-\n")
    text = text.replace("      {{ scenario }}\n", "      {{ scenario }} {{ hint }}\n")
    text = text.replace(
        "  replicates: 1",
        "  replicates: 1\n  factors:\n    tone:\n      calm: {hint: Stay calm.}\n"
        "      urgent: {hint: Hurry!}",
    )
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path), "--show-prompts"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    # One system text for all six agents, then one prompt per persona and tone, in order.
    assert headers[0] == "== stages[0].system (gender=male; tone=calm; 5 more agent(s) send it too)"
    assert headers[1:] == [
        f"== stages[0].prompt (gender={g}; tone={t})"
        for t in ("calm", "urgent")
        for g in ("male", "female", "non-binary")
    ]
    assert "You are a person whose gender identity is female.\nA flood is coming. Hurry!" in (
        result.stdout
    )
    assert "7 distinct prompt text(s)" in result.stdout
