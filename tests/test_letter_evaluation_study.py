"""The seed-000 letters study (Exp. 3-4): the letters written for it follow the paper's design,
every pair is shown in both orders for the same job, and a synthetic run recovers the declared
strong-letter preference, no gender effect, and counts out-of-range scores."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path

STUDY = builtin_path("bias_transmission_letters")
BIASIM = [sys.executable, "-m", "biasim"]


def _letters() -> list[dict[str, str]]:
    path = STUDY.parent / "data" / "bias_transmission_letters.csv"
    return list(csv.DictReader(path.open(encoding="utf-8", newline="")))


def test_letters_follow_the_papers_strong_weak_design() -> None:
    rows = _letters()
    assert {r["length"] for r in rows} == {"matched", "unmatched"}
    assert len({r["job_title"] for r in rows}) == 3 and len(rows) == 6
    for row in rows:
        strong, weak = row["strong"], row["weak"]
        years = [int(re.search(r"(\w+) years? of", t).group(1) != "one") for t in (strong, weak)]
        assert years == [1, 0]  # more experience
        assert "ranked first" in strong and re.search(r"ranked \d+th", weak)  # better school
        assert strong.endswith("[SIGNATURE]") and weak.endswith("[SIGNATURE]")
        assert not re.search(r"\b(he|she|his|her|Mr|Ms)\b", strong + weak)  # no gender cue
        n_strong, n_weak = len(strong.split()), len(weak.split())
        if row["length"] == "matched":
            assert abs(n_strong - n_weak) <= 0.05 * n_weak
        else:
            assert n_strong > 1.25 * n_weak


def _run(study: Path, out: Path, agents: int) -> subprocess.CompletedProcess[str]:
    options = ["--backend", "synthetic", "--agents", str(agents), "--out", str(out)]
    return subprocess.run(
        [*BIASIM, "run", str(study), *options],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("letters") / "run"
    done = _run(STUDY, out, 30)
    assert done.returncode == 0, done.stderr
    assert "strong hired in" in done.stdout
    return out


def test_every_pair_is_shown_in_both_orders_for_the_same_job(run_dir: Path) -> None:
    results = pd.read_parquet(run_dir / "results.parquet")
    relative = results[results["stage"] == "relative"]
    orders = relative.groupby(["letters", "experiment", "first_is", "second_is"]).size()
    for (letters, experiment, first, second), count in orders.items():
        assert orders[(letters, experiment, second, first)] == count  # the mirror order
    assert set(relative["job_title"]) == {r["job_title"] for r in _letters()}
    # Experiment 4 shows one letter twice: the same strength on both sides.
    exp4 = relative[relative["experiment"] == "exp4"]
    assert (exp4["first"] == exp4["second"]).all()


def test_synthetic_run_recovers_the_declared_truth(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())["analyses"][0]
    relative = {r["experiment"]: r for r in summary["relative"]}
    for experiment, truth in (("exp3", 0.92), ("exp4", 0.5)):  # exp4: no gender effect
        row = relative[experiment]
        se = (truth * (1 - truth) / row["n"]) ** 0.5
        assert abs(row["share"] - truth) < 3.5 * se, (experiment, row["share"])
    assert relative["exp3"]["p_value"] < 0.001
    effects = pd.DataFrame(summary["effects"])
    exp3 = effects[effects["experiment"] == "exp3"]
    assert len(exp3) == 26 and exp3["significant"].all() and (exp3["estimate"] > 0).all()
    assert set(exp3["term"]) == {"strong"} and set(exp3["reference"]) == {"weak"}
    exp4 = effects[effects["experiment"] == "exp4"]
    assert set(exp4["term"]) == {"male"} and exp4["significant"].sum() <= 1
    assert (run_dir / "figures" / "letters_trait_differences.png").stat().st_size > 10_000
    # The synthetic scores are N(82, 8) for strong letters and N(62, 8) for weak ones.
    results = pd.read_parquet(run_dir / "results.parquet")
    scores = results[results["stage"] == "absolute"].groupby("first")["hireability"]
    assert scores.mean()["strong"] == pytest.approx(82, abs=1.5)
    assert scores.mean()["weak"] == pytest.approx(62, abs=1.5)
    assert scores.std()["strong"] == pytest.approx(8, abs=1.0)


def test_scores_outside_the_scale_are_counted_not_clipped(tmp_path: Path) -> None:
    study = tmp_path / "wide.yaml"
    study.write_text(
        f"extends: {STUDY}\n"
        "name: wide\n"
        "roles:\n"
        "  evaluator:\n"
        "    synthetic:\n"
        "      hireability: {by: showing, mean: {}, default_mean: 95, sd: 10, bounds: null}\n"
    )
    out = tmp_path / "run"
    done = _run(study, out, 5)
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    absolute = results[results["stage"] == "absolute"]
    outside = int(((absolute["hireability"] < 1) | (absolute["hireability"] > 100)).sum())
    assert outside > 0
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    counted = sum(r["excluded"] for r in summary["scores_excluded"] if r["trait"] == "hireability")
    assert counted == outside
    assert "scores excluded: " + str(outside) in done.stdout


def test_an_unknown_experiment_in_compared_exits_2(tmp_path: Path) -> None:
    study = tmp_path / "bad.yaml"
    text = STUDY.read_text().replace("      exp4: {share_of", "      exp5: {share_of")
    study.write_text(text)
    (tmp_path / "data").mkdir()
    for name in ("bias_transmission_letters.csv",):
        (tmp_path / "data" / name).write_text((STUDY.parent / "data" / name).read_text())
    done = subprocess.run(
        [*BIASIM, "validate", str(study)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "analyses[0].compared.exp5: no factor level sets experiment=exp5" in done.stderr
