"""The benchmarks' studies still run: `make bench` is not in CI, so a study a schema change
broke would otherwise go unnoticed until someone measures."""

from __future__ import annotations

from benchmarks import market, pipeline


def test_the_market_benchmark_runs_every_cycle_and_counts_its_calls() -> None:
    measured = market.run(cycles=2, per_cycle=100)
    assert measured["status"] == "complete"
    # Per cycle: 100 letters, and one manager's reading per pool of 10.
    assert measured["units"] == {"apply": 200, "offer": 20}
    assert measured["calls"] == 220 and measured["peak_rss_mb"] > 0


def test_the_pipeline_benchmark_study_runs_at_a_small_size() -> None:
    measured = pipeline.one_run(pipeline.STUDY.replace("AGENTS", "8"))
    assert measured["status"] == "complete"
    assert measured["units"]["apply"] == 48
