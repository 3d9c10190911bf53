"""Counterfactual writing stages (issue 47 item 1): every call asked again with only a persona
value or name swapped, at the same seed, recorded as a set; refused where a stage cannot."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.load import load_study
from biasim.simulator.tools.estimate import estimate

AGENTIC, COMMUNAL = "A confident leader.", "A kind helper."


def _study(tmp_path: Path, counterfactual: dict, **changes: object) -> Path:
    doc: dict = {
        "name": "cf",
        "description": "counterfactual letters",
        "seed": 11,
        "roles": {
            "writer": {
                "backend": "synthetic",
                "synthetic": {
                    "text": {
                        "by": "gender",
                        "probabilities": {
                            "male": {AGENTIC: 0.9, COMMUNAL: 0.1},
                            "female": {AGENTIC: 0.1, COMMUNAL: 0.9},
                        },
                    }
                },
            }
        },
        "personas": {
            "source": "name_bank",
            "axes": {"gender": ["female", "male"], "race": ["a", "b"]},
            "names": {
                "female/a": ["Ann", "Amy"],
                "female/b": ["Bea", "Bo"],
                "male/a": ["Al", "Abe"],
                "male/b": ["Ben", "Bob"],
            },
            "description": "{{ gender }}",
        },
        "design": {"agents_per_value": 2, "replicates": 2},
        "stages": [
            {
                "name": "write",
                "role": "writer",
                "prompt": "A letter for {{ persona.name }}, {{ persona.gender }}.",
                "counterfactual": counterfactual,
            },
            {"name": "again", "role": "writer", "prompt": "Shorten: {{ outputs.write.text }}"},
        ],
    }
    doc.update(changes)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _requests(out: Path) -> dict[str, dict]:
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute("select unit_id, request from calls where stage = 'write'").fetchall()
    return {unit: json.loads(request) for unit, request in rows}


def test_gender_swap_asks_each_call_again_at_its_seed(tmp_path: Path) -> None:
    study = _study(tmp_path, {"swap": "gender"})
    out = tmp_path / "run"
    df = execute(prepare(RunOptions(study=str(study), out=out))).results
    write = df[df["stage"] == "write"]
    # 4 combinations x 2 agents x 2 replicates = 16 agents, each with one twin.
    assert len(write) == 32 and len(df[df["stage"] == "again"]) == 16
    sets = write.groupby("cf_set")
    assert sets.size().eq(2).all() and sets["cf_swap"].nunique().eq(2).all()
    assert (write["cf_swap"] == write["gender"]).all()
    assert sets["race"].nunique().eq(1).all() and sets["agent_id"].nunique().eq(1).all()
    assert set(write["cf_writer"]) == {"writer:synthetic:synthetic-responder"}
    requests = _requests(out)
    for unit, request in requests.items():
        if "/cf=" not in unit:
            continue
        own = requests[unit.split("/cf=")[0]]
        assert request["seed"] == own["seed"]
        # Only the name and the gender differ: Ann (female/a, first) <-> Al (male/a, first).
        text, own_text = request["messages"][0]["content"], own["messages"][0]["content"]
        assert text != own_text
        assert dict(request["attributes"])["race"] == dict(own["attributes"])["race"]
    pairs = write.set_index("unit_id")["persona_name"]
    assert pairs["default/gender=female,race=a/0/r0/write/cf=male"] == "Al"
    # The writer answers the swapped persona: the twins follow the swapped value's truth.
    twins = write[write["unit_id"].str.contains("/cf=")]
    share = twins.groupby("cf_swap")["text"].apply(lambda s: (s == AGENTIC).mean())
    assert share["male"] > 0.6 > 0.4 > share["female"]


def test_name_swap_keeps_attributes(tmp_path: Path) -> None:
    study = _study(tmp_path, {"swap": "name", "within": "race"})
    df = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run"))).results
    write = df[df["stage"] == "write"].set_index("unit_id")
    twin = write.loc["default/gender=female,race=a/1/r1/write/cf=b"]
    assert (twin["persona_name"], twin["race"], twin["gender"], twin["cf_swap"]) == (
        "Bo",
        "a",
        "female",
        "b",
    )


def test_estimate_counts_the_twins(tmp_path: Path) -> None:
    figures = estimate(load_study(_study(tmp_path, {"swap": "gender"})), tokenizers=False)
    calls = {line.stage: line.calls for line in figures.lines}
    assert calls == {"write": 32, "again": 16}


@pytest.mark.parametrize(
    ("counterfactual", "changes", "reason"),
    [
        ({"swap": "age"}, {}, "`age` is not a persona axis"),
        ({"swap": "name"}, {}, "`swap: name` needs `within`"),
        ({"swap": "race", "within": "gender"}, {}, "`within` goes with `swap: name`"),
    ],
)
def test_refused_at_validate(
    tmp_path: Path, counterfactual: dict, changes: dict, reason: str
) -> None:
    with pytest.raises(InputError, match=reason):
        load_study(_study(tmp_path, counterfactual, **changes))


def test_name_swap_needs_a_name_bank(tmp_path: Path) -> None:
    personas = {"axes": {"gender": ["female", "male"]}, "description": "{{ gender }}"}
    study = _study(tmp_path, {"swap": "name", "within": "gender"}, personas=personas)
    with pytest.raises(InputError, match=r"stages\[0\]\.counterfactual\.swap.*name_bank"):
        load_study(study)


def test_missing_bank_names_refused(tmp_path: Path) -> None:
    study = _study(tmp_path, {"swap": "gender"})
    doc = yaml.safe_load(study.read_text())
    doc["personas"]["axes"]["race"].append("c")
    doc["personas"]["names"]["female/c"] = ["Cy"]
    study.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="no names for `male/c`"):
        load_study(study)


def test_pipeline_readers_read_only_the_agents_letters(tmp_path: Path) -> None:
    """In a pipeline the twins are results: the readers' documents are the agents' own."""
    study = _study(
        tmp_path,
        {"swap": "gender"},
        populations={
            "writers": {"agent": "letter_writer", "personas": "study"},
            "readers": {"agent": "screener", "count": 2},
        },
    )
    doc = yaml.safe_load(study.read_text())
    doc["design"] = {"agents_per_value": 2}
    doc["stages"][0]["population"] = "writers"
    doc["stages"][1] = {
        "name": "read",
        "role": "writer",
        "population": "readers",
        "reads": {"stage": "write", "matching": "single"},
        "prompt": "Rate: {{ documents[0].text }}",
        "output": {"decision": {"type": "choice", "choices": ["yes", "no"]}},
        "advance": "decision == 'yes'",
    }
    study.write_text(yaml.safe_dump(doc))
    figures = estimate(load_study(study), tokenizers=False)
    assert {line.stage: line.calls for line in figures.lines}["write"] == 16
    df = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run"))).results
    write, read = df[df["stage"] == "write"], df[df["stage"] == "read"]
    assert len(write) == 16 and write.groupby("cf_set").size().eq(2).all()
    read_units = {u for units in read["reads"] for u in units.split("|")}
    assert len(read) == 8 and not any("/cf=" in u for u in read_units)


def test_a_set_is_one_unit_in_the_summary_as_in_the_progress_and_the_manifest(
    tmp_path: Path,
) -> None:
    """A twin's call is part of its agent's unit of work: the progress, the manifest and the
    summary (console header, report, summary.json) count 32 units, not the 48 rows."""
    from biasim.simulator.report.outputs import units_text

    study = _study(tmp_path, {"swap": "gender"})
    totals: list[int] = []

    def progress(total: int, label: str):
        totals.append(total)
        return lambda *args: None

    out = tmp_path / "run"
    outcome = execute(prepare(RunOptions(study=str(study), out=out)), progress=progress)
    assert len(outcome.results) == 48
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert totals == [32] and manifest["counts"]["units"] == 32
    assert summary["units"] == summary["units_expected"] == outcome.summary["units"] == 32
    assert units_text(summary) == "32"


def test_validate_progress_summary_and_the_role_line_count_a_set_as_one_unit(
    tmp_path: Path, cli
) -> None:
    """One count of units on every route: `biasim validate`, the progress line, the header,
    summary.json (its units and the writer's accounting) and the writer's line all say 32
    units (16 sets of 2 calls and 16 single calls), and the line counts the 48 answers apart
    (it once said 48 units)."""
    import re

    from biasim.simulator.cli import app

    study = _study(tmp_path, {"swap": "gender"})
    validated = cli.invoke(app, ["validate", str(study)])
    assert validated.exit_code == 0, validated.output
    assert "16 agent(s), 32 unit(s)" in " ".join(validated.output.split())
    out = tmp_path / "run"
    ran = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.output.split())
    assert re.findall(r"progress cf: (\d+)/(\d+) units", ran.stderr)[-1] == ("32", "32")
    assert "units: 32 " in said
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    (writer,) = summary["accounting"]["by_role"]
    assert summary["units"] == writer["units"] == 32
    assert writer["answered"] + writer["invalid"] + writer["error"] == writer["calls"] == 48
    assert "synthetic:synthetic-responder: 32 units, 48 answers (48 answered, 0 invalid" in said
    # Replayed from the run's call store, every call comes from it: 48 calls, 32 units.
    again = cli.invoke(
        app, ["run", str(study), "--replay", str(out), "--out", str(tmp_path / "again")]
    )
    assert "from cache: 48 calls, 32 units" in " ".join(again.output.split()), again.output


def test_a_twin_call_id_maps_to_its_agents_unit_and_nothing_else_does() -> None:
    """The inverse of ``twin_unit``, as the call store counts units: found after the stage, so
    a persona axis named ``cf`` (``.../cf=a/0/r0/write``) is no twin and a value holding a
    ``/`` is stripped whole."""
    from biasim.simulator.study.counterfactual import twin_unit, work_unit

    agent = "writers/cf=a,race=b/0/r0/write"
    assert work_unit(agent, "write") == agent
    assert work_unit(twin_unit(agent, "Black/African American"), "write") == agent
    assert work_unit(twin_unit(agent, "male"), "write") == agent
    assert work_unit(f"{agent}/format", "write") == f"{agent}/format"
