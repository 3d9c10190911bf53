"""Replicate simulations of a market (``biasim power``) give the same estimates wherever they
run: in this process, in a pool of processes, and on a local Ray cluster (issue 46: "the same
results for the same seed"). Each simulated market depends on its own seed only."""

from __future__ import annotations

import pytest

from biasim.simulator.cli import app
from biasim.simulator.tools.power import power


def _estimates(rows: list) -> dict[tuple[str, str, int], tuple[float, float]]:
    return {(r.analysis, r.test, r.agents): (r.power, r.false_positive_rate) for r in rows}


def test_market_power_is_the_same_in_a_pool_of_processes() -> None:
    here = power("market_small", [100], studies=3, seed=2)
    pooled = power("market_small", [100], studies=3, seed=2, workers=2)
    assert _estimates(here) == _estimates(pooled)
    # The DPD test relabels persons (12 cycles of 4 applicants, some drawn twice); the
    # position test counts every cycle's evaluation: 12 cycles of one pool each.
    units = {r.test: r.unit for r in here}
    assert units["offer: DPD by gender"].startswith("person, ")
    assert units["offer: position effect"] == "evaluation, 12 units"


@pytest.mark.slow
def test_market_power_is_the_same_on_a_local_ray_cluster() -> None:
    ray = pytest.importorskip("ray")
    here = _estimates(power("market_small", [100], studies=2, seed=4))
    try:
        on_ray = _estimates(power("market_small", [100], studies=2, seed=4, ray_address="local"))
    finally:
        ray.shutdown()
    assert here == on_ray


def test_power_names_agents_and_the_bound_where_the_design_cannot_take_a_size(cli) -> None:
    """`biasim power labor_market` with the default sizes (2,5,10): a workforce of 10 and 8
    applicants need 18 people, 9 per gender; the refusal names `--agents` and that bound, not
    a line of the study file, and nothing is simulated."""
    result = cli.invoke(app, ["power", "labor_market"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "--agents: 2 agents per value" in text and "--agents: 5 agents per value" in text
    assert "--agents: 10 agents" not in text  # 10 is enough
    assert "at least 9" in text
    assert "study.yaml" not in text and "simulating" not in text
