"""`biasim power` simulates independent worlds: each seed redraws the units' propensities and,
where a study declares literal replicate seeds, the replicate seeds too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.load import load_study
from biasim.simulator.tools.power import power, world_study
from tests import pipeline_studies
from tests.unit.study.test_design_features import base_study, write


def _study(tmp_path: Path, **design: object) -> Path:
    data = base_study()
    data["roles"]["decider"]["synthetic"] = {
        "decision": {"default": {"A": 0.5, "B": 0.5}, "unit": "persona", "unit_sd": 3.0}
    }
    data["design"] = {
        "agents_per_value": 15,
        "factors": {"job": {f"r{i}": {} for i in range(12)}},
        **design,
    }
    return write(tmp_path / "s.yaml", data)


def _persona_rates(path: Path, out: Path, seed: int) -> pd.Series:
    df = execute(prepare(RunOptions(study=str(path), out=out, seed=seed))).results
    return df.assign(a=df["decision"] == "A").groupby(["gender", "agent_index"])["a"].mean()


def test_each_seed_draws_its_own_unit_propensities(tmp_path: Path) -> None:
    path = _study(tmp_path)
    first = _persona_rates(path, tmp_path / "a", seed=1)
    again = _persona_rates(path, tmp_path / "b", seed=1)
    other = _persona_rates(path, tmp_path / "c", seed=2)
    pd.testing.assert_series_equal(first, again)
    # With sd 3 a persona's share over 12 strata is mostly its propensity: the same world
    # correlates perfectly with itself, another world hardly at all (30 personas).
    assert first.var() > 0.08
    assert abs(np.corrcoef(first, other)[0, 1]) < 0.5


def test_literal_replicate_seeds_are_redrawn_per_simulated_study(tmp_path: Path) -> None:
    plain = _study(tmp_path)
    study = load_study(str(plain), check_backends=False)
    assert world_study(plain, study, 3, tmp_path) == plain  # nothing literal to redraw
    literal = _study(tmp_path / "lit", replicate_seeds=[11, 42, 50])
    study = load_study(str(literal), check_backends=False)
    seeds = {}
    for seed in (0, 1):
        world = world_study(literal, study, seed, tmp_path)
        seeds[seed] = load_study(str(world), check_backends=False).config.design.replicate_seeds
        assert yaml.safe_load(world.read_text())["extends"] == str(literal)
        assert len(seeds[seed]) == 3
    assert seeds[0] != seeds[1] and seeds[0] != [11, 42, 50]


def test_power_on_a_pipeline_reports_its_stage_tests(tmp_path: Path) -> None:
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    rows = power(str(path), [4], studies=1)
    tests = {row.test for row in rows}
    assert any(test.endswith("DPD by race") for test in tests), tests
    assert all(0 <= row.false_positive_rate <= 1 and row.studies == 1 for row in rows)
