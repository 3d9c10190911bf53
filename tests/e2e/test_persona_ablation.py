"""Generated personas (`personas.source: generated`) and persona ablations, end to end: the
writer's answers are stored, cached and shown to later stages under each ablation condition,
each model writes its own personas, problems name the field the user wrote, and the report
tests whether the DPD differs between conditions."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, load_run, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.study.casting import castings
from biasim.simulator.study.load import load_study
from biasim.simulator.study.personas import SEED004_PERSONA_PROMPT
from tests.conftest import answered_calls

STUDY = """\
name: ablate
description: generated personas, ablated
seed: 3
vars: {{scenario: "A flood warning. Evacuate or Stay?"}}
roles:
  writer: {{backend: synthetic{writer}}}
  decider:
    backend: synthetic
{models}    synthetic:
      decision:
        by: [persona_source, gender]
        probabilities: {{"generated|female": {{Evacuate: 0.9, Stay: 0.1}}}}
        default: {{Evacuate: 0.5, Stay: 0.5}}
personas:
  axes: {{gender: [male, female]}}
  source: generated
  description: "gender identity: {{{{ gender }}}}"
  writer: {{role: writer}}
  ablation: [attribute, name, generated]
stages:
  - name: decide
    role: decider
    prompt: >-
      You are {{{{ persona.description }}}} ({{{{ persona.name or 'no name' }}}}).
      {{{{ scenario }}}}
    output:
      decision: {{type: choice, choices: [Evacuate, Stay]}}
design:
{factors}  agents_per_value: {agents}
analyses:
  - {{kind: demographic_parity, stage: decide, field: decision, target: Evacuate, by: gender,
     condition: persona_source, n_permutations: 500}}
  - {{kind: condition_differences, name: analysis1, stage: decide, field: decision,
     target: Evacuate, by: gender, condition: persona_source, n_permutations: 500}}
