"""The seed-000 association study (Exp. 1-2): per-call randomisation of names and jobs, bad
input in the pairing section, and a synthetic run that recovers the declared association."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from biasim.personas.namebank import load_name_bank
from biasim.scenarios import builtin_path
from biasim.simulator.study.load import load_study
from biasim.simulator.study.pairing import draw_trial
from tests.paths import SHARED
from tests.study_copies import edited_copy

STUDY = builtin_path("bias_transmission_association")
BIASIM = [sys.executable, "-m", "biasim"]
SEED = SHARED / "seeds" / "000_f0400aa19949a666.txt"


def _pairing():
    return load_study(STUDY).config.stages[0].pairing


def test_job_lists_are_the_papers() -> None:
    rows = list(csv.DictReader(STUDY.parent.joinpath("../data/bias_transmission_jobs.csv").open()))
    by_list = Counter(r["list"] for r in rows)
    assert by_list == {"disparity": 30, "control": 35}
    disparity = [r for r in rows if r["list"] == "disparity"]
    assert Counter(r["dominance"] for r in disparity) == {"female": 10, "male": 10, "parity": 10}
    assert Counter(r["job_status"] for r in disparity) == {"high": 15, "low": 15}
    if SEED.exists():  # every job is named in the paper's appendix A.1 (or Table 5)
        text = " ".join(SEED.read_text().split())
        for row in rows:
            assert row["job"] in text, row["job"]


def test_every_call_shows_one_name_per_gender_in_random_order_and_shuffled_jobs() -> None:
    pairing = _pairing()
    bank = load_name_bank("bias_transmission")
    gender = {name: bank.names_for({"gender": g}) for g in ("female", "male") for name in [g]}
    trials = [draw_trial(pairing, {"job_list": "disparity"}, seed) for seed in range(2000)]
    assert draw_trial(pairing, {"job_list": "disparity"}, 7) == trials[7]  # reproducible
    first = Counter(t.targets[0][1] for t in trials)
    assert 900 < first["female"] < 1100  # the order of the two names is random
    for trial in trials:
        (name_a, value_a), (name_b, value_b) = trial.targets
        assert {value_a, value_b} == {"female", "male"}
        assert name_a in gender[value_a] and name_b in gender[value_b]
        assert len(trial.items) == 30 and len(set(trial.items)) == 30
    assert len({t.items for t in trials}) == len(trials)  # the job order is shuffled
    assert Counter(t.items[0] for t in trials).most_common(1)[0][1] < 130  # ~2000/30 each
    names = Counter(name for t in trials for name, _ in t.targets)
    assert set(names) == set(gender["female"]) | set(gender["male"])
    control = draw_trial(pairing, {"job_list": "control"}, 1)
    assert len(control.items) == 35


def _write(tmp_path: Path, edit) -> Path:
    return edited_copy(STUDY, tmp_path, edit(STUDY.read_text()))


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (
            lambda t: t.replace("job_list: control", "job_list: controls"),
            "design.factors.experiment.exp1_control.job_list",
            "`controls` is not a `list` of the items",
        ),
        (
            lambda t: t.replace("item_column: job", "item_column: occupation"),
            "bias_transmission_jobs.csv:1: occupation",
            "no such column",
        ),
        (
            lambda t: t.replace("values: [female, male]", "values: [female, nonbinary]"),
            "s.yaml:135: stages[0].pairing.targets.name_bank",
            "no name has value `nonbinary`",
        ),
        (
            lambda t: t.replace("category: dominance", "category: prestige"),
            "analyses[0].category",
            "the items file has no column `prestige`",
        ),
    ],
)
def test_bad_pairing_input_exits_2_naming_the_place(tmp_path: Path, edit, where, message) -> None:
    study = _write(tmp_path, edit)
    out = tmp_path / "run"
    done = subprocess.run(
        [*BIASIM, "run", str(study), "--backend", "synthetic", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert where in done.stderr and message in done.stderr, done.stderr
    assert not out.exists()


def test_a_repeated_job_in_the_items_file_is_named_with_its_line(tmp_path: Path) -> None:
    study = _write(tmp_path, lambda t: t)
    jobs = tmp_path / "data" / "bias_transmission_jobs.csv"
    jobs.write_text(jobs.read_text() + "surgeon_2,surgeon,disparity,male,high\n")
    done = subprocess.run(
        [*BIASIM, "validate", str(study)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert f"{jobs}:67: job: `surgeon` repeats" in done.stderr


def test_synthetic_run_recovers_the_declared_association(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [
            *BIASIM,
            "run",
            str(STUDY),
            "--backend",
            "synthetic",
            "--agents",
            "400",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "association: items that deviate from chance" in done.stdout
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 3 * 400 and results["valid"].all()
    # Each call's prompt names the two names it drew and lists its jobs in the drawn order.
    first = results.iloc[0]
    assert set(first["target_values"].split("|")) == {"female", "male"}
    assert first["text"].splitlines()[0].startswith(first["items"].split("|")[0] + " - ")

    items = pd.read_csv(out / "tables" / "association_items.csv")
    declared = _declared()
    exp1 = items[items["experiment"] == "exp1_disparity"].set_index("item")
    covered = sum(
        exp1.loc[job, "ci_low"] <= p <= exp1.loc[job, "ci_high"]
        for job, p in declared["exp1_disparity"].items()
    )
    assert covered >= 26  # 95% intervals: about 28.5 of 30 cover the truth
    control = items[items["experiment"] == "exp1_control"]
    assert control["deviates"].sum() <= 6  # no association declared: false positives only

    categories = pd.read_csv(out / "tables" / "association_categories.csv")
    cat = categories.set_index(["experiment", "dominance"])["share"]
    assert cat[("exp1_disparity", "female")] == pytest.approx(0.912, abs=0.02)
    assert cat[("exp1_disparity", "male")] == pytest.approx(0.030, abs=0.01)
    assert cat[("exp2_disparity", "female")] == pytest.approx(0.709, abs=0.03)

    comparison = pd.read_csv(out / "tables" / "association_comparison.csv").set_index("item")
    truth = declared["exp1_disparity"]["Taxi Driver"] - declared["exp2_disparity"]["Taxi Driver"]
    row = comparison.loc["Taxi Driver"]
    assert row["diff_low"] <= truth <= row["diff_high"]
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "figures" / "association_items.png").stat().st_size > 10_000
    assert summary["analyses"][0]["positive"] == "female"
    # Validity by the value named first (drawn per call), the call the unit (issue 27).
    validity = pd.DataFrame(summary["analyses"][0]["validity"]["first_named"])
    assert set(validity["value"]) == {"female", "male"}
    assert (validity["n_valid"] <= validity["n_rows"]).all()
    assert validity["validity_test"].str.contains("permutation of call labels, unit: call").all()
    shown = done.stdout.split("association: valid answers by first_named")[1]
    assert "exp1_disparity" in shown.split("valid = the answer")[0]


def _declared() -> dict[str, dict[str, float]]:
    """The study's declared share of female names per experiment and job."""
    role = load_study(STUDY).config.roles["associator"]
    out: dict[str, dict[str, float]] = {}
    for key, table in role.synthetic["pairs"].probabilities.items():
        experiment, job = key.split("|")
        out.setdefault(experiment, {})[job] = table["female"]
    return out


