"""End-to-end runs on the synthetic responder: ground truth recovered, order-independent
results, exact replay, resume, and the run directory's contents."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.registry import register_backend
from biasim.simulator.llm.synthetic import SyntheticBackend
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from tests.conftest import write_study


def run(study: Path, out: Path, **kw) -> object:
    return execute(prepare(RunOptions(study=str(study), out=out, **kw)))


def test_synthetic_run_recovers_declared_rates(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=600)
    outcome = run(study, tmp_path / "run")
    df = outcome.results
    assert len(df) == 1800 and (df["status"] == "answered").all()
    assert df["synthetic"].all() and set(df["backend"]) == {"synthetic"}
    rates = df.groupby("gender")["decision"].apply(lambda s: (s == "Evacuate").mean())
    # Declared: male 0.3, female 0.8, non-binary 0.5 (default); 600 draws each -> sd <= 0.021.
    assert rates["male"] == pytest.approx(0.3, abs=0.07)
    assert rates["female"] == pytest.approx(0.8, abs=0.07)
    assert rates["non-binary"] == pytest.approx(0.5, abs=0.07)
    (test,) = outcome.summary["analyses"][0]["cases"]
    assert test["dpd"] == pytest.approx(rates.max() - rates.min())
    assert test["significant"]
    assert outcome.summary["synthetic"] is True


def test_run_directory_contents(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(write_study(tmp_path / "s.yaml", agents=5, replicates=2), out)
    assert sorted(p.name for p in out.iterdir()) == [
        ".lock",
        "calls.key",
        "calls.sqlite",
        "figures",
        "manifest.json",
        "report.html",
        "results.csv",
        "results.parquet",
        "summary.json",
        "tables",
    ]
    cases = pd.read_csv(out / "tables" / "analysis1_cases.csv")
    assert len(cases) == 1 and cases.loc[0, "n_valid"] == 30
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["study"]["design"]["agents_per_value"] == 5
    assert manifest["roles"]["decider"]["backend"]["backend"] == "synthetic"
    assert {"mesa", "pydantic", "pandas"} <= set(manifest["packages"])
    assert manifest["counts"]["units"] == 30
    parquet = pd.read_parquet(out / "results.parquet")
    csv = pd.read_csv(out / "results.csv")
    assert len(parquet) == len(csv) == 30
    assert parquet["unit_id"].is_unique
    assert {
        "unit_id",
        "stage",
        "role",
        "gender",
        "condition",
        "replicate",
        "decision",
        "rationale",
        "valid",
        "raw_text",
    } <= set(parquet.columns)
    assert set(parquet["replicate"]) == {0, 1}
    with sqlite3.connect(out / "calls.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert rows == (30, 30)  # replicates are distinct calls
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accounting"]["by_role"][0]["calls"] == 30


def test_rerun_over_the_cache_makes_zero_calls_and_identical_results(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=30)
    first = run(study, tmp_path / "a")
    again = run(study, tmp_path / "b", replay=tmp_path / "a")
    assert first.summary["calls"]["new"] == 90
    assert again.summary["calls"] == {"new": 0, "from_cache": 90}
    cols = ["unit_id", "decision", "rationale", "raw_text", "status"]
    pd.testing.assert_frame_equal(first.results[cols], again.results[cols])
    # The replayed run directory is complete on its own.
    with sqlite3.connect(tmp_path / "b" / "calls.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 90
    # Resuming a finished run also asks nothing.
    resumed = execute(prepare(RunOptions(resume=tmp_path / "a")))
    assert resumed.summary["calls"]["new"] == 0
    pd.testing.assert_frame_equal(first.results[cols], resumed.results[cols])


def test_same_seed_reproduces_and_another_seed_differs(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=50)
    a = run(study, tmp_path / "a").results
    b = run(study, tmp_path / "b").results
    c = run(study, tmp_path / "c", seed=99).results
    assert a["decision"].tolist() == b["decision"].tolist()
    assert a["decision"].tolist() != c["decision"].tolist()


class ShuffledLatency(SyntheticBackend):
    """Answers like the synthetic responder, optionally finishing in a random order."""

    name = "shuffled"
    scramble = False
    started: ClassVar[list[int]] = []
    finished: ClassVar[list[int]] = []

    async def generate(self, request: LLMRequest) -> LLMResponse:
        ShuffledLatency.started.append(request.seed)
        if ShuffledLatency.scramble:
            await asyncio.sleep(random.random() * 0.01)
        ShuffledLatency.finished.append(request.seed)
        return await super().generate(request)


def test_results_do_not_depend_on_completion_order(tmp_path: Path) -> None:
    register_backend("shuffled", ShuffledLatency)
    study = write_study(tmp_path / "s.yaml", agents=20, concurrency=30)
    text = study.read_text().replace("backend: synthetic", "backend: shuffled")
    text = text[: text.index("    synthetic:")] + text[text.index("personas:") :]
    study.write_text(text)
    ShuffledLatency.scramble = False
    base = run(study, tmp_path / "base").results
    ShuffledLatency.scramble, ShuffledLatency.started, ShuffledLatency.finished = True, [], []
    shuffled = run(study, tmp_path / "shuffled").results
    assert ShuffledLatency.finished != ShuffledLatency.started  # completion order was scrambled
    assert sorted(ShuffledLatency.finished) == sorted(ShuffledLatency.started)
    # ... yet rows come back in design order with the same answers.
    assert base["unit_id"].tolist() == shuffled["unit_id"].tolist()
    assert base["decision"].tolist() == shuffled["decision"].tolist()


def test_concurrency_is_bounded_and_used(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=20, latency_ms=20, concurrency=7)
    prepared = prepare(RunOptions(study=str(study), out=tmp_path / "run"))
    execute(prepared)
    assert prepared.runtimes[("decider", "")].limiter.peak_in_flight == 7


def test_two_stage_study_feeds_answers_forward(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=4)
    text = study.read_text().replace(
        "design:",
        "  - name: explain\n    role: decider\n"
        "    prompt: 'You chose {{ outputs.decide.decision }}.'\ndesign:",
    )
    study.write_text(text)
    df = run(study, tmp_path / "run").results
    assert df["stage"].tolist() == ["decide"] * 12 + ["explain"] * 12
    explain = df[df["stage"] == "explain"]
    assert (explain["text"] == "synthetic text").all()


def test_cli_run_prints_the_report_and_labels_synthetic(tmp_path: Path, cli) -> None:
    study = write_study(tmp_path / "s.yaml", agents=10)
    result = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "SYNTHETIC RESPONDER - not a language model" in result.stdout
    assert "Demographic parity difference" in result.stdout
    analyzed = cli.invoke(app, ["analyze", str(tmp_path / "run"), "--json"])
    assert analyzed.exit_code == 0
    report = json.loads(analyzed.stdout)
    assert report["synthetic"] is True and report["units"] == 30
    listed = cli.invoke(app, ["list"])
    assert "emergency_response" in listed.stdout
