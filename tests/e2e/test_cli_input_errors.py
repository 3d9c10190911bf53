"""Bad input: exit code 2, a message naming file, line and field, and no run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from biasim.simulator.cli import app
from tests.conftest import write_study


def invoke_run(cli, *args: str):
    return cli.invoke(app, ["run", *args])


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace("seed: 7", "seed: [7"), ":4: invalid YAML: expected ',' or ']'"),
        (
            lambda t: t.replace("backend: synthetic", "backend: nope"),
            ":8: roles.decider.backend: unknown backend `nope`",
        ),
        (
            lambda t: t.replace("{{ scenario }}", "{{ senario }}"),
            "stages[0].prompt: template variable `senario` does not exist",
        ),
        (lambda t: t.replace("  replicates: 1", "  replicas: 1"), "design.replicas: unknown field"),
    ],
)
def test_bad_study_exits_2_and_writes_nothing(tmp_path: Path, cli, edit, expected) -> None:
    study = write_study(tmp_path / "s.yaml")
    study.write_text(edit(study.read_text()))
    out = tmp_path / "run"
    result = invoke_run(cli, str(study), "--out", str(out))
    assert result.exit_code == 2
    assert f"{study}" in result.stderr and expected in result.stderr
    assert not out.exists()
    assert cli.invoke(app, ["validate", str(study)]).exit_code == 2


def test_unreadable_model_file_names_the_option(tmp_path: Path, cli) -> None:
    study = tmp_path / "s.yaml"
    study.write_text(
        "extends: emergency_response\nroles:\n  decider:\n"
        "    options: {model_path: /nonexistent/model.gguf}\n"
    )
    result = invoke_run(cli, str(study), "--out", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert f"{study}:4: roles.decider.options.model_path: cannot read model file" in result.stderr
    assert not (tmp_path / "run").exists()
    notgguf = tmp_path / "x.gguf"
    notgguf.write_text("hello")
    study.write_text(study.read_text().replace("/nonexistent/model.gguf", str(notgguf)))
    result = invoke_run(cli, str(study), "--out", str(tmp_path / "run"))
    assert result.exit_code == 2 and "is not a GGUF model file" in result.stderr


def test_unwritable_output_directory(tmp_path: Path, cli) -> None:
    study = write_study(tmp_path / "s.yaml")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = invoke_run(cli, str(study), "--out", str(blocker / "run"))
    assert result.exit_code == 2 and "--out" in result.stderr
    result = invoke_run(cli, str(study), "--out", "/proc/biasim-run")
    assert result.exit_code == 2 and "cannot write" in result.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    result = invoke_run(cli, str(study), "--out", str(tmp_path / "full"))
    assert result.exit_code == 2 and "not empty" in result.stderr


def test_bad_options_and_missing_things(tmp_path: Path, cli) -> None:
    study = write_study(tmp_path / "s.yaml")
    result = invoke_run(cli, str(study), "--agents", "0", "--out", str(tmp_path / "r"))
    assert result.exit_code == 2
    assert (
        "--agents: design.agents_per_value: Input should be greater than or equal to 1"
        in result.stderr
    )
    result = invoke_run(cli, str(study), "--backend", "nope", "--out", str(tmp_path / "r"))
    assert (
        result.exit_code == 2
        and "--backend: roles.decider.backend: unknown backend" in result.stderr
    )
    result = invoke_run(cli, "no-such-study", "--out", str(tmp_path / "r"))
    assert result.exit_code == 2 and "no such file and no built-in study" in result.stderr
    result = invoke_run(cli, "--resume", str(tmp_path))
    assert result.exit_code == 2 and "not a run directory" in result.stderr
    assert not (tmp_path / "r").exists()


def test_backend_override_switches_every_role(tmp_path: Path, cli) -> None:
    result = invoke_run(
        cli,
        "emergency_response",
        "--backend",
        "synthetic",
        "--agents",
        "30",
        "--out",
        str(tmp_path / "r"),
    )
    assert result.exit_code == 0, result.stderr
    assert "SYNTHETIC" in result.stdout


def test_schema_command_prints_json_schema(cli) -> None:
    import json

    result = cli.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "StudyConfig"
    # Every registered analysis kind's fields are in the schema editors read.
    kinds = schema["properties"]["analyses"]["items"]["anyOf"]
    from biasim.simulator.kinds import get_kind, kind_names

    names = {k["$ref"].rsplit("/", 1)[1] for k in kinds}
    assert names == {get_kind(name).spec.__name__ for name in kind_names()}
    assert {"DecisionsSpec", "LettersSpec", "PicksSpec", "TransmissionSpec"} <= names
    assert "target_from" in schema["$defs"]["DecisionsSpec"]["properties"]


def test_a_failing_analysis_keeps_the_run_and_says_how_to_redo_it(
    tmp_path: Path, cli, monkeypatch
) -> None:
    """Hours of model answers must survive a bug in a statistic: the run is complete, the
    error is recorded, the exit code is 1, and `biasim analyze` redoes the analysis."""
    import json

    import biasim.simulator.engine.runner

    def broken(*args, **kwargs):
        raise ValueError("p-values must lie in [0, 1]")

    monkeypatch.setattr(biasim.simulator.engine.runner, "analyze", broken)
    study = write_study(tmp_path / "s.yaml", agents=5)
    out = tmp_path / "r"
    result = invoke_run(cli, str(study), "--out", str(out))
    assert result.exit_code == 1
    stderr = " ".join(result.stderr.split())  # rich wraps at the terminal width
    assert "analysis failed: ValueError: p-values must lie in [0, 1]" in stderr
    assert f"biasim analyze run {out}" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["rows"] > 0
    assert summary["analysis_error"].startswith("ValueError")
    monkeypatch.undo()
    redone = cli.invoke(app, ["analyze", str(out)])
    assert redone.exit_code == 0, redone.output
    assert "Demographic parity difference" in redone.stdout


def test_agents_above_the_name_banks_size_is_exit_2_not_reuse(tmp_path: Path, cli) -> None:
    out = tmp_path / "r"
    result = invoke_run(
        cli, "an2024_hiring", "--backend", "synthetic", "--agents", "51", "--out", str(out)
    )
    assert result.exit_code == 2
    assert (
        "--agents: design.agents_per_value: 51 agents per persona value, but name bank `an2024` "
        "has 50 names for `White/female`" in result.stderr
    )
    assert not out.exists()
