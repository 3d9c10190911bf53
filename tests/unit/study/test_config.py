"""Study files: schema, extends, overrides, and errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from biasim.simulator.common.errors import InputError
from biasim.simulator.study.config import MAX_ANSWER_LENGTH, MAX_STAGES
from biasim.simulator.study.load import Override, load_study, study_json_schema
from biasim.simulator.study.personas import MAX_PERSONA_COMBINATIONS, PersonaConfig
from tests.conftest import dedent, write_study


def problems(path: Path | str, overrides=None) -> list[str]:
    with pytest.raises(InputError) as info:
        load_study(path, overrides)
    return [str(p) for p in info.value.problems]


def test_builtin_default_study_is_valid_and_cites_its_seed() -> None:
    study = load_study("emergency_response")
    assert study.config.roles["decider"].backend == "local"
    assert "Appendix A" in (study.config.source or "")
    assert study.config.personas.axes["gender"] == ["male", "female", "non-binary"]
    assert "National Weather Service" in study.config.vars["scenario"]


def test_unknown_field_names_file_line_and_path(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace("    temperature: 0.2\n", "    temprature: 0.2\n")
    path.write_text(text)
    line = text.splitlines().index("    temprature: 0.2") + 1
    assert problems(path) == [
        f"{path}:{line}: roles.decider.temprature: unknown field; did you mean `temperature`?"
    ]


def test_missing_field_points_at_the_parent(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace("  agents_per_value: 20\n", "")
    path.write_text(text)
    line = text.splitlines().index("design:") + 1
    assert problems(path) == [f"{path}:{line}: design.agents_per_value: required field is missing"]


def test_wrong_type_and_range_are_reported_together(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = (
        path.read_text()
        .replace("temperature: 0.2", "temperature: 9")
        .replace("max_tokens: 64", "max_tokens: lots")
    )
    path.write_text(text)
    found = problems(path)
    assert len(found) == 2
    assert any("roles.decider.temperature" in p and "less than or equal to 2" in p for p in found)
    assert any("roles.decider.max_tokens" in p and "integer" in p for p in found)


def test_undefined_template_variable_names_the_template_line(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace("{{ scenario }}", "{{ scenaro }}")
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "{{ scenaro }}" in ln)
    # The nearest name (difflib), and every variable the prompt could have used.
    assert problems(path) == [
        f"{path}:{line}: stages[0].prompt: template variable `scenaro` does not exist; did you "
        "mean `scenario`? (available here: condition, gender, model_label, outputs, persona, "
        "replicate, scenario)"
    ]


def test_template_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace("{{ scenario }}", "{{ scenario ")
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "{{ scenario " in ln)
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(
        f"{path}:{line}: stages[0].prompt: template syntax"
    )


def test_sandbox_refuses_code_execution(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text().replace(
        "{{ scenario }}", "{{ scenario.__class__.__mro__[1].__subclasses__() }}"
    )
    path.write_text(text)
    found = problems(path)
    assert len(found) == 1 and "stages[0].prompt" in found[0]
    assert "sandbox" in found[0] or "unsafe" in found[0]


def test_yaml_syntax_error_and_duplicate_keys(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nroles: [\n")
    found = problems(bad)
    assert len(found) == 1 and found[0].startswith(f"{bad}:3: invalid YAML")
    dup = write_study(tmp_path / "dup.yaml")
    dup.write_text(dup.read_text().replace("seed: 7\n", "seed: 7\nseed: 8\n"))
    assert problems(dup) == [f"{dup}:4: seed: key is written twice in the same mapping"]


def test_cross_references_are_checked(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = (
        path.read_text()
        .replace("    role: decider", "    role: judge")
        .replace("    target: Evacuate", "    target: Flee")
        .replace("backend: synthetic", "backend: warp-drive")
    )
    path.write_text(text)
    found = "\n".join(problems(path))
    assert "stages[0].role: no role named `judge`" in found
    assert "analyses[0].target: `Flee` is not one of ['Evacuate', 'Stay']" in found
    assert "roles.decider.backend: unknown backend `warp-drive`; known: " in found
    assert "did you mean" not in found  # no backend's name is close to it


def test_a_misspelt_backend_names_the_closest_and_how_a_plug_in_is_known(tmp_path: Path) -> None:
    """The registry's one message for an unknown plug-in, here a backend's: no study family
    registers backends, so it names the entry point only."""
    path = write_study(tmp_path / "s.yaml")
    path.write_text(path.read_text().replace("backend: synthetic", "backend: synthetc"))
    found = "\n".join(problems(path))
    assert (
        "s.yaml:8: roles.decider.backend: unknown backend `synthetc`; did you mean `synthetic`?; "
        "known: " in found
    )
    assert found.endswith(
        "; a plug-in backend is known once its package is installed with a `biasim.backends` "
        "entry point"
    )


def test_api_key_may_not_be_written_in_a_study(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    path.write_text(path.read_text().replace("latency_ms: 0}", "latency_ms: 0, api_key: sk-1}"))
    found = problems(path)
    assert len(found) == 1 and "api_key_env" in found[0] and "roles.decider.options" in found[0]


def test_extends_overrides_fields_and_keeps_locations(tmp_path: Path) -> None:
    child = tmp_path / "child.yaml"
    child.write_text(
        dedent("""
        extends: emergency_response
        name: er_big
        design:
          agents_per_value: 50
        roles:
          decider:
            temperature: 0.9
    """)
    )
    study = load_study(child)
    config = study.config
    assert config.name == "er_big"
    assert config.design.agents_per_value == 50
    assert config.roles["decider"].temperature == 0.9
    assert config.roles["decider"].max_tokens == 160  # inherited
    assert config.stages[0].output["decision"].choices == ["Evacuate", "Stay"]
    child.write_text(child.read_text().replace("temperature: 0.9", "temperature: hot"))
    assert problems(child) == [
        f"{child}:7: roles.decider.temperature: Input should be a valid number, "
        "unable to parse string as a number"
    ]


def test_extends_that_changes_a_roles_backend_drops_the_parents_options(tmp_path: Path) -> None:
    # The pipeline's evaluator gained `options: {n_ctx: 8192}` for the local backend; a study
    # extending it with `evaluator: {backend: synthetic}` was refused for that option.
    child = tmp_path / "child.yaml"
    child.write_text(
        dedent("""
        extends: bias_transmission_pipeline
        roles:
          evaluator: {backend: synthetic, options: {fail_rate: 0.5}}
          predictor: {backend: synthetic}
          predictor_bounded: {temperature: 0.5}
    """)
    )
    roles = load_study(child).config.roles
    assert roles["evaluator"].options == {"fail_rate": 0.5}
    assert not roles["predictor"].options
    assert roles["predictor_bounded"].options == {"n_ctx": 8192}  # same backend: kept


def test_error_in_an_inherited_field_is_located_in_the_base_file(tmp_path: Path) -> None:
    child = tmp_path / "child.yaml"
    child.write_text(
        dedent("""
        extends: emergency_response
        stages:
          - name: decide
            role: decider
            prompt: "Go or stay?"
            output:
              decision: {type: choice, choices: [Go, Stay]}
    """)
    )
    base = load_study("emergency_response").path
    base_line = next(
        i for i, ln in enumerate(Path(base).read_text().splitlines(), 1) if "target: Evacuate" in ln
    )
    assert problems(child) == [
        f"{base}:{base_line}: analyses[0].target: `Evacuate` is not one of ['Go', 'Stay']"
    ]


def test_extends_unknown_base_is_located(tmp_path: Path) -> None:
    child = tmp_path / "child.yaml"
    child.write_text("extends: nope\nname: x\n")
    found = problems(child)
    assert len(found) == 1 and found[0].startswith(f"{child}:1: extends:")


def test_command_line_override_errors_name_the_option(synthetic_study: Path) -> None:
    found = problems(synthetic_study, [Override("--agents", ("design", "agents_per_value"), 0)])
    assert found == [
        "--agents: design.agents_per_value: Input should be greater than or equal to 1"
    ]


def test_json_schema_describes_study_files() -> None:
    schema = study_json_schema()
    assert {"roles", "personas", "stages", "design", "extends"} <= set(schema["properties"])
    assert "RoleConfig" in schema["$defs"]


def test_a_template_that_breaks_only_after_another_answer_is_found(tmp_path: Path) -> None:
    """Validation renders later stages after each choice of an earlier answer, not only the
    first: a prompt that fails only when the first stage answered B is found before any call,
    and the stages up to the branch are not rendered again for it."""
    from tests.unit.study.test_design_features import base_study, write

    data = base_study()
    data["stages"].append(
        {
            "name": "explain",
            "role": "decider",
            "prompt": "{% if outputs.decide.decision == 'B' %}{{ missing_var }}{% endif %}Why?",
            "output": {"why": {"type": "string"}},
        }
    )
    path = write(tmp_path / "s.yaml", data)
    found = problems(path)
    assert len(found) == 1 and "stages[1].prompt" in found[0] and "missing_var" in found[0]
    data["stages"][1]["prompt"] = "Why {{ outputs.decide.decision }}?"
    rendered = load_study(str(write(tmp_path / "ok.yaml", data))).rendered or []
    first = [t for p, t in rendered if p[:2] == ("stages", 0)]
    second = [t for p, t in rendered if p[:2] == ("stages", 1)]
    # Per persona (2): stage 0 once, stage 1 once per answer (A, then the branch B).
    assert sorted(second) == sorted(["Why A?", "Why B?"] * 2)
    assert len([t for t in first if t]) == 2


def test_a_when_reads_answers_when_it_names_outputs_or_a_written_persona() -> None:
    from biasim.simulator.study.templating import reads_answers

    assert not reads_answers("task == 'relative'", written_persona=True)
    assert reads_answers("outputs.decide.decision == 'Stay'", written_persona=False)
    assert not reads_answers("persona.name != ''", written_persona=False)
    assert reads_answers("persona.name != ''", written_persona=True)


def _with_axes(path: Path, axes: int, values: int, cross: bool = True) -> Path:
    extra = "".join(
        f"    a{i}: [{', '.join(f'v{j}' for j in range(values))}]\n" for i in range(axes)
    )
    text = path.read_text().replace("    gender: [", extra + "    gender: [")
    path.write_text(text.replace("personas:\n", f"personas:\n  cross: {str(cross).lower()}\n"))
    return path


def test_persona_combinations_are_counted_from_the_axes_before_any_is_built(
    tmp_path: Path,
) -> None:
    # 3 x 10**4 = 30,000 crossed, over the limit; 3 x 10 x 333 = 9,990, under it.
    over = _with_axes(write_study(tmp_path / "over.yaml", agents=1), axes=4, values=10)
    (found,) = problems(over)
    assert (
        "personas: crossing the 5 axes gives 30,000 persona combinations, more than the " in found
    )
    assert f"limit of {MAX_PERSONA_COMBINATIONS:,}" in found
    huge = _with_axes(write_study(tmp_path / "huge.yaml", agents=1), axes=60, values=10)
    assert "gives about 10^60 persona combinations" in problems(huge)[0]
    # At the limit: 10**4 crossed, or 100 axes of 100 values listed one at a time.
    axes = {f"a{i}": [f"v{j}" for j in range(10)] for i in range(4)}
    assert PersonaConfig(axes=axes)
    listed = {f"a{i}": [f"v{j}" for j in range(100)] for i in range(100)}
    assert PersonaConfig(axes=listed, cross=False)
    with pytest.raises(ValidationError, match="listing the 101 axes gives 10,100 persona"):
        PersonaConfig(axes={**listed, "b": [f"v{j}" for j in range(100)]}, cross=False)


def test_the_stage_count_is_bounded_policy_copies_included(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml", agents=1)
    stage = "  - name: s{i}\n    role: decider\n    prompt: x\n"
    text = path.read_text()
    path.write_text(
        text.replace("stages:\n", "stages:\n" + "".join(stage.format(i=i) for i in range(100)))
    )
    assert problems(path) == [
        f"{path}:{text.splitlines().index('stages:') + 1}: stages: the study has 101 stages, "
        f"more than the limit of {MAX_STAGES}"
    ]
    # hiring_pipeline has 3 stages, 2 of them reading: 49 policies copy those into 98 more.
    policies = "".join(f"  p{i}: {{stages: {{screen: {{select: 2}}}}}}\n" for i in range(49))
    many = tmp_path / "policies.yaml"
    many.write_text(f"extends: hiring_pipeline\npolicies:\n{policies}")
    (found,) = problems(many)
    assert (
        "the study has 101 stages, 98 of them copies the policies make, more than the limit"
        in found
    )


def test_an_answer_length_past_the_limit_is_refused_at_validate(tmp_path: Path) -> None:
    path = write_study(tmp_path / "s.yaml")
    text = path.read_text()
    path.write_text(text.replace("max_length: 80", f"max_length: {10**30}"))
    (found,) = problems(path)
    assert (
        "stages[0].output.rationale.max_length: 1,000,000,000,000,000,000,000,000,000,000 " in found
    )
    assert f"more than the limit of {MAX_ANSWER_LENGTH:,}" in found
    path.write_text(text.replace("max_length: 80", f"max_length: {MAX_ANSWER_LENGTH}"))
    assert load_study(path)
