"""`biasim init --template`: each template validates and runs on the synthetic backend as
written, its analyses find a table to write; an unknown template or a misspelt key in a study
is answered with the nearest name."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.tools.authoring import TEMPLATES

FAST = ("decisions", "explicit", "ablation")


@pytest.mark.parametrize(
    "template",
    [t if t in FAST else pytest.param(t, marks=pytest.mark.slow) for t in TEMPLATES],
)
def test_each_template_validates_and_runs_on_synthetic(
    template: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    written = runner.invoke(app, ["init", f"my_{template}", "--template", template])
    assert written.exit_code == 0, written.output
    path = tmp_path / f"my_{template}.yaml"
    assert f"name: my_{template}" in path.read_text()
    checked = runner.invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0 and ": ok - " in " ".join(checked.stdout.split()), checked.output
    out = tmp_path / "run"
    ran = runner.invoke(app, ["run", str(path), "--backend", "synthetic", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) and results["status"].eq("answered").any()
    assert list((out / "tables").glob("*.csv")), "the analysis wrote no table"
    assert (out / "report.html").is_file()


def test_an_unknown_template_is_named_with_the_nearest(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["init", "s", "--template", "letter"])
    assert result.exit_code == 2
    assert "--template: `letter`; did you mean `letters`?" in result.stderr
    assert not (tmp_path / "s.yaml").exists()


def test_a_misspelt_key_gets_a_did_you_mean_at_every_level(tmp_path: Path) -> None:
    study = tmp_path / "s.yaml"
    CliRunner().invoke(app, ["init", "s", "--out", str(study)])
    text = study.read_text()
    text = text.replace("  agents_per_value: 10", "  agent_per_value: 10")
    text = text.replace("    role: decider", "    rol: decider")
    text = text.replace("    target: Approve", "    targt: Approve")
    study.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(study)])
    assert result.exit_code == 2
    assert "design.agent_per_value: unknown field; did you mean `agents_per_value`?" in (
        result.stderr
    )
    assert "stages[0].rol: unknown field; did you mean `role`?" in result.stderr
    assert "analyses[0].targt: unknown field; did you mean `target`?" in result.stderr


def test_one_unit_count_from_validate_to_the_report(tmp_path: Path, monkeypatch) -> None:
    """The explicit template's two stages each run for half the agents (`when`): validate,
    the progress line and the header all count 80 planned units; validate counts the 40 its
    `when` (on a design factor) skips, and the header names the 40 not run by what the study
    has (a `when`; no reading stage, so not "nothing to read")."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    runner.invoke(app, ["init", "both", "--template", "explicit"])
    checked = runner.invoke(app, ["validate", "both.yaml"])
    assert "80 unit(s) (40 skipped by a `when` on the design)" in checked.stdout
    ran = runner.invoke(app, ["run", "both.yaml", "--backend", "synthetic", "--out", "run"])
    assert ran.exit_code == 0, ran.output
    assert "80/80 units" in ran.stderr
    header = " ".join(ran.stdout.split())
    assert "units: 40 of 80 (40 not run: a `when` was false)" in header
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Units: 40 of 80 (40 not run: a `when` was false)" in page


@pytest.mark.parametrize("template", FAST)
def test_each_template_s_persona_sentence_reads_naturally(
    template: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template's prompts say who the agent is in words ("You are a loan officer whose gender
    identity is female."), never the default `axis: value` description ("You are gender:
    female.")."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    runner.invoke(app, ["init", "s", "--template", template])
    shown = runner.invoke(app, ["validate", "s.yaml", "--show-prompts"])
    assert shown.exit_code == 0, shown.output
    assert "You are a loan officer whose gender identity is female." in shown.stdout
    assert "gender: female" not in shown.stdout and "gender: male" not in shown.stdout


def test_a_users_own_study_is_not_captioned_in_a_seed_paper_s_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explicit template's study is the user's own: its console and page call the tests by
    what they are; the seed study of that kind keeps the paper's words."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    runner.invoke(app, ["init", "mine", "--template", "explicit"])
    ran = runner.invoke(app, ["run", "mine.yaml", "--backend", "synthetic", "--out", "run"])
    assert ran.exit_code == 0, ran.output
    page = (tmp_path / "run" / "report.html").read_text()
    for shown in (" ".join(ran.stdout.split()), page):
        assert "paper's" not in shown.lower() and "Implicit bias" not in shown
    # One sentence, said on the console and the page alike (the kind's declared lines).
    assert "a two-sample t-test of raw DPDs" in " ".join(ran.stdout.split())
    assert "a two-sample t-test of raw DPDs" in page
    seed = runner.invoke(
        app,
        ["run", "emergency_response", "--backend", "synthetic", "--agents", "2", "--out", "seed"],
    )
    assert seed.exit_code == 0, seed.output
    assert "(the paper's test)" in " ".join(seed.stdout.split())
