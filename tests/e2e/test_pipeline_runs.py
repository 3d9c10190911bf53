"""Agents reading each other's work, end to end on the synthetic responder: the declared
per-stage disparities are recovered, counterfactual readings give McNemar's test as statsmodels
computes it, position effects are found, failed documents are counted, and a run killed in the
middle of a pool stage resumes with the same evaluations and nothing lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.contingency_tables import mcnemar

from biasim.simulator.cli import app
from tests import pipeline_studies
from tests.conftest import answered_calls

BIASIM = [sys.executable, "-m", "biasim"]


def run(
    cli, tmp_path: Path, data: dict, name: str = "run", *args: str, exit_code: int = 0
) -> tuple[Path, str]:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = cli.invoke(app, ["run", str(path), "--out", str(out), *args])
    assert result.exit_code == exit_code, result.output
    return out, result.stdout


def inclusion(weights: tuple[float, ...], k: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo inclusion probabilities of picking k by weight without replacement (an
    oracle independent of the responder's Gumbel draw: successive sampling)."""
    draws = 40_000
    left = np.tile(np.array(weights, dtype=float), (draws, 1))
    picked = np.zeros(len(weights))
    rows = np.arange(draws)
    for _ in range(k):
        cumulative = np.cumsum(left / left.sum(axis=1, keepdims=True), axis=1)
        index = (cumulative < rng.random((draws, 1))).sum(axis=1).clip(max=len(weights) - 1)
        np.add.at(picked, index, 1)
        left[rows, index] = 0.0
    return picked / draws


def expected_rates(results: pd.DataFrame, stage: str, axis: str, weights: dict) -> pd.Series:
    """Each group's expected selection rate in the pools the run formed."""
    authors = results[results["stage"] == "apply"].set_index("unit_id")[axis]
    rng = np.random.default_rng(0)
    cache: dict[tuple, np.ndarray] = {}
    totals: dict[str, list[float]] = {}
    for row in results[results["stage"] == stage].itertuples():
        groups = [authors[u] for u in row.reads.split("|")]
        k = len(row.selected.split("|"))
        key = (tuple(weights.get(g, 1.0) for g in groups), k)
        if key not in cache:
            cache[key] = inclusion(*key, rng)
        for g, p in zip(groups, cache[key], strict=True):
            totals.setdefault(g, []).append(p)
    return pd.Series({g: float(np.mean(p)) for g, p in totals.items()})


