"""The older single-entry form of the seed-004 analysis (one ``demographic_parity`` entry with
``condition:``, ``explicit:``, ``terms:``, ``predictions:``) loads for one release as the kinds
that now do each part, under the same name, with one deprecation line naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from biasim.simulator.common.errors import InputError
from biasim.simulator.study.load import load_study

STAGE = """\
    stage: decide
    field: decision
    target_from: target
    by: [gender, race, ideology]
    separately: true
    cases: [scenario]
    condition: persona_condition
"""

OLD_FORM = (
    """\
extends: li2025_decisions
analyses:
  - name: decisions
"""
    + STAGE
    + """\
    explicit:
      stages: [explicit_gender, explicit_race, explicit_ideology]
    terms: {field: rationale, term_sets: li2025}
    predictions: default
  - kind: demographic_parity
    stage: decide
    field: decision
    target_from: target
    by: gender
"""
)


def _write(tmp_path: Path, text: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "old.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_older_form_becomes_the_new_kinds_under_its_name(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, OLD_FORM))
    analyses = study.config.analyses
    assert [(a.kind, a.name) for a in analyses] == [
        ("demographic_parity", "decisions"),
        ("demographic_parity", None),  # the user's second entry keeps its index and name
        ("condition_differences", "decisions"),
        ("explicit_bias", "decisions"),
        ("rationale_terms", "decisions"),
        ("predictions_check", "decisions"),
    ]
    core, *_, explicit, terms, predictions = analyses
    assert core.condition == "persona_condition" and explicit.condition == "persona_condition"
    assert explicit.explicit.stages == ["explicit_gender", "explicit_race", "explicit_ideology"]
    assert terms.terms.term_sets == "li2025" and predictions.predictions == "default"
    assert not hasattr(core, "explicit")
    # The record of the run is the new form: loading it again changes nothing, says nothing.
    again = _write(tmp_path / "again", yaml.safe_dump(study.resolved, sort_keys=False))
    reloaded = load_study(again)
    assert reloaded.config.analyses == analyses and reloaded.deprecations == ()
    (line,) = study.deprecations
    assert line.startswith(f"{tmp_path / 'old.yaml'}:3: analyses[0]: ")
    for word in ("`condition:`", "`explicit:`", "`terms:`", "`predictions:`", "deprecated"):
        assert word in line
    for new in ("condition_differences", "explicit_bias", "rationale_terms", "predictions_check"):
        assert f"`kind: {new}`" in line
    assert "`name: decisions`" in line and "\n" not in line


def test_the_new_form_loads_without_a_deprecation() -> None:
    study = load_study("li2025_decisions")
    assert study.deprecations == ()
    assert {a.name for a in study.config.analyses} == {"decisions"}
    assert len(study.config.analyses) == 5


def test_condition_alone_is_the_older_form_only_without_condition_differences(
    tmp_path: Path,
) -> None:
    entry = "  - kind: demographic_parity\n    name: d\n" + STAGE
    old = load_study(_write(tmp_path, f"extends: li2025_decisions\nanalyses:\n{entry}"))
    assert [a.kind for a in old.config.analyses] == ["demographic_parity", "condition_differences"]
    assert len(old.deprecations) == 1 and "`condition:`" in old.deprecations[0]
    compared = entry + "  - kind: condition_differences\n    name: d\n" + STAGE
    new = load_study(_write(tmp_path, f"extends: li2025_decisions\nanalyses:\n{compared}"))
    assert [a.kind for a in new.config.analyses] == ["demographic_parity", "condition_differences"]
    assert new.deprecations == ()


def test_a_problem_in_an_expanded_part_names_the_entry_the_user_wrote(tmp_path: Path) -> None:
    text = OLD_FORM.replace("explicit_race, explicit_ideology]", "explicit_race, explicit_nope]")
    with pytest.raises(InputError) as info:
        load_study(_write(tmp_path, text))
    line = text.splitlines().index("      stages: [explicit_gender, explicit_race, explicit_nope]")
    shown = [str(p) for p in info.value.problems]
    assert any(
        p.startswith(f"{tmp_path / 'old.yaml'}:{line + 1}: analyses[0].explicit.stages[2]")
        and "explicit_nope" in p
        for p in shown
    ), shown


def test_kinds_over_one_stage_may_share_a_name_but_not_one_kind_twice(tmp_path: Path) -> None:
    core = "  - kind: demographic_parity\n    name: d\n" + STAGE
    twice = f"extends: li2025_decisions\nanalyses:\n{core}{core}"
    with pytest.raises(InputError) as info:
        load_study(_write(tmp_path, twice))
    assert any("already writes tables named `d`" in str(p) for p in info.value.problems)


def test_validate_prints_the_deprecation_line(tmp_path: Path, cli) -> None:
    from biasim.simulator.cli import app

    path = _write(tmp_path, OLD_FORM)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("deprecated: ")]
    assert line.startswith(f"deprecated: {path}:3: analyses[0]: ")
    assert "`kind: explicit_bias` with `explicit:`" in line
    assert "deprecated" not in cli.invoke(app, ["validate", "li2025_decisions"]).stderr
