"""End-to-end tests of the design features on the synthetic responder: crossed factors (inline
and from CSV), `when`, `shared_across`, model variants, completion models with a formatter,
waves, literal replicate seeds and name banks."""

from __future__ import annotations

import copy
import csv
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import biasim.simulator.engine.runner as runner_module
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.engine.model import StudyModel
from biasim.simulator.engine.runner import RunOptions, RunOutcome, execute, prepare
from biasim.simulator.study.design import iter_design
from biasim.simulator.study.load import load_study
from tests.paths import ROOT

CHOICE_AB = {"type": "choice", "choices": ["A", "B"]}
TRAITS = ["calm", "bold", "shy", "loud"]
FACTORS: dict[str, dict[str, dict[str, str]]] = {
    "scenario": {
        "flood": {"place": "river town", "target": "A"},
        "fire": {"place": "dry forest", "target": "B"},
    },
    "time": {"day": {"hour": "noon"}, "night": {"hour": "midnight"}},
}
AN2024 = ROOT / "personas" / "data" / "an2024_first_names.csv"


def base_study() -> dict[str, Any]:
    """A one-stage synthetic study: two genders, three agents each."""
    return {
        "name": "features",
        "description": "design feature tests",
        "seed": 5,
        "roles": {
            "decider": {
                "backend": "synthetic",
                "synthetic": {"decision": {"default": {"A": 0.5, "B": 0.5}}},
            }
        },
        "personas": {"axes": {"gender": ["male", "female"]}},
        "stages": [
            {
                "name": "decide",
                "role": "decider",
                "prompt": "You are {{ persona.description }}. Choose.",
                "output": {"decision": CHOICE_AB},
            }
        ],
        "design": {"agents_per_value": 3},
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(study: Path, out: Path) -> RunOutcome:
    return execute(prepare(RunOptions(study=str(study), out=out)))


def calls(out: Path) -> pd.DataFrame:
    """calls.sqlite with the stored request decoded."""
    with sqlite3.connect(out / "calls.sqlite") as conn:
        df = pd.read_sql(
            "SELECT unit_id, stage, role, model, request, text, parsed FROM calls", conn
        )
    df["request"] = df["request"].map(json.loads)
    df["prompt"] = df["request"].map(lambda r: r["messages"][-1]["content"])
    return df


def problems(study: Path) -> list[Problem]:
    with pytest.raises(InputError) as info:
        load_study(study)
    return info.value.problems


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` containing ``needle``."""
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def slot(agent_id: str) -> str:
    """The persona/index/replicate tail of an agent id (the coordinates factors do not change)."""
    return "/".join(agent_id.split("/")[-3:])


# --- factors ---------------------------------------------------------------------------------


def test_crossed_factors_fill_every_cell_once_with_recorded_variables(tmp_path: Path) -> None:
    data = base_study()
    data["stages"][0]["prompt"] = "{{ persona.description }}: {{ place }} at {{ hour }}."
    data["design"].update(factors=FACTORS, record=["place", "hour"])
    out = tmp_path / "run"
    df = run(write(tmp_path / "s.yaml", data), out).results
    assert len(df) == 2 * 2 * 2 * 3 and (df["status"] == "answered").all()
    cells = df.groupby(["scenario", "time", "gender", "agent_index"]).size()
    expected = pd.MultiIndex.from_product(
        [["fire", "flood"], ["day", "night"], ["female", "male"], [0, 1, 2]]
    )
    assert set(cells.index) == set(expected) and (cells == 1).all()
    assert (df["condition"] == "scenario=" + df["scenario"] + ",time=" + df["time"]).all()
    places = {level: v["place"] for level, v in FACTORS["scenario"].items()}
    assert (df["place"] == df["scenario"].map(places)).all()
    assert (df["hour"] == df["time"].map({"day": "noon", "night": "midnight"})).all()
    assert "target" not in df.columns  # only recorded variables become columns
    # Each call's prompt was rendered with its own levels' variables.
    prompts = calls(out).set_index("unit_id")["prompt"]
    for row in df.itertuples():
        assert prompts[row.unit_id].endswith(f": {row.place} at {row.hour}.")


def test_factor_levels_from_a_csv_relative_to_the_study(tmp_path: Path) -> None:
    inline = base_study()
    inline["stages"][0]["prompt"] = "{{ persona.description }}: {{ place }} ({{ target }})."
    inline["design"]["factors"] = FACTORS
    from_csv = copy.deepcopy(inline)
    from_csv["design"]["factors"] = {**FACTORS, "scenario": "levels/scenarios.csv"}
    folder = tmp_path / "study_dir"
    (folder / "levels").mkdir(parents=True)
    (folder / "levels" / "scenarios.csv").write_text(
        "level,place,target\nflood,river town,A\nfire,dry forest,B\n"
    )
    a = load_study(write(tmp_path / "inline.yaml", inline)).config
    b = load_study(write(folder / "s.yaml", from_csv)).config  # cwd is not the study folder
    assert b.design.factors == a.design.factors
    assert list(b.design.factors["scenario"]) == ["flood", "fire"]  # CSV order kept
    assert list(iter_design(b)) == list(iter_design(a))


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("flood,river town,A\nfire,dry forest\n", 3, "2 fields, header has 3"),
        ("fl ood,river town,A\nfire,dry forest,B\n", 2, "not a valid level name"),
        ("flood,river town,A\n\nflood,dry forest,B\n", 4, "repeats"),
    ],
)
def test_broken_factor_csv_names_file_and_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    levels = tmp_path / "scenarios.csv"
    levels.write_text("level,place,target\n" + body)
    data = base_study()
    data["design"]["factors"] = {"scenario": "scenarios.csv"}
    (problem,) = problems(write(tmp_path / "s.yaml", data))
    assert Path(problem.file) == levels
    assert problem.line == line
    assert message in problem.message


# --- when ------------------------------------------------------------------------------------


def test_when_runs_a_stage_for_one_level_and_does_not_fail_later_stages(tmp_path: Path) -> None:
    data = base_study()
    data["design"]["factors"] = {"scenario": FACTORS["scenario"]}
    data["stages"] += [
        {
            "name": "plan",
            "role": "decider",
            "when": "scenario == 'flood'",
            "prompt": "You chose {{ outputs.decide.decision }} by the {{ place }}. Plan.",
            "output": {"decision": CHOICE_AB},
        },
        {
            "name": "debrief",
            "role": "decider",
            "prompt": "You chose {{ outputs.decide.decision }}. Again?",
            "output": {"decision": CHOICE_AB},
        },
    ]
    out = tmp_path / "run"
    df = run(write(tmp_path / "s.yaml", data), out).results
    per_stage = df.groupby(["stage", "scenario"]).size().to_dict()
    assert per_stage == {
        ("decide", "fire"): 6,
        ("decide", "flood"): 6,
        ("plan", "flood"): 6,
        ("debrief", "fire"): 6,
        ("debrief", "flood"): 6,
    }
    # Agents that skipped `plan` still answered `debrief`: skipping is not failing.
    debrief = df[df["stage"] == "debrief"]
    assert (debrief["status"] == "answered").all() and debrief["error"].isna().all()
    stored = calls(out)
    assert sorted(stored.groupby("stage").size().items()) == [
        ("debrief", 12),
        ("decide", 12),
        ("plan", 6),
    ]
    assert stored.loc[stored["stage"] == "plan", "unit_id"].str.startswith("scenario=flood/").all()


def broken_when_study(tmp_path: Path, when: str) -> Path:
    data = base_study()
    data["design"]["factors"] = {"scenario": FACTORS["scenario"]}
    data["stages"].append({"name": "plan", "role": "decider", "when": when, "prompt": "Plan."})
    return write(tmp_path / "s.yaml", data)


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("scenario ==", "expression syntax error"),
        ("no_such_var == 'flood'", "`no_such_var` does not exist"),
    ],
)
def test_broken_when_names_the_stage_field(tmp_path: Path, when: str, message: str) -> None:
    study = broken_when_study(tmp_path, when)
    (problem,) = problems(study)
    assert problem.field == "stages[1].when"
    assert problem.file == str(study)
    assert message in problem.message


def test_when_syntax_error_names_its_line(tmp_path: Path) -> None:
    study = broken_when_study(tmp_path, "scenario ==")
    (problem,) = problems(study)
    assert problem.line == line_of(study, "when:")


def test_when_undefined_variable_names_its_line(tmp_path: Path) -> None:
    study = broken_when_study(tmp_path, "no_such_var == 'flood'")
    (problem,) = problems(study)
    assert problem.line == line_of(study, "when:")


# --- shared_across ---------------------------------------------------------------------------


def shared_study(prompt: str, batch_size: int) -> dict[str, Any]:
    """A persona-writing stage (six agent slots) before a decision in three scenarios."""
    data = base_study()
    data["roles"]["writer"] = {
        "backend": "synthetic",
        "synthetic": {"trait": {"default": {t: 0.25 for t in TRAITS}}},
    }
    data["stages"].insert(
        0,
        {
            "name": "write",
            "role": "writer",
            "prompt": prompt,
            "output": {"trait": {"type": "choice", "choices": TRAITS}},
            "shared_across": ["scenario"],
        },
    )
    data["stages"][1]["prompt"] = "You are {{ outputs.write.trait }}. A {{ hazard }} comes."
    data["design"]["factors"] = {
        "scenario": {lv: {"hazard": lv} for lv in ("flood", "fire", "quake")}
    }
    data["design"]["batch_size"] = batch_size
    return data


@pytest.mark.parametrize("batch_size", [20_000, 5])
def test_shared_stage_is_asked_once_per_agent_slot(tmp_path: Path, batch_size: int) -> None:
    data = shared_study("Describe {{ persona.description }}.", batch_size)
    out = tmp_path / "run"
    outcome = run(write(tmp_path / "s.yaml", data), out)
    stored = calls(out)
    # 2 genders x 3 agents = 6 slots, not 6 x 3 scenarios (waves share through the store).
    assert (stored["stage"] == "write").sum() == 6
    assert (stored["stage"] == "decide").sum() == 18
    assert outcome.summary["calls"]["new"] == 6 + 18
    written = outcome.results[outcome.results["stage"] == "write"]
    assert len(written) == 18 and (written["status"] == "answered").all()
    per_slot = written.groupby(written["agent_id"].map(slot))
    assert (per_slot["trait"].nunique() == 1).all() and len(per_slot) == 6
    assert (per_slot["raw_text"].nunique() == 1).all()
    assert written["trait"].nunique() > 1  # the identity above is not a constant answer


def test_stage_whose_prompt_uses_the_factor_is_not_shared(tmp_path: Path) -> None:
    data = shared_study("Describe {{ persona.description }} facing a {{ hazard }}.", 20_000)
    out = tmp_path / "run"
    run(write(tmp_path / "s.yaml", data), out)
    stored = calls(out)
    assert (stored["stage"] == "write").sum() == 18
    # One prompt per gender and scenario: the hazard is in it, so scenarios cannot share.
    assert stored.loc[stored["stage"] == "write", "prompt"].nunique() == 2 * 3


def test_shared_across_a_non_factor_is_an_input_error(tmp_path: Path) -> None:
    data = shared_study("Describe {{ persona.description }}.", 20_000)
    data["stages"][0]["shared_across"] = ["scenario", "gender"]
    study = write(tmp_path / "s.yaml", data)
    (problem,) = problems(study)
    assert problem.field == "stages[0].shared_across[1]"
    assert "`gender` is not a design factor" in problem.message
    assert problem.line == line_of(study, "- gender")


# --- model variants --------------------------------------------------------------------------


def writer_and_two_models() -> dict[str, Any]:
    """A writer role (no models) whose trait the decider, listing two models, reads."""
    data = base_study()
    data["roles"]["decider"]["models"] = ["m1", {"label": "big", "model": "m2"}]
    data["roles"]["writer"] = {
        "backend": "synthetic",
        "synthetic": {"trait": {"default": {t: 0.25 for t in TRAITS}}},
    }
    data["design"]["agents_per_value"] = 4
    data["stages"].insert(
        0,
        {
            "name": "write",
            "role": "writer",
            "prompt": "Describe {{ persona.description }}.",
            "output": {"trait": {"type": "choice", "choices": TRAITS}},
        },
    )
    data["stages"][1]["prompt"] = "You are {{ outputs.write.trait }}. Choose."
    return data


def test_model_variants_run_the_full_design_and_each_model_writes_its_own(tmp_path: Path) -> None:
    out = tmp_path / "run"
    df = run(write(tmp_path / "s.yaml", writer_and_two_models()), out).results
    assert (df["status"] == "answered").all()
    decide = df[df["stage"] == "decide"]
    assert set(decide["model_label"]) == {"m1", "big"}
    by_label = {"m1": ["m1"], "big": ["m2"]}
    assert decide.groupby("model_label")["model"].unique().map(list).to_dict() == by_label
    for _, group in decide.groupby("model_label"):
        assert sorted(zip(group["gender"], group["agent_index"], strict=True)) == sorted(
            (g, i) for g in ("male", "female") for i in range(4)
        )
    # The writer feeds the decider, so each listed model writes its own agents' traits.
    written = df[df["stage"] == "write"]
    assert written.groupby("model_label")["model"].unique().map(list).to_dict() == by_label
    assert set(written["role"]) == {"writer"}
    stored = calls(out)
    assert stored.groupby(["stage", "model"]).size().to_dict() == {
        ("decide", "m1"): 8,
        ("decide", "m2"): 8,
        ("write", "m1"): 8,
        ("write", "m2"): 8,
    }
    # Every decision read the trait its own model wrote, and the two models wrote differently.
    traits = written.set_index("agent_id")["trait"]
    prompts = stored.set_index("unit_id")["prompt"]
    for row in decide.itertuples():
        assert prompts[row.unit_id] == f"You are {traits[row.agent_id]}. Choose."
    per_slot = written.groupby(written["agent_id"].map(slot))["trait"]
    assert len(per_slot) == 8 and (per_slot.nunique() > 1).any()


def test_a_shared_role_writes_once_for_every_model(tmp_path: Path) -> None:
    data = writer_and_two_models()
    data["roles"]["writer"]["shared"] = True
    out = tmp_path / "run"
    df = run(write(tmp_path / "s.yaml", data), out).results
    stored = calls(out)
    assert stored.groupby("stage").size().to_dict() == {"write": 8, "decide": 16}
    assert set(stored.loc[stored["stage"] == "write", "model"]) == {"synthetic-responder"}
    written = df[df["stage"] == "write"]
    assert len(written) == 16 and set(written["model_label"]) == {"m1", "big"}
    assert set(written["model"]) == {"synthetic-responder"}
    per_slot = written.groupby(written["agent_id"].map(slot))["trait"]
    assert len(per_slot) == 8 and (per_slot.nunique() == 1).all()


def test_a_role_listing_models_cannot_be_shared(tmp_path: Path) -> None:
    data = writer_and_two_models()
    data["roles"]["decider"]["shared"] = True
    study = write(tmp_path / "s.yaml", data)
    (problem,) = problems(study)
    assert problem.field == "roles.decider"
    assert "a role listing `models` cannot be `shared`" in problem.message


def test_roles_listing_different_model_labels_is_an_input_error(tmp_path: Path) -> None:
    data = base_study()
    data["roles"]["decider"]["models"] = ["m1", "m2"]
    data["roles"]["judge"] = {"backend": "synthetic", "models": ["m1", "m3"]}
    study = write(tmp_path / "s.yaml", data)
    found = [p for p in problems(study) if p.field.endswith(".models")]
    assert len(found) == 1
    assert found[0].field == "roles.judge.models"
    assert "must list the same labels" in found[0].message


# --- completion models -----------------------------------------------------------------------


COMPLETIONS = ["I would leave right now.", "I will stay at home."]


def completion_study() -> dict[str, Any]:
    data = base_study()
    data["roles"] = {
        "completer": {
            "backend": "synthetic",
            "structured_output": False,
            "synthetic": {"text": {"default": {t: 0.5 for t in COMPLETIONS}}},
        },
        # Ground truth of the formatter: decides by gender alone, so rows show who parsed them.
        "formatter": {
            "backend": "synthetic",
            "synthetic": {
                "decision": {
                    "by": "gender",
                    "probabilities": {"male": {"A": 1.0}, "female": {"B": 1.0}},
                }
            },
        },
    }
    data["design"]["agents_per_value"] = 5
    data["stages"][0].update(
        role="completer",
        completion={
            "prompt": "You are {{ persona.description }}. Will you leave? Answer:",
            "formatter": "formatter",
            "extract": "Which choice does this state, A or B? {{ text }}",
        },
    )
    return data


def test_completion_model_answers_in_text_and_a_formatter_extracts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    df = run(write(tmp_path / "s.yaml", completion_study()), out).results
    assert len(df) == 10 and (df["status"] == "answered").all()
    assert (df["decision"] == df["gender"].map({"male": "A", "female": "B"})).all()
    assert set(df["raw_text"]) == set(COMPLETIONS)
    stored = calls(out).set_index("unit_id")
    assert len(stored) == 20
    for row in df.itertuples():
        completion = stored.loc[row.unit_id]
        formatted = stored.loc[row.unit_id + "/format"]
        assert completion["role"] == "completer" and formatted["role"] == "formatter"
        assert completion["prompt"].endswith("Will you leave? Answer:")
        assert completion["request"]["schema"] is None
        assert row.raw_text == completion["text"]
        assert formatted["prompt"] == f"Which choice does this state, A or B? {row.raw_text}"
        assert formatted["request"]["schema"] is not None
        assert json.loads(formatted["parsed"]) == {"decision": row.decision}


def test_completion_role_without_completion_section_is_an_input_error(tmp_path: Path) -> None:
    data = completion_study()
    del data["stages"][0]["completion"]
    study = write(tmp_path / "s.yaml", data)
    (problem,) = problems(study)
    assert problem.field == "stages[0].role"
    assert "role `completer`" in problem.message and "completion" in problem.message


# --- waves -----------------------------------------------------------------------------------


def wave_study(batch_size: int) -> dict[str, Any]:
    data = base_study()
    data["personas"]["axes"]["gender"] = ["male", "female", "non-binary"]
    data["design"].update(agents_per_value=20, batch_size=batch_size)
    data["stages"].append(
        {
            "name": "explain",
            "role": "decider",
            "prompt": "You chose {{ outputs.decide.decision }}. Sure?",
            "output": {"decision": CHOICE_AB},
        }
    )
    return data


def test_waves_give_the_same_results_as_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models: list[StudyModel] = []

    class Recorded(StudyModel):
        """Records each step's wave, stage and answered units, as the run saw them."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # Not `steps`: Mesa's Model counts its steps there.
            self.stage_log: list[dict[str, Any]] = []
            models.append(self)

        def step(self) -> None:
            wave, stage = self.wave, self.plans[self.stage_index].name
            self.row_statuses: list[str] = []
            super().step()
            answered = self.row_statuses.count("answered")
            self.stage_log.append({"wave": wave, "stage": stage, "answered": answered})

        def _row(self, *args: Any) -> dict[str, Any]:
            row = super()._row(*args)
            self.row_statuses.append(row["status"])
            return row

    monkeypatch.setattr(runner_module, "StudyModel", Recorded)
    waved_out = tmp_path / "waves"
    waved = run(write(tmp_path / "w.yaml", wave_study(7)), waved_out).results
    whole = run(write(tmp_path / "o.yaml", wave_study(1000)), tmp_path / "one").results
    cols = ["unit_id", "agent_id", "stage", "gender", "decision", "raw_text", "status"]
    a = waved[cols].sort_values("unit_id").reset_index(drop=True)
    b = whole[cols].sort_values("unit_id").reset_index(drop=True)
    assert len(a) == 120
    pd.testing.assert_frame_equal(a, b)
    # Stage 2 saw each agent's own stage-1 answer, also across wave boundaries.
    chosen = waved[waved["stage"] == "decide"].set_index("agent_id")["decision"]
    prompts = calls(waved_out).query("stage == 'explain'")
    for unit, prompt in zip(prompts["unit_id"], prompts["prompt"], strict=True):
        assert prompt == f"You chose {chosen[unit.removesuffix('/explain')]}. Sure?"
    steps = pd.DataFrame(models[0].stage_log)
    waves = math.ceil(60 / 7)
    assert steps["wave"].tolist() == [w for w in range(1, waves + 1) for _ in range(2)]
    assert steps["stage"].tolist() == ["decide", "explain"] * waves
    assert steps["answered"].tolist() == [7] * 2 * (waves - 1) + [60 - 7 * (waves - 1)] * 2
    assert pd.DataFrame(models[1].stage_log)["wave"].max() == 1


# --- replicate seeds -------------------------------------------------------------------------


def test_replicate_seeds_set_replicates_and_are_the_literal_call_seeds(tmp_path: Path) -> None:
    data = base_study()
    data["design"]["replicate_seeds"] = [11, 42, 50]
    study = write(tmp_path / "s.yaml", data)
    assert load_study(study).config.design.replicates == 3
    out = tmp_path / "run"
    df = run(study, out).results
    assert len(df) == 2 * 3 * 3
    assert df.groupby("replicate").size().to_dict() == {0: 6, 1: 6, 2: 6}
    requests = calls(out)["request"]
    seeds = {(r["replicate"], r["seed"]) for r in requests}
    assert seeds == {(0, 11), (1, 42), (2, 50)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert "[11, 42, 50]" in manifest["seeds"]["per_call"]


# --- name banks ------------------------------------------------------------------------------


def test_builtin_name_bank_gives_each_group_its_first_names(tmp_path: Path) -> None:
    data = base_study()
    data["personas"] = {
        "source": "name_bank",
        "name_bank": "an2024",
        "axes": {"race": ["White", "Black", "Hispanic"], "gender": ["female", "male"]},
    }
    df = run(write(tmp_path / "s.yaml", data), tmp_path / "run").results
    assert len(df) == 6 * 3
    with AN2024.open(newline="") as handle:
        bank = list(csv.DictReader(handle))
    for (race, gender), group in df.groupby(["race", "gender"]):
        oracle = [r["name"] for r in bank if r["race"] == race and r["gender"] == gender][:3]
        assert group.sort_values("agent_index")["persona_name"].tolist() == oracle
    assert df.groupby(["race", "gender"]).ngroups == 6


BANK = "name,race,gender\nAnn,White,female\nBob,White,male\nCia,Black,female\n"


def bank_study(tmp_path: Path, axes: dict[str, list[str]]) -> Path:
    (tmp_path / "bank.csv").write_text(BANK)
    data = base_study()
    data["personas"] = {"source": "name_bank", "name_bank": "bank.csv", "axes": axes}
    return write(tmp_path / "s.yaml", data)


def test_bank_lacking_a_needed_value_names_the_bank_field(tmp_path: Path) -> None:
    study = bank_study(tmp_path, {"race": ["White", "Hispanic"], "gender": ["female", "male"]})
    (problem,) = problems(study)
    assert problem.field == "personas.name_bank"
    assert problem.file == str(study) and problem.line == line_of(study, "name_bank:")
    assert "`Hispanic`" in problem.message and "White, Black" in problem.message


def test_bank_lacking_an_axis_column_names_the_column(tmp_path: Path) -> None:
    study = bank_study(tmp_path, {"race": ["White"], "age": ["old"]})
    (problem,) = problems(study)
    assert problem.field == "personas.name_bank"
    assert "age" in problem.message


def test_bank_lacking_a_value_combination_names_the_bank_field(tmp_path: Path) -> None:
    study = bank_study(tmp_path, {"race": ["White", "Black"], "gender": ["female", "male"]})
    (problem,) = problems(study)
    assert "`Black/male`" in problem.message
    assert problem.field == "personas.name_bank"


def test_more_agents_than_a_group_has_names_is_an_input_error(tmp_path: Path) -> None:
    study = bank_study(tmp_path, {"race": ["White"], "gender": ["female", "male"]})
    (problem,) = problems(study)  # three agents per value, one name each
    assert problem.field == "design.agents_per_value"
    assert problem.file == str(study) and problem.line == line_of(study, "agents_per_value:")
    assert "3 agents per persona value, but name bank `bank.csv` has 1 names for" in (
        problem.message
    )
    assert "`personas.repeat_names: true`" in problem.message


def test_declared_name_repetition_reuses_the_names_in_turn(tmp_path: Path) -> None:
    study = bank_study(tmp_path, {"race": ["White"], "gender": ["female", "male"]})
    study.write_text(
        study.read_text().replace(
            "  source: name_bank\n", "  source: name_bank\n  repeat_names: true\n"
        )
    )
    specs = list(iter_design(load_study(study).config))
    names = [(s.persona.key, s.persona.name) for s in specs]
    assert (
        names == [("race=White,gender=female", "Ann")] * 3 + [("race=White,gender=male", "Bob")] * 3
    )
