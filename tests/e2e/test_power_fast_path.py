"""The fast paths of `biasim power`: synthetic answers drawn in place (no call store, no retry
layer, no event loop) are the per-call path's answers, so a run's tables and its tests are the
same; answers drawn a whole stage at once give the same power and false-positive estimates
within Monte Carlo error; and the simulated studies give the same findings in this process, in
a pool of processes and on Ray."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.tools.power import power
from tests import pipeline_studies
from tests.unit.study.test_design_features import base_study, write

#: Columns that say how an answer was obtained (timing), not what it was.
HOW = ("latency_s", "timestamp")


def _study(tmp_path: Path, fail_rate: float = 0.0) -> Path:
    data = base_study()
    decider = data["roles"]["decider"]
    decider["synthetic"] = {
        "decision": {
            "by": "gender",
            "probabilities": {"male": {"A": 0.35, "B": 0.65}, "female": {"A": 0.65, "B": 0.35}},
            "unit": "persona",
            "unit_sd": 0.5,
        }
    }
    if fail_rate:
        decider["options"] = {"fail_rate": fail_rate}
    data["design"] = {"agents_per_value": 6, "factors": {"job": {"r1": {}, "r2": {}}}}
    data["analyses"] = [{"stage": "decide", "field": "decision", "target": "A", "by": "gender"}]
    return write(tmp_path / "s.yaml", data)


def _tables(path: Path, out: Path, throwaway: bool) -> tuple[pd.DataFrame, list]:
    options = RunOptions(study=str(path), out=out, seed=7, throwaway=throwaway)
    outcome = execute(prepare(options))
    return outcome.results.drop(columns=[c for c in HOW if c in outcome.results]), outcome.summary[
        "analyses"
    ]


@pytest.mark.parametrize("fail_rate", [0.0, 0.2])
def test_answers_drawn_in_place_are_the_per_call_answers(tmp_path: Path, fail_rate: float) -> None:
    path = _study(tmp_path, fail_rate)
    per_call, per_call_analyses = _tables(path, tmp_path / "per-call", throwaway=False)
    drawn, drawn_analyses = _tables(path, tmp_path / "drawn", throwaway=True)
    pd.testing.assert_frame_equal(per_call, drawn)
    # A throwaway run computes only what power reads: those p-values are the same. As JSON:
    # NaN (a test that could not run) equals NaN there.
    assert json.dumps(_power_tests(per_call_analyses), sort_keys=True) == json.dumps(
        _power_tests(drawn_analyses), sort_keys=True
    )
    if fail_rate:
        assert (drawn["status"] == "error").any()  # the declared failures came through too


def _power_tests(analyses: list) -> dict:
    tests = {
        a["name"]: {t: asdict(v) for t, v in get_kind(a["kind"]).power_tests(a).items()}
        for a in analyses
    }
    assert any(tests.values())  # something to compare
    return tests


def test_a_pipeline_drawn_in_place_is_the_per_call_pipeline(tmp_path: Path) -> None:
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    per_call, _ = _tables(path, tmp_path / "per-call", throwaway=False)
    drawn, _ = _tables(path, tmp_path / "drawn", throwaway=True)
    pd.testing.assert_frame_equal(per_call, drawn)


def _estimates(rows: list) -> dict[tuple[str, str, int], tuple[float, float]]:
    return {(r.analysis, r.test, r.agents): (r.power, r.false_positive_rate) for r in rows}


@pytest.mark.slow
def test_power_is_the_same_on_the_fast_and_the_per_call_path(tmp_path: Path) -> None:
    path = _study(tmp_path)
    studies = 60
    fast = _estimates(power(str(path), [6], studies=studies, seed=3))
    per_call = _estimates(power(str(path), [6], studies=studies, seed=3, per_call=True))
    assert fast.keys() == per_call.keys()
    # Whole-stage draws are other draws of the same distribution: each estimate agrees within
    # Monte Carlo error (3 standard errors of a difference of two shares of `studies`).
    for key, estimates in fast.items():
        for drawn, called in zip(estimates, per_call[key], strict=True):
            share = (drawn + called) / 2
            se = (max(share * (1 - share), 1 / studies) * 2 / studies) ** 0.5
            assert abs(drawn - called) <= 3 * se, (key, estimates, per_call[key])
    # The effect (0.35 against 0.65) is found in some studies and not in all.
    assert any(0 < p < 1 for p, _ in fast.values())


def test_power_is_the_same_in_a_pool_of_processes(tmp_path: Path) -> None:
    path = _study(tmp_path)
    here = _estimates(power(str(path), [6], studies=4, seed=11))
    pooled = _estimates(power(str(path), [6], studies=4, seed=11, workers=2))
    assert here == pooled


@pytest.mark.slow
def test_power_is_the_same_on_a_local_ray_cluster(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    path = _study(tmp_path)
    here = _estimates(power(str(path), [6], studies=3, seed=5))
    try:
        on_ray = _estimates(power(str(path), [6], studies=3, seed=5, ray_address="local"))
    finally:
        ray.shutdown()
    assert here == on_ray


def test_progress_says_how_long_is_left(tmp_path: Path) -> None:
    lines: list[str] = []
    power(str(_study(tmp_path)), [6], studies=2, seed=0, progress=lines.append)
    assert len(lines) == 4
    assert lines[-1].startswith("agents 6, null, study 2/2 (4/4, about 0 s left)"), lines
    assert "left)" in lines[0]
