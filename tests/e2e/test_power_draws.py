"""Whole-stage draws of `biasim power` (`power_draws`): the rows of a run with every answer
drawn again at once. Each row's answers follow the table the per-call responder would draw it
from (its group's declared probabilities with its unit's own shift), fields keep their types,
and a study the draws cannot serve is named with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.tools.power_draws import (
    draw_results,
    fast_path_problem,
    template_problem,
)
from tests import pipeline_studies
from tests.unit.study.test_design_features import base_study, write

TRUTH = {
    "by": "gender",
    "probabilities": {"male": {"A": 0.3, "B": 0.7}, "female": {"A": 0.6, "B": 0.4}},
    "unit": "persona",
    "unit_sd": 1.0,
}


def _run(tmp_path: Path, data: dict) -> tuple:
    path = write(tmp_path / "s.yaml", data)
    prepared = prepare(RunOptions(study=str(path), out=tmp_path / "run", seed=9, throwaway=True))
    outcome = execute(prepared)
    backends = {role: r.backend for (role, _), r in prepared.runtimes.items()}
    return prepared.study.config, outcome.results, backends


def _study(**truth: object) -> dict:
    data = base_study()
    data["roles"]["decider"]["synthetic"] = {"decision": {**TRUTH, **truth}}
    data["stages"][0]["output"]["score"] = {"type": "integer"}
    data["stages"][0]["output"]["sure"] = {"type": "boolean"}
    data["roles"]["decider"]["synthetic"]["score"] = {"default_mean": 5, "sd": 2, "bounds": [0, 9]}
    data["design"] = {"agents_per_value": 4, "factors": {"job": {"r1": {}, "r2": {}}}}
    return data


def test_each_row_is_drawn_from_its_units_table(tmp_path: Path) -> None:
    config, template, backends = _run(tmp_path, _study())
    assert fast_path_problem(config) is None and template_problem(template, config) is None
    draws = 400
    hits = np.zeros(len(template))
    for seed in range(draws):
        drawn = draw_results(template, config, backends, seed)
        hits += (drawn["decision"] == "A").to_numpy()
    # The oracle: each row's chance of A from the backend's own table for that row's group and
    # unit in this run's world (seed 9), as the per-call responder reads it.
    expected = np.array(
        [
            backends["decider"].choice_table(
                "decision",
                {"enum": ["A", "B"]},
                {
                    "gender": row.gender,
                    "persona": f"gender={row.gender}/{row.agent_index}",
                    "world": "9",
                },
            )[1][0]
            for row in template.itertuples()
        ]
    )
    # Units differ (unit_sd 1): the shifts are really there, and each row matches its own.
    assert expected.max() - expected.min() > 0.3
    z = (hits / draws - expected) / np.sqrt(expected * (1 - expected) / draws)
    assert np.abs(z).max() < 4.5, z
    # The drawn table keeps the run's columns and types, and the raw answer is the JSON.
    assert list(drawn.columns) == list(template.columns)
    assert drawn.dtypes.equals(template.dtypes)
    assert drawn["score"].between(0, 9).all() and drawn["score"].std() > 1
    first = drawn.iloc[0]
    sure = str(first["sure"]).lower()
    assert first["raw_text"] == (
        f'{{"decision":"{first["decision"]}","score":{first["score"]},"sure":{sure}}}'
    )
    assert 0.3 < drawn["sure"].astype(bool).mean() < 0.7


def test_the_per_call_run_draws_from_the_same_tables(tmp_path: Path) -> None:
    """Pooled over the units of many worlds, both paths give each group its declared rate."""
    data = _study()
    data["design"]["agents_per_value"] = 40
    config, template, backends = _run(tmp_path, data)
    per_call = template.groupby("gender")["decision"].apply(lambda s: (s == "A").mean())
    drawn = [draw_results(template, config, backends, s) for s in range(20)]
    pooled = np.mean(
        [d.groupby("gender")["decision"].apply(lambda s: (s == "A").mean()) for d in drawn], axis=0
    )
    # One world's units shift its rates; the tolerance covers 40 units of sd 1 on the log-odds.
    for group, rate in zip(sorted(per_call.index), pooled, strict=True):
        assert abs(rate - per_call[group]) < 0.12, (group, rate, per_call[group])
    assert pooled[0] > pooled[1]  # female 0.6 against male 0.3


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d["stages"][0].update(answer="logprobs"), "log-probabilities"),
        (lambda d: d["stages"][0].update(shared_across=["job"]), "shared_across"),
        (lambda d: d["roles"]["decider"].update(options={"fail_rate": 0.1}), "faults"),
        (
            lambda d: d["stages"].append(
                {**d["stages"][0], "name": "again", "when": "outputs.decide.decision == 'A'"}
            ),
            "earlier answers",
        ),
    ],
)
def test_a_study_the_draws_cannot_serve_says_why(tmp_path: Path, change, reason: str) -> None:
    from biasim.simulator.study.load import load_study

    data = _study()
    change(data)
    config = load_study(str(write(tmp_path / "s.yaml", data)), check_backends=False).config
    problem = fast_path_problem(config)
    assert problem is not None and reason in problem


def test_a_pipeline_runs_through_the_engine(tmp_path: Path) -> None:
    from biasim.simulator.study.load import load_study

    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    problem = fast_path_problem(load_study(str(path), check_backends=False).config)
    assert problem is not None and "pipeline" in problem