@pytest.mark.slow
def test_declared_stage_disparities_are_recovered_and_compound(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["design"]["agents_per_value"] = 96  # 768 applicants, 96 pools of 8
    data["personas"]["repeat_names"] = True  # 96 per group from the bank's 50
    out, stdout = run(cli, tmp_path, data)
    summary = json.loads((out / "summary.json").read_text())
    results = pd.read_parquet(out / "results.parquet")
    section = summary["analyses"][0]
    assert section["applications"] == 768 and section["exclusions"] == []
    for stage, axis, weights in (
        ("screen", "race", {"White": 2.0}),
        ("offer", "gender", {"male": 2.0}),
    ):
        rows = pd.DataFrame(section["by_group"][axis]["stages"])
        rows = rows[rows["stage"] == stage].set_index("value")
        expected = expected_rates(results, stage, axis, weights)
        for value, row in rows.iterrows():
            # Pools pick exactly k, so group counts are negatively correlated: the binomial
            # standard error is conservative.
            se = np.sqrt(expected[value] * (1 - expected[value]) / row["entered"])
            assert abs(row["rate"] - expected[value]) < 3 * se, (stage, value)
        assert rows["p_adjusted"].iloc[0] < 0.01, stage  # the declared disparity is found
    # Gender plays no part in screening, race none in the offer: ratios near 1 there.
    race = pd.DataFrame(section["by_group"]["race"]["compounding"]).set_index("value")
    assert race.loc["Black", "ratio_screen"] < 0.75 and race.loc["White", "end_to_end_ratio"] == 1
    for record in section["by_group"]["race"]["compounding"]:
        assert record["identity_holds"]
        product = record["ratio_screen"] * record["ratio_offer"]
        assert product == pytest.approx(record["end_to_end_ratio"], rel=1e-12)
    # The candidates entering the offer are exactly those the screen advanced.
    screen = pd.DataFrame(section["by_group"]["gender"]["stages"])
    assert screen[screen["stage"] == "screen"]["advanced"].sum() == 96 * 3
    assert screen[screen["stage"] == "offer"]["entered"].sum() == 96 * 3
    assert "screen x offer = end-to-end, exactly" in stdout
    assert section["clusters"] == 96 and "Small samples" not in stdout  # 96 pools, not few
    assert (out / "figures" / "pipeline_funnel_race.png").stat().st_size > 10_000
    html = (out / "report.html").read_text()
    assert "end-to-end impact ratio by race, decomposed" in html


def test_every_evaluation_is_traceable_to_the_documents_it_read(tmp_path: Path, cli) -> None:
    out, _ = run(cli, tmp_path, pipeline_studies.study())
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"]
    screen = results[results["stage"] == "screen"]
    offer = results[results["stage"] == "offer"]
    assert len(letters) == 64 and len(screen) == 8 and len(offer) == 8
    shown = [u for reads in screen["reads"] for u in reads.split("|")]
    assert sorted(shown) == sorted(letters["unit_id"])  # each letter in one pool
    names = dict(zip(letters["unit_id"], letters["persona_name"], strict=True))
    for row in screen.itertuples():
        assert row.shown.split("|") == [names[u] for u in row.reads.split("|")]
        assert sorted(row.selected.split("|")) == row.advanced.split("|")
        assert row.job in ("nurse", "clerk")  # the pool's shared job is recorded
    shortlisted = {
        row.reads.split("|")[int(label) - 1]
        for row in screen.itertuples()
        for label in row.advanced.split("|")
    }
    offered = {u for reads in offer["reads"] for u in reads.split("|")}
    assert offered == shortlisted  # the manager reads exactly the shortlists
    pools = dict(zip(screen["evaluation"], screen["reads"], strict=True))
    for row in offer.itertuples():
        assert set(row.reads.split("|")) <= set(pools[row.evaluation].split("|"))
    # Two screeners share the pools in turn.
    assert screen["agent_id"].nunique() == 2


def test_documents_that_were_not_written_are_excluded_and_counted(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["roles"]["applicant"]["options"] = {"fail_rate": 0.1}
    out, _ = run(cli, tmp_path, data)
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    results = pd.read_parquet(out / "results.parquet")
    skipped = int((results[results["stage"] == "apply"]["status"] == "error").sum())
    assert skipped > 0
    assert summary["documents_failed"] == skipped
    assert {"stage": "(writing)", "reason": "document not written", "count": skipped} in summary[
        "exclusions"
    ]
    read = {u for reads in results[results["stage"] == "screen"]["reads"] for u in reads.split("|")}
    failed = set(results[(results["stage"] == "apply") & ~results["valid"]]["unit_id"])
    assert not read & failed  # never shown, never replaced
    entered = pd.DataFrame(summary["by_group"]["race"]["stages"])
    screened = entered[entered["stage"] == "screen"]["entered"].sum()
    left_over = sum(e["count"] for e in summary["exclusions"] if e["stage"] == "screen")
    assert screened + left_over == 64 - skipped  # every written letter is accounted for


def test_a_stage_without_any_valid_answer_is_reported_not_dropped(tmp_path: Path, cli) -> None:
    # Every manager call fails: the offer stage has no valid answer at all. The run exits 3
    # with status `failed` (every call of a stage failed), and still reports every group at
    # every stage, counts the failures, and says why the end-to-end ratio is undefined
    # instead of crashing or calling it 0.
    data = pipeline_studies.study()
    data["roles"]["manager"]["options"] = {"fail_rate": 1.0}
    out, printed = run(cli, tmp_path, data, exit_code=3)
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    failed = [e for e in summary["exclusions"] if e["stage"] == "offer"]
    assert failed and failed[0]["reason"] == "in an evaluation that failed"
    for group, values in (("race", {"Black", "White"}), ("gender", {"female", "male"})):
        stages = pd.DataFrame(summary["by_group"][group]["stages"])
        offer = stages[stages["stage"] == "offer"]
        assert set(offer["value"]) == values and (offer["entered"] == 0).all()
        compound = pd.DataFrame(summary["by_group"][group]["compounding"])
        assert set(compound["value"]) == values
        assert (compound["undefined"] == "no valid answer at stage `offer` (0 entered)").all()
        assert compound["end_to_end_ratio"].isna().all()
    assert "end-to-end ratio undefined: no valid answer at stage `offer`" in printed


def test_counterfactual_readings_give_statsmodels_mcnemar(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["roles"]["screener"]["synthetic"] = {
        "decision": {
            "by": "gender",
            "probabilities": {
                "female": {"Interview": 0.4, "Reject": 0.6},
                "male": {"Interview": 0.6, "Reject": 0.4},
            },
        }
    }
    data["stages"] = [data["stages"][0], pipeline_studies.COUNTERFACTUAL_STAGE]
    data["analyses"][0]["stages"] = ["rate"]
    data["design"]["agents_per_value"] = 30
    out, stdout = run(cli, tmp_path, data)
    (result,) = json.loads((out / "summary.json").read_text())["analyses"][0]["counterfactual"][
        "rate"
    ]["pairs"]
    rows = pd.read_parquet(out / "results.parquet")
    rows = rows[rows["stage"] == "rate"]
    # Each letter read twice, once under a woman's name and once under a man's.
    assert len(rows) == 2 * 240 and set(rows["variant"]) == {"female", "male"}
    wide = rows.assign(doc=rows["reads"], yes=rows["decision"] == "Interview").pivot(
        index="doc", columns="variant", values="yes"
    )
    table = pd.crosstab(wide["female"], wide["male"]).reindex(
        index=[True, False], columns=[True, False], fill_value=0
    )
    oracle = mcnemar(table.to_numpy(), exact=True)
    assert result["p_value"] == pytest.approx(oracle.pvalue, rel=1e-9)
    assert result["n_pairs"] == 240
    flips = int((wide["female"] != wide["male"]).sum())
    assert result["flip_rate"] == pytest.approx(flips / 240)
    assert result["p_value"] < 0.01  # the declared name effect is found
    # No selecting stage analysed, so no pools to count: no small-sample line about them.
    assert "Small samples" not in " ".join(stdout.split())
    title = "counterfactual readings at rate: the same document under names of two gender values"
    assert title in " ".join(stdout.split())


def test_pairs_measure_the_position_effect(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["roles"]["screener"]["synthetic"] = {"selected": {"positions": [3.0, 1.0]}}
    data["stages"] = [
        data["stages"][0],
        {
            "name": "compare",
            "population": "screeners",
            "role": "screener",
            "reads": {
                "stage": "apply",
                "matching": "pair",
                "differ_in": "gender",
                "within": ["job"],
            },
            "prompt": "Who would you hire?{% for d in documents %}\n{{ d.label }}: {{ d.text }}"
            "{% endfor %}",
        },
    ]
    data["analyses"][0]["stages"] = ["compare"]
    out, stdout = run(cli, tmp_path, data)
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    (effect,) = summary["position_effect"]
    assert effect["size"] == 2 and effect["k"] == 1 and effect["n_evaluations"] == 64
    assert effect["share"] == pytest.approx(0.75, abs=0.15) and effect["p_adjusted"] < 0.01
    # Both orders of every pair: the group rates are free of the position effect.
    gender = {r["value"]: r for r in summary["choice_rates"]["compare"]["gender"]}
    assert gender["female"]["shown"] == gender["male"]["shown"] == 64
    assert gender["female"]["chance"] == 0.5
    # The stage table counts showings too: one pick is one success, whatever the order.
    stages = {r["value"]: r for r in summary["by_group"]["gender"]["stages"]}
    assert stages["female"]["entered"] == stages["male"]["entered"] == 64
    assert stages["female"]["advanced"] + stages["male"]["advanced"] == 64
    # The pair is the unit: whole authors swap groups within their pair (item 27).
    assert {r["test"] for r in stages.values()} == {"concordant_pairs"}
    assert "concordant_pairs" in stdout
    # Validity by group and stage, the applicant the unit (one definition: analysis.refusals).
    validity = summary["validity"]["gender"]
    assert {(r["stage"], r["value"]) for r in validity} == {
        (s, g) for s in ("apply", "compare") for g in ("female", "male")
    }
    assert all(r["n_valid"] == r["n_rows"] and r["validity_gap"] == 0 for r in validity)
    assert all("unit: applicant" in r["validity_test"] for r in validity)
    assert "pipeline: valid answers by gender" in stdout
    assert (out / "tables" / "pipeline_validity_gender.csv").exists()


def test_kill_in_a_pool_stage_then_resume_reads_the_same_documents(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["design"]["agents_per_value"] = 24  # 192 letters, 24 pools
    data["roles"]["screener"].update(options={"latency_ms": 150}, max_concurrency=2)
    reference, _ = run(cli, tmp_path, data, "reference")
    path = pipeline_studies.write(tmp_path / "killed.yaml", data)
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [*BIASIM, "run", str(path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while answered_calls(out / "calls.sqlite", "screen") < 6:
        assert proc.poll() is None, "run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 6 <= answered_calls(out / "calls.sqlite", "screen") < 24
    done = subprocess.run(
        [*BIASIM, "run", "--resume", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    resumed = pd.read_parquet(out / "results.parquet")
    clean = pd.read_parquet(reference / "results.parquet")
    assert resumed["unit_id"].is_unique and len(resumed) == len(clean) == 192 + 24 + 24
    columns = ["unit_id", "reads", "shown", "selected", "advanced"]
    pd.testing.assert_frame_equal(
        resumed[columns].sort_values("unit_id").reset_index(drop=True),
        clean[columns].sort_values("unit_id").reset_index(drop=True),
    )
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == 240  # no call asked twice


@pytest.mark.model
def test_the_built_in_pipeline_runs_on_the_embedded_model(tmp_path: Path, cli) -> None:
    study = tmp_path / "small.yaml"
    study.write_text(
        "extends: hiring_pipeline\n"
        "roles:\n  applicant: {max_tokens: 30}\n"
        "design:\n  agents_per_value: 2\n"
        "  factors:\n    job: {software_engineer: null, registered_nurse: null}\n"
    )
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["stage"]) == {"apply", "screen", "offer"}
    assert not results["synthetic"].any() and set(results["backend"]) == {"local"}
    letters = results[results["stage"] == "apply"]
    assert len(letters) == 12 and letters["text"].str.len().min() > 20
    screen = results[results["stage"] == "screen"]
    assert sorted(len(r.split("|")) for r in screen["reads"]) == [4, 8]  # 12 letters, 2 pools
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    # Whatever the small model answered, every letter is accounted for: entered or excluded.
    entered = pd.DataFrame(summary["by_group"]["race"]["stages"])
    screened = int(entered[entered["stage"] == "screen"]["entered"].sum())
    excluded = sum(
        e["count"] for e in summary["exclusions"] if e["stage"] in ("screen", "(writing)")
    )
    assert screened + excluded == 12