def test_supplemental_conditions_show_their_own_targets_and_job_counts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    study = builtin_path("bias_transmission_supplemental")
    options = ["--backend", "synthetic", "--agents", "30", "--out", str(out)]
    done = subprocess.run(
        [*BIASIM, "run", str(study), *options], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    targets = results.groupby("stage")["targets"].agg(lambda t: set("|".join(t).split("|")))
    assert targets["gender_words"] == {"woman", "man"}
    assert targets["white_gender"] == {"White woman", "White man"}
    assert targets["black_gender"] == {"Black woman", "Black man"}
    assert targets["race"] == {"White", "Black"}
    names = load_name_bank("bias_transmission")
    assert targets["promotion"] <= {
        n for g in ("female", "male") for n in names.names_for({"gender": g})
    }
    jobs = results.groupby("stage")["items"].agg(lambda i: i.str.count(r"\|").max() + 1)
    assert jobs["single_job"] == 1 and jobs["promotion"] == 30
    summary = json.loads((out / "summary.json").read_text())["analyses"]
    race = next(a for a in summary if a["name"] == "s7_race")
    assert race["positive"] == "Black"
    # "man" is never read inside "woman": every pairing of the word condition is used.
    words = next(a for a in summary if a["name"] == "s5_gender_words")
    assert {r["outcome"] for r in words["item_status"]} == {"paired"}


def test_answers_without_a_readable_pairing_are_reported_not_a_crash(tmp_path: Path) -> None:
    """A small model's answers pair nothing (seen with the embedded model): the analysis says
    what it lacks and counts the unused lines, and draws no empty figure."""
    out = tmp_path / "run"
    options = ["--backend", "synthetic", "--agents", "2", "--out", str(out)]
    done = subprocess.run(
        [*BIASIM, "run", str(STUDY), *options], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    results["text"] = "Sure! Here is a list of jobs.\nThey are all good jobs."
    results.to_parquet(out / "results.parquet")
    shutil.rmtree(out / "figures")
    done = subprocess.run(
        [*BIASIM, "analyze", str(out), "--accept-edits"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = " ".join(done.stdout.split())
    assert "no answer paired a shown item with exactly one target" in printed
    # The unused answer lines' table: experiment, reason, lines.
    assert re.search(r"exp1_control\W+neither item nor target\W+4\b", printed), printed
    assert not (out / "figures" / "association_items.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["analyses"][0]["items"] == []
