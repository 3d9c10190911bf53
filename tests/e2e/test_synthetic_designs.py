"""A synthetic truth for any design (issue 12.9): probabilities keyed by a combination of axes,
by a design factor, a unit's own propensity kept in every stratum, and ``biasim power`` running
a study's analyses on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.study.config import SyntheticField
from biasim.simulator.tools.power import power, scale_table
from tests.unit.study.test_design_features import base_study, run, write

CHOICE = {"type": "choice", "choices": ["A", "B"]}


def study(truth: dict[str, Any], **design: Any) -> dict[str, Any]:
    data = base_study()
    data["personas"]["axes"] = {"race": ["x", "y"], "gender": ["male", "female"]}
    data["roles"]["decider"]["synthetic"] = {"decision": truth}
    data["design"] = {"agents_per_value": 40, **design}
    return data


def test_probabilities_by_a_combination_of_axes_and_a_factor(tmp_path: Path) -> None:
    truth = {
        "by": ["race", "gender", "arm"],
        "probabilities": {"y|female|treated": {"A": 0.9, "B": 0.1}},
        "default": {"A": 0.2, "B": 0.8},
    }
    data = study(truth, factors={"arm": {"control": {}, "treated": {}}})
    df = run(write(tmp_path / "s.yaml", data), tmp_path / "run").results
    share = df.assign(a=df["decision"] == "A").groupby(["race", "gender", "arm"])["a"].mean()
    assert share[("y", "female", "treated")] > 0.75
    others = share.drop(("y", "female", "treated"))
    assert (others < 0.4).all() and len(others) == 7


def test_each_name_keeps_its_own_propensity_in_every_stratum(tmp_path: Path) -> None:
    """With unit heterogeneity a persona's answers agree across the 12 strata far more than
    independent draws would; without it they do not."""
    truth = {"default": {"A": 0.5, "B": 0.5}, "unit": "persona", "unit_sd": 2.5}
    factors = {"job": {f"r{i}": {} for i in range(12)}}
    results = {}
    for label, declared in (("heterogeneous", truth), ("plain", {"default": truth["default"]})):
        data = study(declared, agents_per_value=20, factors=factors)
        df = run(write(tmp_path / f"{label}.yaml", data), tmp_path / label).results
        per_persona = (
            df.assign(a=df["decision"] == "A")
            .groupby(["race", "gender", "agent_index"])["a"]
            .mean()
        )
        results[label] = per_persona.var()
    # Independent draws: var of a 12-answer share is 0.25 / 12 ~ 0.021.
    assert results["plain"] < 0.04
    assert results["heterogeneous"] > 0.08


def test_a_synthetic_key_that_does_not_exist_is_named(tmp_path: Path) -> None:
    data = study({"by": ["race", "colour"], "probabilities": {"x|red": {"A": 1.0}}})
    with pytest.raises(InputError, match="`colour` is not a persona axis, a design factor"):
        run(write(tmp_path / "s.yaml", data), tmp_path / "run")
    data = study({"by": ["race", "gender"], "probabilities": {"x|blue": {"A": 1.0}}})
    with pytest.raises(InputError, match="`blue` is not a value of `gender`"):
        run(write(tmp_path / "t.yaml", data), tmp_path / "run2")
    with pytest.raises(ValueError, match="needs 2 values"):
        SyntheticField(by=["race", "gender"], probabilities={"x": {"A": 1.0}})


def test_scaling_an_effect_interpolates_between_baseline_and_declared() -> None:
    table = SyntheticField(
        by="race", probabilities={"y": {"A": 0.8, "B": 0.2}}, default={"A": 0.5, "B": 0.5}
    )
    # No effect: no value-specific table at all, every value answers as unlisted ones do.
    assert scale_table(table, 0) == {"default": {"A": 0.5, "B": 0.5}}
    assert scale_table(table, 1)["probabilities"]["y"] == pytest.approx({"A": 0.8, "B": 0.2})
    half = scale_table(table, 0.5)["probabilities"]["y"]
    # Geometric interpolation: the odds move halfway on the log scale (4:1 -> 2:1).
    assert half["A"] / half["B"] == pytest.approx(2.0)
    assert scale_table(table, 1)["default"] == {"A": 0.5, "B": 0.5}


def test_scaling_a_numeric_effect_moves_its_means_from_the_default_mean() -> None:
    # A score declared by design value (the letters studies' 82 against 62): no effect is
    # every value at the default mean (before, the null kept `mean` without its `by` and the
    # whole power run was refused), half an effect is halfway.
    table = SyntheticField(by="showing", mean={"strong": 82}, default_mean=62, sd=8)
    assert scale_table(table, 0) == {"default_mean": 62.0, "sd": 8.0}
    assert SyntheticField(**scale_table(table, 0)).mean == {}
    assert scale_table(table, 0.5)["mean"] == {"strong": 72.0}
    assert scale_table(table, 1)["mean"] == {"strong": 82.0}


def test_power_finds_a_large_effect_and_not_a_missing_one(tmp_path: Path) -> None:
    data = study(
        {
            "by": "race",
            "probabilities": {"y": {"A": 0.9, "B": 0.1}},
            "default": {"A": 0.3, "B": 0.7},
        }
    )
    data["analyses"] = [
        {
            "kind": "demographic_parity",
            "name": "d",
            "stage": "decide",
            "field": "decision",
            "target": "A",
            "by": "race",
            "n_simulations": 500,
        }
    ]
    path = write(tmp_path / "p.yaml", data)
    rows = power(str(path), [10], studies=6, seed=1)
    by_test = {r.test: r for r in rows}
    test = by_test["any case DPD (holm over 1 cases)"]
    assert test.power == 1.0 and test.false_positive_rate <= 1 / 6
    assert test.agents == 10 and test.studies == 6


def test_power_needs_a_declared_truth_and_good_options(tmp_path: Path) -> None:
    data = base_study()
    data["roles"]["decider"].pop("synthetic")
    path = write(tmp_path / "none.yaml", data)
    result = CliRunner().invoke(app, ["power", str(path), "--studies", "2"])
    assert result.exit_code == 2 and "declares no synthetic truth" in result.output
    assert "SyntheticField in docs/reference/study-file.md" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["power", str(path), "--agents", "two"])
    assert result.exit_code == 2 and "--agents" in result.output


def test_power_says_whether_it_draws_whole_stages(tmp_path: Path) -> None:
    data = base_study()
    data["roles"]["decider"]["synthetic"] = {"decision": {"default": {"A": 0.3, "B": 0.7}}}
    path = write(tmp_path / "bare.yaml", data)
    result = CliRunner().invoke(app, ["power", str(path), "--agents", "2", "--studies", "2"])
    # Nothing to count without an analysis: refused before anything runs.
    assert result.exit_code == 2 and "nothing to count" in result.output
    parity = {"kind": "demographic_parity", "stage": "decide", "field": "decision"}
    data["analyses"] = [{**parity, "target": "A", "by": ["gender"]}]
    path = write(tmp_path / "drawn.yaml", data)
    result = CliRunner().invoke(app, ["power", str(path), "--agents", "2", "--studies", "2"])
    assert result.exit_code == 0, result.output
    assert "answers drawn a whole stage at once" in result.output
    data["stages"][0]["shared_across"] = ["scenario"]
    data["design"]["factors"] = {"scenario": {"a": {}, "b": {}}}
    path = write(tmp_path / "engine.yaml", data)
    result = CliRunner().invoke(
        app, ["power", str(path), "--agents", "2", "--studies", "2", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "runs through the engine: stage `decide`: agents share requests" in " ".join(
        result.output.split()
    )
