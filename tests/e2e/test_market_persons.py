"""In a market one person applies in several cycles: the pipeline kind's stage and validity
tests relabel persons, and the person is what the engine drew."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from biasim.simulator.api import load_study
from biasim.simulator.cli import app
from biasim.simulator.engine.market import _in_cycle
from biasim.simulator.study.design import population_specs
from biasim.simulator.study.market import person_of
from tests import pipeline_studies
from tests.market_studies import market

HIRING = {"kind": "pipeline", "name": "hiring", "stages": ["offer"], "groups": ["gender"]}


def test_person_of_undoes_the_cycle_and_replicate_the_engine_puts_in_an_id(tmp_path: Path) -> None:
    study = load_study(pipeline_studies.write(tmp_path / "m.yaml", market())).config
    for spec in population_specs(study, "applicants")[:3]:
        for tag, replicate in (("c001", 0), ("c012", 0), ("r003/c002", 3)):
            drawn = _in_cycle(spec, tag, replicate).agent_id
            assert drawn != spec.agent_id and person_of(drawn) == spec.agent_id
        assert person_of(spec.agent_id) == spec.agent_id


def test_a_markets_pipeline_tests_take_the_person_as_their_unit(cli, tmp_path: Path) -> None:
    """Rejected applicants apply again (probability 0.9): the hiring stage's test and the
    validity test relabel the persons, as many as applied, and each reapplication is by a
    person who applied before."""
    data = market(cycles=8, market={"reapply": {"probability": 0.9}}, analyses=[HIRING])
    path = pipeline_studies.write(tmp_path / "m.yaml", data)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"].sort_values("cycle")
    person = letters["agent_id"].map(person_of)
    assert person.duplicated().any()  # the null of this test keeps reapplication
    again = letters["reapplied"].astype(bool)
    first = letters.groupby(person)["cycle"].transform("min")
    assert again.any() and (letters.loc[again, "cycle"] > first[again]).all()
    summary = json.loads((out / "summary.json").read_text())
    hiring = next(a for a in summary["analyses"] if a["name"] == "hiring")
    stage = hiring["by_group"]["gender"]["stages"][0]
    assert (stage["test"], stage["unit"]) == ("permutation_of_persons", "person")
    assert stage["n_units"] == person.nunique() < len(person)
    for row in hiring["validity"]["gender"]:
        assert f"unit: person, {person.nunique()} units" in row["validity_test"], row
