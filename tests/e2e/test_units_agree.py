"""One unit per test, the same on every route that shows it (issue 43, item 1).

For every built-in study run on the synthetic backend, every test ``biasim power`` reads
(``AnalysisKind.power_tests``) states the unit its null reshuffled and how many, from the row
the test wrote; the model estimates (GEE, mixed model) cluster on the same column with the same
count as the tests beside them; each count agrees with one recounted here from the results or
from a count the kind derives on its own (first-stage pools). ``biasim power`` prints the unit
the run's own test rows state, for the same design size.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from biasim.analysis.stats.units import UNIT_COLUMNS, design_units
from biasim.scenarios import builtin_studies
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.tools.power import power
from tests.builtin_runs import AGENTS, NEEDS_INPUT


def _run(name: str, out: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    options = RunOptions(study=name, out=out, backend="synthetic", agents=AGENTS.get(name, 2))
    outcome = execute(prepare(options))
    return outcome.summary, pd.read_parquet(out / "results.parquet")


def _decided(results: pd.DataFrame, stage: str) -> pd.DataFrame:
    return results[results["stage"] == stage]


def _check_demographic_parity(analysis: dict[str, Any], results: pd.DataFrame) -> None:
    """Cases and models name the persona column; no case counts more personas than the stage
    holds, and every model counts as many as the cases of its fit."""
    personas = design_units(_decided(results, analysis["stage"]), "persona").nunique()
    cases = pd.DataFrame(analysis["cases"])
    assert set(cases["unit"]) == {UNIT_COLUMNS["persona"]}
    assert cases["n_units"].max() <= personas
    models = pd.DataFrame(analysis.get("model_estimates") or [])
    if len(models):
        assert set(models["unit"]) == set(cases["unit"])
        assert set(models["n_units"]) <= set(cases["n_units"])


def _check_acceptance(analysis: dict[str, Any], results: pd.DataFrame) -> None:
    """Every test relabels the names a valid answer came from; the GEE clusters on the same
    names and counts as many."""
    for part in analysis["models"].values():
        assert part["test_unit"] == "persona_name"
        models = [m for m in analysis.get("model_estimates") or [] if m["converged"]]
        for model in models:
            assert (model["unit"], model["n_units"]) == (part["test_unit"], part["test_units"])
    judged = _decided(results, analysis["stage"])
    valid = judged[judged["valid"].astype("boolean").fillna(False)]
    counts = {part["test_units"] for part in analysis["models"].values()}
    assert max(counts) <= valid["persona_name"].nunique()


def _check_policy_effect(analysis: dict[str, Any], results: pd.DataFrame) -> None:
    """The paired test swaps clusters: as many as the first-stage pools the kind counts."""
    for parts in analysis["by_group"].values():
        for row in parts["tests"]:
            assert (row["unit"], row["n_units"]) == ("cluster", analysis["clusters"])


def _check_pipeline(analysis: dict[str, Any], results: pd.DataFrame) -> None:
    """The first stage's test permutes within the first-stage pools the kind counts."""
    first = analysis["stages"][0]
    for parts in analysis["by_group"].values():
        row = next(r for r in parts["stages"] if r["stage"] == first)
        if row["unit"] == "pool":
            assert row["n_units"] == analysis["clusters"]


def _check_letters(analysis: dict[str, Any], results: pd.DataFrame) -> None:
    """The style tests and the lexicon tests of one model relabel one unit, equally many."""
    style = pd.DataFrame(analysis.get("style") or [])
    lexicon = pd.DataFrame(analysis.get("lexicon") or [])
    if "p_unit" in style and len(lexicon):
        assert set(style["unit"]) == set(lexicon["unit"])
        assert set(style["n_units"]) == set(lexicon["n_units"])


CHECKS = {
    "demographic_parity": _check_demographic_parity,
    "acceptance": _check_acceptance,
    "policy_effect": _check_policy_effect,
    "pipeline": _check_pipeline,
    "letters": _check_letters,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(builtin_studies()) - NEEDS_INPUT))
def test_every_test_states_its_unit_and_the_routes_agree(name: str, tmp_path: Path) -> None:
    summary, results = _run(name, tmp_path / "run")
    for analysis in summary["analyses"]:
        tests = get_kind(analysis["kind"]).power_tests(analysis)
        for test, tested in tests.items():
            if tested.p is None:
                continue
            assert tested.unit is not None, f"{analysis['name']}: {test} states no unit"
            assert tested.n_units is not None and tested.n_units > 0, (analysis["name"], test)
        check = CHECKS.get(analysis["kind"])
        if check is not None and tests:
            check(analysis, results)


#: One study per kind with power tests, and the size its power runs at.
POWERED = {
    "persona_ablation": 2,
    "an2024_hiring_gpt35": 2,
    "hiring_policies": 2,
    "wan2023_letters_cbg": 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POWERED))
def test_power_prints_the_unit_the_runs_tests_state(name: str, tmp_path: Path) -> None:
    """A run at the size power simulates: its tests' units are the units power prints."""
    size = POWERED[name]
    options = RunOptions(study=name, out=tmp_path / "run", backend="synthetic", agents=size)
    summary = execute(prepare(options)).summary
    stated = {
        (a["name"], test): tested.label
        for a in summary["analyses"]
        for test, tested in get_kind(a["kind"]).power_tests(a).items()
    }
    rows = power(name, [size], studies=2, seed=summary.get("seed", 0))
    assert rows
    for row in rows:
        assert row.unit != "not stated", (row.analysis, row.test)
        printed, ran = (
            _unit_and_counts(row.unit),
            _unit_and_counts(stated[(row.analysis, row.test)]),
        )
        assert printed[0] == ran[0], (row.analysis, row.test, row.unit)
        # The counts power saw over its simulated studies cover the run's (same design).
        low, high = printed[1]
        assert low <= ran[1][0] and ran[1][1] <= high, (row.analysis, row.test, row.unit)


def _unit_and_counts(label: str) -> tuple[str, tuple[int, int]]:
    """``persona_id, 9-18 units per test`` -> (``persona_id``, (9, 18))."""
    unit, _, rest = label.partition(", ")
    counts = [int(n) for n in re.findall(r"\d+", rest)]
    return unit, (min(counts), max(counts))