"""


def _write(
    tmp_path: Path, *, writer: str = "", models: str = "", factors: str = "", agents: int = 5
) -> Path:
    path = tmp_path / "ablate.yaml"
    path.write_text(STUDY.format(writer=writer, models=models, factors=factors, agents=agents))
    return path


def _requests(out: Path) -> pd.DataFrame:
    with sqlite3.connect(out / "calls.sqlite") as conn:
        calls = pd.read_sql("SELECT unit_id, stage, role, model, request FROM calls", conn)
    calls["prompt"] = [json.loads(r)["messages"][-1]["content"] for r in calls["request"]]
    return calls


def test_written_personas_are_stored_and_shown_under_each_condition(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = execute(prepare(RunOptions(study=str(_write(tmp_path)), out=out))).results
    calls = _requests(out)
    writing = calls[calls["stage"] == "persona"]
    # One persona per agent (2 genders x 5), shared by the `name` and `generated` conditions.
    assert len(writing) == 10
    assert all("skilled at creating names and personas" in p for p in writing["prompt"])
    assert "demographic: gender identity: female." in writing["prompt"].iloc[-1]
    deciding = calls[calls["stage"] == "decide"].set_index("unit_id")["prompt"]
    agent = "gender=female/0/r0/decide"
    assert deciding[f"persona_source=attribute/{agent}"].startswith(
        "You are gender identity: female (no name)."
    )
    assert deciding[f"persona_source=name/{agent}"].startswith(
        "You are synthetic name (synthetic name)."
    )
    assert deciding[f"persona_source=generated/{agent}"].startswith(
        "You are synthetic persona (synthetic name)."
    )
    # The written persona is a results row; later rows carry the written name.
    written = results[results["stage"] == "persona"]
    assert set(written["persona_source"]) == {"name", "generated"}
    assert (written["name"] == "synthetic name").all()
    assert (written["persona"] == "synthetic persona").all()
    decide = results[results["stage"] == "decide"]
    named = decide["persona_source"] != "attribute"
    assert (decide.loc[named, "persona_name"] == "synthetic name").all()
    assert decide.loc[~named, "persona_name"].isna().all()
    # The manifest keeps the study as written: no synthesized stage or factor.
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["name"] for s in manifest["study"]["stages"]] == ["decide"]
    assert "persona_source" not in manifest["study"]["design"]["factors"]
    study, reloaded = load_run(out)
    assert [s.name for s in study.config.stages] == ["persona", "decide"]
    assert len(reloaded) == len(results)


def test_a_replay_answers_every_written_persona_from_the_store(tmp_path: Path) -> None:
    path = _write(tmp_path)
    first = execute(prepare(RunOptions(study=str(path), out=tmp_path / "a"))).results
    again = execute(
        prepare(RunOptions(study=str(path), out=tmp_path / "b", replay=tmp_path / "a"))
    ).results
    assert again["cached"].all()
    columns = ["unit_id", "persona_name", "name", "persona", "decision"]
    pd.testing.assert_frame_equal(
        first[columns].reset_index(drop=True), again[columns].reset_index(drop=True)
    )


def test_the_report_tests_whether_the_dpd_differs_between_conditions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = execute(prepare(RunOptions(study=str(_write(tmp_path, agents=60)), out=out)))
    summary = json.loads((out / "summary.json").read_text())
    analysis = summary["analyses"][1]
    assert analysis["kind"] == "condition_differences"
    assert analysis["condition_levels"] == ["attribute", "name", "generated"]
    tests = pd.read_csv(out / "tables" / "analysis1_condition_differences.csv")
    assert list(tests["compared"]) == [
        "attribute vs name vs generated",
        "attribute vs name",
        "attribute vs generated",
        "name vs generated",
    ]
    # Declared: only generated female personas evacuate more (0.9 vs 0.5).
    omnibus = tests.iloc[0]
    assert omnibus["dpd_generated"] > omnibus["dpd_attribute"]
    assert omnibus["p_value"] < 0.01 and omnibus["significant"]
    assert omnibus["n_matched"] == 120  # every agent answered under all three conditions
    # `biasim power` reads the omnibus test as the ablation's headline.
    power_tests = get_kind("condition_differences").power_tests(analysis)
    headline = power_tests["DPD differs between persona_source levels (any case)"]
    assert headline.p == pytest.approx(omnibus["p_adjusted"])
    assert headline.label == "persona_id, 120 units"  # the kind's unit, across conditions
    assert run.results is not None
    page = (out / "report.html").read_text()
    assert "does the DPD differ between condition levels?" in page


def test_each_model_writes_its_own_personas_unless_the_writer_is_shared(tmp_path: Path) -> None:
    models = "    models: [{label: m1, model: a}, {label: m2, model: b}]\n"
    study = load_study(str(_write(tmp_path, models=models))).config
    players = {(c.stage, c.label) for c in castings(study) if c.role == "writer"}
    assert players == {("persona", "m1"), ("persona", "m2")}
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(_write(tmp_path, models=models)), out=out)))
    writing = _requests(out).query("stage == 'persona'")
    assert len(writing) == 20  # 10 agents, once per model
    shared = load_study(str(_write(tmp_path, writer=", shared: true", models=models))).config
    assert {c.label for c in castings(shared) if c.role == "writer"} == {""}


def test_the_writer_is_shared_across_factors_its_prompt_does_not_read(tmp_path: Path) -> None:
    factors = (
        "  factors:\n    setting:\n      flood: {context: how this person acts in a flood}\n"
        "      fire: {context: how this person acts in a fire}\n"
    )
    contextual = load_study(str(_write(tmp_path, factors=factors))).config
    # The default prompt reads `context` (the paper's contextualized persona): one per setting.
    assert contextual.stages[0].shared_across == ["persona_source"]
    assert contextual.stages[0].prompt == SEED004_PERSONA_PROMPT
    plain = factors.replace("context:", "place:")
    assert load_study(str(_write(tmp_path, factors=plain))).config.stages[0].shared_across == [
        "setting",
        "persona_source",
    ]


def _problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_study(str(path))
    return [str(p) for p in info.value.problems]


def test_problems_name_the_fields_the_user_wrote(tmp_path: Path) -> None:
    text = STUDY.format(writer="", models="", factors="", agents=2)
    lines = text.splitlines()
    writer_line = next(i for i, line in enumerate(lines, 1) if "writer: {role: writer}" in line)
    decide_line = next(i for i, line in enumerate(lines, 1) if "role: decider" in line)
    problems = _problems(
        tmp_path,
        text.replace("writer: {role: writer}", "writer: {role: scribe}").replace(
            "role: decider", "role: judge"
        ),
    )
    assert any(
        f"bad.yaml:{writer_line}: personas.writer.role" in p and "no role named `scribe`" in p
        for p in problems
    ), problems
    # The user's first stage keeps its index and line.
    assert any(
        f"bad.yaml:{decide_line}: stages[0].role" in p and "no role named `judge`" in p
        for p in problems
    ), problems
    prompt = "writer: {role: writer, prompt: 'Write {{ persona.nickname }}'}"
    problems = _problems(tmp_path, text.replace("writer: {role: writer}", prompt))
    assert any(
        f"bad.yaml:{writer_line}: personas.writer.prompt" in p and "nickname" in p for p in problems
    ), problems


def test_source_writer_and_ablation_go_together(tmp_path: Path) -> None:
    text = STUDY.format(writer="", models="", factors="", agents=2)
    problems = _problems(tmp_path, text.replace("  writer: {role: writer}\n", ""))
    assert any("source `generated` and `writer` go together" in p for p in problems), problems
    attribute = text.replace("source: generated", "source: attribute").replace(
        "  writer: {role: writer}\n", ""
    )
    problems = _problems(tmp_path, attribute)
    assert any("`ablation` needs source `generated`" in p for p in problems), problems


def test_the_description_template_can_use_a_name_bank_name(tmp_path: Path) -> None:
    path = tmp_path / "bank.yaml"
    path.write_text(
        "name: bank\ndescription: d\nroles: {r: {backend: synthetic}}\n"
        "personas:\n  axes: {gender: [female, male]}\n  source: name_bank\n"
        "  names: {female: [Ana, Eva], male: [Tom, Bob]}\n"
        '  description: "{{ name }}, gender identity: {{ gender }}"\n'
        "stages: [{name: s, role: r, prompt: 'You are {{ persona.description }}.'}]\n"
        "design: {agents_per_value: 2}\n"
    )
    from biasim.simulator.study.design import iter_design

    descriptions = [a.persona.description for a in list(iter_design(load_study(str(path)).config))]
    assert descriptions == [
        "Ana, gender identity: female",
        "Eva, gender identity: female",
        "Tom, gender identity: male",
        "Bob, gender identity: male",
    ]


def test_a_run_killed_while_personas_are_written_resumes_each_persona_once(
    tmp_path: Path,
) -> None:
    # 2 genders x 60 agents: 120 personas at 20 ms, 4 at a time, killed after 40.
    writer = ", options: {latency_ms: 20}, max_concurrency: 4"
    study = _write(tmp_path, writer=writer, agents=60)
    out = tmp_path / "run"
    biasim = [sys.executable, "-m", "biasim"]
    proc = subprocess.Popen(
        [*biasim, "run", str(study), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while answered_calls(out / "calls.sqlite") < 40:
        assert proc.poll() is None, "run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = answered_calls(out / "calls.sqlite")
    assert 40 <= before < 120
    done = subprocess.run(
        [*biasim, "run", "--resume", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert results["unit_id"].is_unique
    # 120 agents x 3 decisions, and a writer row under `name` and `generated` each.
    assert (results["stage"] == "decide").sum() == 360
    assert (results["stage"] == "persona").sum() == 240
    assert (results["status"] == "answered").all()
    calls = _requests(out)
    assert (calls["stage"] == "persona").sum() == 120  # no persona was written twice
    # Those written before the kill were replayed, not written again (one call per persona
    # above); `cached` keeps where each first came from, the model, as before the kill.
    assert not results[results["stage"] == "persona"]["cached"].any()
