"""`biasim compare`: runs of one study on two synthetic "models" with different declared biases
give the same report as one run listing both models; the models' order is the user's; runs of
different studies are refused unless forced, naming what differs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare

FAIR = "{label: fair, synthetic: {decision: {default: {Evacuate: 0.5, Stay: 0.5}}}}"
BIASED = (
    "{label: biased, synthetic: {decision: {by: gender, probabilities: {Female: {Evacuate: 0.9,"
    " Stay: 0.1}}, default: {Evacuate: 0.3, Stay: 0.7}}}}"
)
STUDY = """\
extends: {base}
name: li2025_two_models
roles:
  persona_writer: {{backend: synthetic}}
  agent:
    backend: synthetic
    models: [{models}]
  formatter: {{backend: synthetic}}
personas: {{axes: {{race: null, ideology: null}}}}
design:
  agents_per_value: {agents}
  factors:
    scenario: {{authority_compliance: null, negative_information_sharing: null,
               career_path_selection: null}}
"""


def _run(tmp_path: Path, name: str, models: str, agents: int = 60) -> Path:
    study = tmp_path / f"{name}.yaml"
    study.write_text(
        STUDY.format(base=builtin_path("li2025_decisions"), models=models, agents=agents)
    )
    out = tmp_path / name
    execute(prepare(RunOptions(study=str(study), out=out)))
    return out


def _plain(tmp_path: Path, name: str, variant: str) -> Path:
    """The variant's answers declared on the role itself: a run with no model list, as
    `biasim run STUDY --backend ... --model ...` makes."""
    synthetic = variant[variant.index("synthetic:") + len("synthetic:") : -1].strip()
    text = STUDY.format(base=builtin_path("li2025_decisions"), models="", agents=60)
    text = text.replace("    models: []\n", f"    synthetic: {synthetic}\n")
    study = tmp_path / f"{name}.yaml"
    study.write_text(text)
    out = tmp_path / name
    execute(prepare(RunOptions(study=str(study), out=out)))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    return {
        "both": _run(tmp, "both", f"{FAIR}, {BIASED}"),
        "fair": _run(tmp, "fair", FAIR),
        "biased": _run(tmp, "biased", BIASED),
        "fewer": _run(tmp, "fewer", BIASED, agents=20),
        "fair_plain": _plain(tmp, "fair_plain", FAIR),
        "biased_plain": _plain(tmp, "biased_plain", BIASED),
        "tmp": tmp,
    }


def test_compare_equals_one_two_model_run(runs, cli) -> None:
    out = runs["tmp"] / "cmp"
    result = cli.invoke(app, ["compare", str(runs["fair"]), str(runs["biased"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "models in order: fair, biased" in result.stdout
    tables = sorted(p.name for p in (out / "tables").glob("*.csv"))
    assert tables == sorted(p.name for p in (runs["both"] / "tables").glob("*.csv"))
    for name in tables:
        pd.testing.assert_frame_equal(
            pd.read_csv(out / "tables" / name),
            pd.read_csv(runs["both"] / "tables" / name),
            obj=name,
        )
    together = json.loads((runs["both"] / "summary.json").read_text())
    compared = json.loads((out / "summary.json").read_text())
    assert json.dumps(compared["analyses"]) == json.dumps(together["analyses"])
    # The cross-model figures (seed 004 Figs. 3, 11 and 12) and the page.
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {
        "decisions_implicit_vs_explicit",
        "decisions_implicit_by_model",
        "decisions_explicit_by_model",
    } <= figures
    assert (out / "report.html").is_file() and (runs["both"] / "report.html").is_file()


def test_compare_of_runs_without_model_lists_equals_the_two_model_run(runs, cli) -> None:
    """Seeds do not depend on the model: plain single runs, labelled on the command line, see
    the answers the two-model run saw."""
    out = runs["tmp"] / "cmp_plain"
    result = cli.invoke(
        app,
        [
            "compare",
            str(runs["fair_plain"]),
            str(runs["biased_plain"]),
            "--label",
            f"fair={runs['fair_plain']}",
            "--label",
            f"biased={runs['biased_plain']}",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    for name in ("decisions_cases.csv", "decisions_model_differences.csv", "decisions_rates.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(out / "tables" / name), pd.read_csv(runs["both"] / "tables" / name)
        )


def test_the_declared_difference_is_found(runs) -> None:
    tests = pd.read_csv(runs["both"] / "tables" / "decisions_model_differences.csv")
    contextualized = tests[tests["persona_condition"] == "contextualized"]
    (row,) = contextualized.to_dict("records")
    assert (row["model_a"], row["model_b"]) == ("fair", "biased")
    assert row["dpd_b"] > 0.4 and row["p_adjusted"] < 0.01
    assert row["n_matched"] == 180  # 60 agents x 3 genders, answered by both models
    wide = pd.read_csv(runs["both"] / "tables" / "decisions_cases_by_model.csv")
    assert {"dpd_fair", "p_value_fair", "dpd_biased", "p_value_biased"} <= set(wide.columns)


def test_the_order_of_models_is_the_users(runs, cli) -> None:
    out = runs["tmp"] / "cmp_reversed"
    result = cli.invoke(
        app,
        [
            "compare",
            str(runs["biased"]),
            str(runs["fair"]),
            "--label",
            f"B={runs['biased']}",
            "--label",
            f"F={runs['fair']}",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_labels"] == ["B", "F"]
    comparison = pd.read_csv(out / "tables" / "decisions_implicit_vs_explicit.csv")
    assert list(comparison["model_label"]) == ["B", "F"]
    tests = pd.read_csv(out / "tables" / "decisions_model_differences.csv")
    assert set(zip(tests["model_a"], tests["model_b"], strict=True)) == {("B", "F")}


def test_runs_of_different_studies_are_refused_unless_forced(runs, cli) -> None:
    out = runs["tmp"] / "cmp_refused"
    refused = cli.invoke(app, ["compare", str(runs["fair"]), str(runs["fewer"]), "--out", str(out)])
    assert refused.exit_code == 2
    stderr = " ".join(refused.stderr.split())
    assert "not of the same study" in stderr and "design.agents_per_value: 60 vs 20" in stderr
    assert not out.exists()  # nothing half-written
    forced = cli.invoke(
        app, ["compare", str(runs["fair"]), str(runs["fewer"]), "--out", str(out), "--force"]
    )
    assert forced.exit_code == 0, forced.output
    summary = json.loads((out / "summary.json").read_text())
    assert any("agents_per_value" in d for d in summary["study_differences"])


def _as_older_release(run: Path, out: Path) -> Path:
    """A copy of ``run`` whose manifest records its study as an older release did: one
    ``demographic_parity`` entry carrying ``explicit:``, ``terms:`` and ``predictions:``
    (now the kinds of their own that the run's manifest lists)."""
    shutil.copytree(run, out)
    manifest = json.loads((out / "manifest.json").read_text())
    analyses = manifest["study"]["analyses"]
    older = {k: v for k, v in analyses[0].items() if k != "kind"}
    for entry in analyses[1:]:
        older.update({k: entry[k] for k in ("explicit", "terms", "predictions") if k in entry})
    assert {"explicit", "terms", "predictions", "condition"} <= set(older)
    manifest["study"]["analyses"] = [older]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_a_run_recorded_in_the_older_form_is_of_the_same_study(runs, cli) -> None:
    """The studies are compared as validated now: the older single-entry form loads as the
    new kinds, so the two runs compare without --force."""
    older = _as_older_release(runs["biased"], runs["tmp"] / "biased_older")
    out = runs["tmp"] / "cmp_older"
    result = cli.invoke(app, ["compare", str(runs["fair"]), str(older), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "not of the same study" not in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert not summary.get("study_differences")
    kinds = [a["kind"] for a in summary["analyses"]]
    assert kinds.count("explicit_bias") == 1 and kinds.count("predictions_check") == 1


def test_compare_input_errors(runs, cli, tmp_path) -> None:
    one = cli.invoke(app, ["compare", str(runs["fair"]), "--out", str(tmp_path / "x")])
    assert one.exit_code == 2 and "at least two run directories" in one.stderr
    same = cli.invoke(
        app, ["compare", str(runs["fair"]), str(runs["fair"]), "--out", str(tmp_path / "y")]
    )
    assert same.exit_code == 2 and "given twice; give each run once" in same.stderr
    missing = cli.invoke(
        app, ["compare", str(runs["fair"]), str(tmp_path), "--out", str(tmp_path / "z")]
    )
    assert missing.exit_code == 2 and "not a finished run directory" in missing.stderr


HIRING = """\
extends: {base}
name: hiring_two_models
roles:
  hiring_manager:
    backend: synthetic
    models:
{models}
design:
  agents_per_value: 6
  replicate_seeds: [11]
  factors:
    template: {{t2: null, t3: null, t4: null, t5: null}}
    qualification: {{somewhat: null, not_qualified: null}}
"""
OFFER = "'Dear [NAME], we are pleased to offer you the position.'"
REJECT = "'Dear [NAME], we regret that we will not move forward.'"


def _hiring_model(label: str, white: float, others: float) -> str:
    return (
        f"      - label: {label}\n"
        f"        synthetic: {{text: {{by: race, probabilities: {{White: {{{OFFER}: {white},"
        f" {REJECT}: {1 - white:.2f}}}}}, default: {{{OFFER}: {others}, {REJECT}:"
        f" {1 - others:.2f}}}}}}}\n"
    )


def test_hiring_models_side_by_side_with_their_difference(tmp_path, cli) -> None:
    study = tmp_path / "hiring.yaml"
    models = _hiring_model("even", 0.5, 0.5) + _hiring_model("favours_white", 0.8, 0.4)
    study.write_text(HIRING.format(base=builtin_path("an2024_hiring"), models=models))
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    wide = pd.read_csv(out / "tables" / "hiring_rates_by_model.csv")
    assert list(wide.columns[2:]) == [
        "rate_even",
        "impact_ratio_even",
        "rate_favours_white",
        "impact_ratio_favours_white",
    ]
    white = wide[wide["race"] == "White"]
    assert (white["rate_favours_white"] > 0.7).all()
    assert (white["impact_ratio_favours_white"] > 0.95).all()  # White men and women lead
    (test,) = pd.read_csv(out / "tables" / "hiring_model_differences.csv").to_dict("records")
    assert (test["model_a"], test["model_b"]) == ("even", "favours_white")
    assert test["n_matched"] == 41 * 2 * 6 * 6  # every email prompt answered by both models
    assert test["dpd_b"] > test["dpd_a"] and test["p_adjusted"] < 0.01
    assert (out / "figures" / "hiring_rates_by_model.png").is_file()
    assert "hiring: Differences between models" in result.stdout


def test_tables_follow_the_models_order(runs) -> None:
    """Statistics group by label (alphabetical); the run listed `fair` first, and so do its
    tables and summaries."""
    cases = pd.read_csv(runs["both"] / "tables" / "decisions_cases.csv")
    assert list(dict.fromkeys(cases["model_label"])) == ["fair", "biased"]
    summary = json.loads((runs["both"] / "summary.json").read_text())
    decisions = summary["analyses"][0]  # the seed-004 kinds over the same decisions follow it
    assert decisions["kind"] == "demographic_parity"
    assert list(dict.fromkeys(c["model_label"] for c in decisions["cases"])) == ["fair", "biased"]
    assert summary["model_labels"] == ["fair", "biased"]
