"""Policies in a market: each policy runs its own trajectory (workforce, readers, hires) on the
common random numbers of the base, and market.csv holds every trajectory."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from biasim.analysis.stats.market_policy import policy_market_tests, policy_shares
from biasim.simulator.api import load_study
from biasim.simulator.cli import app
from biasim.simulator.engine.market import market_rng
from biasim.simulator.study.design import population_specs
from tests import pipeline_studies
from tests.market_studies import MARKET, market

#: A policy with the base's settings under another name, and one that withholds names.
POLICIES = {
    "same": {"stages": {"offer": {"author": "name"}}},
    "redacted": {"stages": {"offer": {"author": "redacted"}}},
}


def run(cli, tmp_path: Path, data: dict, name: str) -> Path:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_adding_policies_leaves_the_base_trajectory_as_it_was(cli, tmp_path: Path) -> None:
    plain = run(cli, tmp_path, MARKET, "plain")
    both = run(cli, tmp_path, market(policies=POLICIES), "both")
    table = pd.read_csv(both / "market.csv")
    assert list(dict.fromkeys(table["policy"])) == ["base", "same", "redacted"]
    base = table[table["policy"] == "base"].reset_index(drop=True)
    assert base.equals(pd.read_csv(plain / "market.csv"))
    # Every trajectory starts from the same workforce and sees the same applicants.
    wide = table.set_index(["policy", "cycle", "group"])
    for policy in ("same", "redacted"):
        assert wide.loc[policy].loc[0].equals(wide.loc["base"].loc[0])
        assert wide.loc[policy]["applicants"].equals(wide.loc["base"]["applicants"])
    results = pd.read_parquet(both / "results.parquet")
    own = results[results["stage"].isin(["apply", "offer"])].reset_index(drop=True)
    timing = ["cached", "latency_s"]
    assert own.drop(columns=timing).equals(
        pd.read_parquet(plain / "results.parquet").drop(columns=timing)
    )
    per_cycle = results.groupby(["cycle", "stage"]).size().unstack()
    assert (per_cycle[["offer", "offer__same", "offer__redacted"]] == 1).all().all()


def test_estimate_counts_each_policys_readings_in_every_cycle(cli, tmp_path: Path) -> None:
    """6 cycles of 2 letters (shared) and one reading per policy: 6 x (2 + 3) = 30 calls."""
    path = pipeline_studies.write(tmp_path / "market.yaml", market(policies=POLICIES))
    result = cli.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "up to 30 new calls" in " ".join(result.output.split())


def test_each_trajectory_reads_and_loses_the_same_seniority_places(cli, tmp_path: Path) -> None:
    """The keying the guide documents, replayed independently of the engine: in every
    trajectory the cycle's reader is the employee at the place the (seed, readers, cycle)
    generator draws among the trajectory's own workforce in order of joining, the leaver the
    one at the place the (seed, attrition, cycle) generator draws, and the hire the one its
    own reading picked."""
    data = market(policies=POLICIES, cycles=10, market={"workforce": 3})
    out = run(cli, tmp_path, data, "keyed")
    study = load_study(pipeline_studies.write(tmp_path / "keyed.yaml", data)).config
    pool = population_specs(study, "applicants")
    first = sorted(market_rng(study.seed, "workforce", 0).sample(range(len(pool)), 3))
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"].set_index("unit_id")
    person = lambda spec: (dict(spec.persona.attributes)["gender"], spec.persona.name)  # noqa: E731
    staffs = {}
    for policy in ("base", "same", "redacted"):
        stage = "offer" if policy == "base" else f"offer__{policy}"
        staff = [person(pool[i]) for i in first]
        readings = results[results["stage"] == stage].set_index("cycle")
        for cycle in range(1, 11):
            reading = readings.loc[cycle]
            place = market_rng(study.seed, "readers/managers", cycle).sample(range(len(staff)), 1)
            assert staff[place[0]] == (reading["gender"], reading["persona_name"]), (policy, cycle)
            leaving = market_rng(study.seed, "attrition", cycle).sample(range(len(staff)), 1)
            del staff[leaving[0]]
            hired = reading["reads"].split("|")[int(reading["selected"]) - 1]
            staff.append(tuple(letters.loc[hired, ["gender", "persona_name"]]))
        staffs[policy] = staff
    differ = sum(a != b for a, b in zip(staffs["base"], staffs["redacted"], strict=True))
    table = pd.read_csv(out / "market.csv").set_index(["policy", "cycle", "group"])
    for policy, staff in staffs.items():
        last = table.loc[policy].loc[10]["workforce"]
        assert last.to_dict() == {g: sum(s[0] == g for s in staff) for g in ("female", "male")}
    # The trajectories did part: the check above compared different workforces.
    assert differ > 0


def test_a_policy_effect_analysis_is_refused_in_a_market_with_the_reason(
    cli, tmp_path: Path
) -> None:
    data = market(policies=POLICIES)
    data["analyses"] = [
        {"kind": "policy_effect", "name": "p", "stages": ["offer"], "groups": ["gender"]}
    ]
    path = pipeline_studies.write(tmp_path / "bad.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "a pool is no unit" in " ".join(result.output.split())


@pytest.mark.slow
def test_the_replicate_test_finds_a_policy_that_removes_the_readers_bias(
    cli, tmp_path: Path
) -> None:
    """Managers favour men 20 to 1 when they see the name; withholding names removes it. Ten
    seeds' 12-cycle markets as replicates (unit: the replicate market, exact over 1,024 sign
    flips): the redaction's change in women's workforce share is flagged, and it is positive
    at the last cycle; a policy acting as the base is found less surely."""
    tables = []
    for seed in range(10):
        data = market(policies=POLICIES, seed=seed, cycles=12)
        truth = {"by": "gender", "weights": {"male": 20}}
        data["roles"]["manager"]["synthetic"]["selected"] = truth
        out = run(cli, tmp_path, data, f"s{seed}")
        tables.append(pd.read_csv(out / "market.csv").assign(replicate=seed))
    table = pd.concat(tables, ignore_index=True)
    tests = policy_market_tests(table).set_index("policy")
    assert tests.loc["redacted", "n_units"] == 10 and tests.loc["redacted", "p_value"] < 0.05
    assert tests.loc["same", "p_value"] > tests.loc["redacted", "p_value"]
    shares = policy_shares(table).query("policy == 'redacted' and group == 'female'")
    assert shares["workforce_share_change"].iloc[-1] > 0
