"""Authoring help: errors that say how to fix a study, `init`, `validate --show-prompts`."""

from __future__ import annotations

from pathlib import Path

import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.config import load_study
from biasim.simulator.errors import InputError

from .conftest import write_study


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
