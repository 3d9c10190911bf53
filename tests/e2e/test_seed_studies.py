"""The built-in seed-004 and seed-001 studies end to end: design, run, tables, figures, and
`biasim analyze` (on a run directory and on an external decisions CSV)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.paths import ROOT

LI2025 = builtin_path("li2025_decisions")
AN2024 = builtin_path("an2024_hiring")


def run(study: Path, out: Path, **options) -> pd.DataFrame:
    execute(prepare(RunOptions(study=str(study), out=out, **options)))
    return pd.read_parquet(out / "results.parquet")


def test_li2025_grid_runs_every_condition_and_writes_tables_and_figures(tmp_path, cli) -> None:
    out = tmp_path / "run"
    results = run(LI2025, out, backend="synthetic", agents=2)
    decide = results[results["stage"] == "decide"]
    # 4 scenarios x 14 attribute values x 2 agents, under each of the three persona conditions.
    assert decide.groupby("persona_condition").size().to_dict() == {
        "no_persona": 112,
        "non_contextualized": 112,
        "contextualized": 112,
    }
    # Each scenario constrains the decision to its own two options.
    for scenario, options in {
        "emergency_response": {"Evacuate", "Stay"},
        "career_path_selection": {"Astronaut", "Plumber"},
    }.items():
        assert set(decide.loc[decide["scenario"] == scenario, "decision"]) <= options
    # Non-contextualized personas are written once per agent and reused in all four scenarios.
    persona = results[
        (results["stage"] == "persona") & (results["persona_condition"] == "non_contextualized")
    ]
    assert (
        persona.groupby(["gender", "race", "ideology", "agent_index"], dropna=False)["persona"]
        .nunique()
        .max()
        == 1
    )
    explicit = results[results["stage"].str.startswith("explicit_")]
    assert len(explicit) == 4 * 14 * 2  # as many trials as agents

    cases = pd.read_csv(out / "tables" / "decisions_cases.csv")
    assert len(cases) == 3 * 4 * 3  # conditions x scenarios x persona groups
    assert {"dpd", "threshold", "chance_dpd", "p_value", "significant", "n_excluded"} <= set(
        cases.columns
    )
    comparison = pd.read_csv(out / "tables" / "decisions_implicit_vs_explicit.csv")
    assert (
        comparison.loc[0, "n_cases_implicit"] == 12 and comparison.loc[0, "n_cases_explicit"] == 12
    )
    alignment = pd.read_csv(out / "tables" / "decisions_alignment.csv")
    assert len(alignment) == 6 * 3  # Table 3's predictions under each persona condition
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert any("shares" in f and "contextualized" in f for f in figures)
    assert any("dpd_by_condition" in f for f in figures)
    assert "decisions_implicit_vs_explicit.png" in figures
    assert imread(out / "figures" / "decisions_implicit_vs_explicit.png").shape[2] in (3, 4)

    # `biasim analyze` regenerates the same numbers without any call.
    (out / "tables" / "decisions_cases.csv").unlink()
    result = cli.invoke(app, ["analyze", str(out)])
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_csv(out / "tables" / "decisions_cases.csv"), cases)


HIRING_SMALL = """\
extends: {base}
name: hiring_small
roles:
  hiring_manager:
    backend: synthetic
    synthetic:
      text:
        by: race
        probabilities:
          White: {{{offer}: 0.75, {reject}: 0.25}}
        default: {{{offer}: 0.45, {reject}: 0.55}}
design:
  agents_per_value: 12
  replicate_seeds: [11]
  factors:
    template: {{t2: null, t3: null, t4: null, t5: null}}
    qualification: {{somewhat: null, not_qualified: null}}
"""


def test_an2024_hiring_recovers_an_injected_effect(tmp_path, cli) -> None:
    study = tmp_path / "hiring.yaml"
    study.write_text(
        HIRING_SMALL.format(
            base=AN2024,
            offer='"Dear [NAME], we are pleased to offer you the position."',
            reject='"Dear [NAME], we regret to inform you that we will not be moving forward."',
        )
    )
    out = tmp_path / "run"
    results = run(study, out)
    assert len(results) == 41 * 2 * 6 * 12  # roles x qualification levels x groups x names
    # Names come from the bank and are never shown to a classifier unredacted.
    assert set(results.loc[results["race"] == "Black", "persona_name"]) <= set(
        pd.read_csv(ROOT / "personas" / "data" / "an2024_first_names.csv").query("race == 'Black'")[
            "name"
        ]
    )
    tests = pd.read_csv(next((out / "tables").glob("hiring_*_permutation.csv")))
    white = tests[tests["race"] == "White"]
    others = tests[tests["race"] != "White"]
    assert (white["rate"] > 0.65).all() and (white["p_greater"] < 0.01).all()
    assert (others["rate"] < 0.55).all() and (others["p_greater"] > 0.5).all()
    by_qualification = pd.read_csv(
        next((out / "tables").glob("hiring_*_by_qualification.csv")), keep_default_na=False
    )
    assert set(by_qualification["qualification"]) == {"not_stated", "highly"}
    # Each cell is marked by its own within-row permutation test (Holm over the table): White
    # is far above every row's average, so both its cells carry "p < 0.01, above".
    assert (by_qualification["White female sig"] == "†+").all()
    assert (by_qualification["White male sig"] == "†+").all()
    row_tests = pd.read_csv(next((out / "tables").glob("hiring_*_by_qualification_tests.csv")))
    assert len(row_tests) == 2 * 6 and (row_tests["p_adjusted"] >= row_tests["p_two_sided"]).all()
    validity = pd.read_csv(out / "tables" / "hiring_validity.csv")
    assert validity["n"].sum() == len(results)
    # Table 1: the 7 roles, then all 41, each cell marked by the calibrated joint test and,
    # beside it, by the paper's test (per-role email-level tests, Fisher over the roles).
    table1 = pd.read_csv(next((out / "tables").glob("hiring_*_table1.csv")), keep_default_na=False)
    assert table1["rows"].tolist() == ["subset7", "all"]
    assert (table1["White male sig (paper's test)"] == "†+").all()
    both = pd.read_csv(next((out / "tables").glob("hiring_*_table1_tests.csv")))
    assert len(both) == 2 * 6 and (both["n_strata"].to_numpy() == [7] * 6 + [41] * 6).all()
    # The paper's test treats each name's 41 x 2 emails as independent: its p-values are far
    # smaller than the calibrated test's for the same groups.
    assert (both["p_papers_test"] < both["p_calibrated"]).sum() >= 10
    # The printed report: impact ratios 0.45 / 0.75 = 0.6 are flagged below four-fifths.
    printed = cli.invoke(app, ["analyze", str(out)])
    assert printed.exit_code == 0, printed.output
    ratios = printed.output.split("Impact ratios (", 1)[1].split("└", 1)[0]
    rows = [line.strip("│").split("│") for line in ratios.splitlines() if line.startswith("│")]
    below = {(race.strip(), gender.strip()): flag.strip() for race, gender, _, flag, *_ in rows}
    assert len(below) == 6 and {g for (race, g) in below} == {"female", "male"}
    assert all((flag == "no") == (race == "White") for (race, _), flag in below.items())
    flat = " ".join(printed.output.split())
    assert "marked by the calibrated and the paper's test" in flat and "Fisher's method" in flat
    # Table 2's rows are stated as not the paper's, with this run's roles per row.
    assert "imply 2 / 1 / 10 / 7 / 5 / 16 roles" in flat
    assert "Bachelor's degree 12" in flat and "High school diploma or equivalent 11" in flat


def test_an2024_svm_classifier_without_a_training_file_uses_the_starter_set(tmp_path) -> None:
    """`classifier: svm` without `training_csv` trains on the shipped starter labels: the
    offers are labelled accept and the rejections reject, in the proportions written."""
    study = tmp_path / "svm.yaml"
    study.write_text(
        HIRING_SMALL.format(
            base=AN2024,
            offer='"Dear [NAME], we are pleased to offer you the position."',
            reject='"Dear [NAME], we regret to inform you that we will not be moving forward."',
        ).replace("agents_per_value: 12", "agents_per_value: 2")
        + "analyses:\n  - kind: acceptance\n    name: hiring\n    stage: write\n"
        "    field: text\n    classifier: svm\n    groups: [race]\n    n_permutations: 100\n"
    )
    out = tmp_path / "run"
    results = run(study, out)
    outcomes = pd.read_csv(out / "tables" / "hiring_outcomes.csv")
    assert len(outcomes) == len(results) == 41 * 2 * 6 * 2
    text = outcomes["unit_id"].map(results.set_index("unit_id")["text"])
    offered = text.str.contains("pleased to offer")
    assert 0 < offered.mean() < 1
    assert (outcomes.loc[offered, "outcome"] == "accept").all()
    assert (outcomes.loc[~offered, "outcome"] == "reject").all()


def test_an2024_judge_labels_replace_the_rules(tmp_path, cli) -> None:
    """With the judge study the outcome comes from the judge stage: the emails here are offers
    and rejections in equal shares for every group, but the (synthetic) judge labels every
    White applicant's email accept and every other one reject, and the analysis must follow
    the judge. The judge never sees the name."""
    study = tmp_path / "judged.yaml"
    study.write_text(
        f"extends: {builtin_path('an2024_hiring_judge')}\n"
        "name: judged_small\n"
        "roles:\n"
        "  hiring_manager:\n    backend: synthetic\n"
        "    synthetic: {text: {default: {'We are pleased to offer you the job.': 0.5,\n"
        "                                 'We regret that we cannot offer you the job.': 0.5}}}\n"
        "  judge:\n    backend: synthetic\n"
        "    synthetic:\n      outcome:\n        by: race\n"
        "        probabilities: {White: {accept: 1}}\n"
        "        default: {reject: 1}\n"
        "design:\n  agents_per_value: 8\n  replicate_seeds: [11]\n  factors:\n"
        "    template: {t2: null, t3: null, t4: null, t5: null}\n"
        "    qualification: {highly: null, somewhat: null, not_qualified: null}\n"
    )
    validated = cli.invoke(app, ["validate", str(study)])
    assert validated.exit_code == 0, validated.output
    out = tmp_path / "run"
    results = run(study, out)
    assert results.groupby("stage").size().to_dict() == {"write": 41 * 48, "judge": 41 * 48}
    outcomes = pd.read_csv(out / "tables" / "hiring_outcomes.csv")
    accepted = (outcomes["outcome"] == "accept").groupby(outcomes["race"]).mean()
    assert accepted.to_dict() == {"Black": 0.0, "Hispanic": 0.0, "White": 1.0}
    written = results[results["stage"] == "write"]["text"]
    assert 0.4 < written.str.contains("pleased").mean() < 0.6  # what the rules would have seen
    # The judge-vs-rules table: judge labels in rows, the rules' in columns.
    versus = pd.read_csv(out / "tables" / "hiring_judge_vs_rules.csv").set_index("judge")
    assert versus.to_numpy().sum() == 41 * 48
    assert versus.loc["accept", "accept"] > 0 and versus.loc["accept", "reject"] > 0
    assert versus.loc["reject", "invalid"] == 0  # every text here is a clear offer or rejection
    with sqlite3.connect(out / "calls.sqlite") as db:
        prompts = [r[0] for r in db.execute("SELECT request FROM calls WHERE stage = 'judge'")]
    names = set(results["persona_name"])
    assert prompts and all("[NAME]" in p for p in prompts)
    assert not any(f"Dear {n}," in p for p in prompts for n in names)


def test_analyze_external_decisions_csv(tmp_path, cli) -> None:
    rows = []
    for i in range(400):
        group = ("A", "B")[i % 2]
        rows.append(
            {
                "applicant": f"n{i % 40}",
                "grp": group,
                "job": ("x", "y")[i % 4 // 2],
                "decision": "yes" if (i % 5 < (4 if group == "A" else 2)) else "no",
            }
        )
    path = tmp_path / "decisions.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = tmp_path / "tables"
    result = cli.invoke(
        app,
        [
            "analyze",
            "--decisions",
            str(path),
            "--group-cols",
            "grp",
            "--outcome-col",
            "decision",
            "--positive",
            "yes",
            "--stratum-col",
            "job",
            "--unit-col",
            "applicant",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rates = pd.read_csv(out / "rates.csv").set_index("grp")
    assert rates.loc["A", "rate"] == pytest.approx(0.8) and rates.loc["B", "rate"] == pytest.approx(
        0.4
    )
    assert {"cmh.csv", "impact_ratios.csv", "permutation.csv", "combined.csv"} <= {
        p.name for p in out.iterdir()
    }

    bad = cli.invoke(
        app,
        ["analyze", "--decisions", str(path), "--group-cols", "group", "--outcome-col", "decision"],
    )
    assert bad.exit_code == 2
    assert "decisions.csv:1: group: no such column" in bad.stderr


@pytest.mark.model
def test_li2025_contextualized_persona_case_on_the_embedded_model(tmp_path) -> None:
    study = tmp_path / "one_case.yaml"
    study.write_text(
        f"extends: {LI2025}\n"
        "name: li2025_one_case\n"
        "roles: {persona_writer: {max_tokens: 96}, agent: {max_tokens: 96}}\n"
        "personas: {axes: {race: null, ideology: null}}\n"
        "design:\n  factors:\n"
        "    scenario: {authority_compliance: null, negative_information_sharing: null,\n"
        "               career_path_selection: null}\n"
        "    persona_condition: {no_persona: null, non_contextualized: null, explicit: null}\n"
    )
    out = tmp_path / "run"
    results = run(study, out, agents=1)
    assert results.groupby("stage").size().to_dict() == {"persona": 3, "decide": 3}
    assert set(results["model"]) == {"SmolLM2-135M-Instruct.Q4_1"}
    decided = results[(results["stage"] == "decide") & results["valid"]]
    assert set(decided["decision"]) <= {"Evacuate", "Stay"}
    cases = pd.read_csv(out / "tables" / "decisions_cases.csv")
    assert len(cases) == 1 and cases.loc[0, "n_valid"] == len(decided)


@pytest.mark.model
def test_an2024_emails_written_and_judged_by_the_embedded_model(tmp_path) -> None:
    """A small end-to-end run of the hiring study on SmolLM2: one template, one role, one
    qualification level, one name per group; the same model then judges each redacted email."""
    study = tmp_path / "hiring_model.yaml"
    study.write_text(
        f"extends: {builtin_path('an2024_hiring_judge')}\n"
        "name: hiring_on_smollm2\n"
        "roles: {hiring_manager: {max_tokens: 96}}\n"
        "design:\n  agents_per_value: 1\n  replicate_seeds: [11]\n  factors:\n"
        "    template: {t2: null, t3: null, t4: null, t5: null}\n"
        '    job: {cto: {label: CTO, winobias_gender: none, bls_education: "Bachelor\'s degree",\n'
        "                subset7: 'true'}}\n"
        "    qualification: {not_stated: null, somewhat: null, highly: null}\n"
    )
    out = tmp_path / "run"
    results = run(study, out)
    assert results.groupby("stage").size().to_dict() == {"write": 6, "judge": 6}
    assert set(results["model"]) == {"SmolLM2-135M-Instruct.Q4_1"}
    emails = results[results["stage"] == "write"]
    assert (emails["text"].str.len() > 0).all()
    judged = results[results["stage"] == "judge"]
    assert set(judged.loc[judged["valid"], "outcome"]) <= {"accept", "reject", "invalid"}
    outcomes = pd.read_csv(out / "tables" / "hiring_outcomes.csv")
    assert len(outcomes) == 6 and set(outcomes["outcome"]) <= {"accept", "reject", "invalid"}
    valid = outcomes[outcomes["outcome"] != "invalid"]
    if len(valid):
        by_qualification = pd.read_csv(next((out / "tables").glob("hiring_*_by_qualification.csv")))
        assert set(by_qualification["qualification"]) == {"not_qualified"}
        assert by_qualification["n"].sum() == len(valid)
    with sqlite3.connect(out / "calls.sqlite") as db:
        prompts = [r[0] for r in db.execute("SELECT request FROM calls WHERE stage = 'judge'")]
    assert len(prompts) == 6
    for name in set(emails["persona_name"]):
        assert not any(f" {name} " in p or f" {name}," in p for p in prompts)


@pytest.mark.model
def test_li2025_completion_model_path_on_the_embedded_model(tmp_path) -> None:
    """The agent role plays a completion model (no structured output): it answers appendix C's
    free-text prompt, and the formatter role extracts {decision, rationale} from that text."""
    study = tmp_path / "completion.yaml"
    study.write_text(
        f"extends: {LI2025}\n"
        "name: li2025_completion\n"
        "roles:\n"
        "  persona_writer: {max_tokens: 48}\n"
        "  agent: {structured_output: false, max_tokens: 64}\n"
        "  formatter: {max_tokens: 96}\n"
        "personas: {axes: {race: null, ideology: null}}\n"
        "design:\n  factors:\n"
        "    scenario: {authority_compliance: null, negative_information_sharing: null,\n"
        "               career_path_selection: null}\n"
        "    persona_condition: {non_contextualized: null, contextualized: null,\n"
        "                        explicit: null}\n"
    )
    out = tmp_path / "run"
    results = run(study, out, agents=1)
    decide = results[results["stage"] == "decide"]
    assert len(decide) == 3
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute(
            "SELECT unit_id, request, status FROM calls WHERE stage = 'decide' AND reask = 0"
        ).fetchall()
    free = [json.loads(r[1]) for r in rows if not r[0].endswith("/format")]
    formatted = [json.loads(r[1]) for r in rows if r[0].endswith("/format")]
    answered_free = [r for r in rows if not r[0].endswith("/format") and r[2] == "answered"]
    assert len(free) == 3 and all(req["schema"] is None for req in free)
    # Appendix C's completion prompt, then its extraction prompt quoting the completion.
    question = "Do you choose to evacuate or stay"
    assert all(question in req["messages"][-1]["content"] for req in free)
    assert len(answered_free) == 3 and len(formatted) == 3  # free text is always an answer
    assert all(req["schema"] is not None for req in formatted)
    assert all(
        "skilled at extracting structured information" in req["messages"][-1]["content"]
        for req in formatted
    )
    valid = decide[decide["valid"]]
    assert set(valid["decision"]) <= {"Evacuate", "Stay"}
