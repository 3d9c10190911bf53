"""Policies in a market: each policy runs its own trajectory (workforce, readers, hires) on the
common random numbers of the base, and market.csv holds every trajectory."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.market_policy import policy_market_tests, policy_shares
from biasim.simulator.api import load_study
from biasim.simulator.cli import app
from biasim.simulator.engine.market import market_rng
from biasim.simulator.study.design import population_specs
from tests import pipeline_studies
from tests.market_studies import market

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
    """Each trajectory draws its own applicants from the people it does not employ, on one
    keyed stream: the base's composition, hires, letters, readings and calls are those of the
    run without policies, although the policies' hires make their applicants differ from the
    base's (10 people, managers who favour men when they see names: they do here, and the
    base drew from the people no trajectory employed before, so it did not stay the same)."""
    hiring = {"kind": "pipeline", "name": "hiring", "stages": ["offer"], "groups": ["gender"]}
    # An analysis of the letters themselves reads the base's applicants too, as every kind does.
    letters = {"kind": "letters", "name": "letters", "stage": "apply", "group": "gender"}
    letters["compare"] = ["male", "female"]
    small = market(design={"agents_per_value": 5}, analyses=[hiring, letters])
    small["roles"]["manager"]["synthetic"]["selected"] = {"by": "gender", "weights": {"male": 20}}
    plain = run(cli, tmp_path, small, "plain")
    both = run(cli, tmp_path, {**small, "policies": POLICIES}, "both")
    table = pd.read_csv(both / "market.csv")
    assert list(dict.fromkeys(table["policy"])) == ["base", "same", "redacted"]
    base = table[table["policy"] == "base"].reset_index(drop=True)
    assert base.equals(pd.read_csv(plain / "market.csv"))
    hires = pd.read_csv(both / "market_hires.csv")
    assert (
        hires[hires["policy"] == "base"]
        .reset_index(drop=True)
        .equals(pd.read_csv(plain / "market_hires.csv"))
    )
    # Every trajectory starts from the same workforce, so its first applicants are the base's.
    wide = table.set_index(["policy", "cycle", "group"])
    for policy in ("same", "redacted"):
        assert wide.loc[policy].loc[:1].equals(wide.loc["base"].loc[:1])
    results = pd.read_parquet(both / "results.parquet")
    letters = results[results["stage"] == "apply"]
    others = letters[~letters["applies_in"].str.split("|").map(lambda keys: "base" in keys)]
    assert len(others), "no policy drew an applicant the base did not: the test tests nothing"
    own = results[results["stage"].isin(["apply", "offer"])].drop(index=others.index)
    timing = ["cached", "latency_s"]
    assert (
        own.drop(columns=[*timing, "applies_in"])
        .reset_index(drop=True)
        .equals(pd.read_parquet(plain / "results.parquet").drop(columns=timing))
    )
    calls = "SELECT key, unit_id FROM calls"
    with (
        sqlite3.connect(plain / "calls.sqlite") as one,
        sqlite3.connect(both / "calls.sqlite") as two,
    ):
        assert set(one.execute(calls)) <= set(two.execute(calls))
    per_cycle = results.groupby(["cycle", "stage"]).size().unstack()
    assert (per_cycle[["offer", "offer__same", "offer__redacted"]] == 1).all().all()
    # Every analysis reads the base's applicants only: the plain run's; the header counts the
    # letters left out.
    summaries = [json.loads((out / "summary.json").read_text()) for out in (plain, both)]
    assert summaries[0]["analyses"][0]["applications"] == 12
    assert summaries[0]["analyses"] == summaries[1]["analyses"]
    assert (summaries[0]["policy_applicants"], summaries[1]["policy_applicants"]) == (
        0,
        len(others),
    )
    page = " ".join((both / "report.html").read_text().split())
    assert f"{len(others)} letters were written by applicants only a market policy" in page


def test_the_units_grow_with_the_letters_only_a_policys_trajectory_draws(tmp_path: Path) -> None:
    """The plan counts the base's applicants' letters; those of applicants only a policy draws
    are known as the cycles open: the total grows by them, so progress never passes it and
    ends at done == total, and summary.json's units_expected (and the manifest's units) are
    the units with results. validate's plan stays the first total."""
    from biasim.simulator.engine.progress import LogProgress
    from biasim.simulator.engine.runner import RunOptions, execute, prepare
    from biasim.simulator.study.design import expected_units

    small = market(design={"agents_per_value": 5}, policies=POLICIES)
    small["roles"]["manager"]["synthetic"]["selected"] = {"by": "gender", "weights": {"male": 20}}
    path = pipeline_studies.write(tmp_path / "grow.yaml", small)
    seen: list[tuple[int, int]] = []
    stream = io.StringIO()
    with LogProgress(stream, every_s=3600) as shown:

        def factory(total: int, label: str):
            tick = shown(total, label)

            def recorded(done, errors, latency=None, now=total):
                seen.append((done, now))
                tick(done, errors, latency, now)

            return recorded

        out = tmp_path / "run"
        outcome = execute(prepare(RunOptions(study=str(path), out=out)), progress=factory)
    assert outcome.status == "complete"
    letters = outcome.results[outcome.results["stage"] == "apply"]
    others = int((~letters["applies_in"].str.split("|").map(lambda keys: "base" in keys)).sum())
    assert others, "no policy drew an applicant the base did not: the test tests nothing"
    plan = expected_units(load_study(str(path)).config)
    assert seen[0][1] == plan and seen[-1] == (plan + others, plan + others)
    assert all(done <= total for done, total in seen)
    assert f"{plan + others}/{plan + others} units (100%)" in stream.getvalue().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["units_expected"] == summary["units"] == plan + others
    assert manifest["counts"]["units"] == manifest["counts"]["units_done"] == plan + others


def test_estimate_counts_each_policys_readings_in_every_cycle(cli, tmp_path: Path) -> None:
    """6 cycles of 2 letters of the base's applicants and one reading per policy: 6 x (2 + 3)
    = 30 calls; and letters of applicants only a policy draws, once its workforce can differ
    from the base's (cycles 2..6), at most a cycle's 2 per policy: 5 x 2 x 2 = 20."""
    path = pipeline_studies.write(tmp_path / "market.yaml", market(policies=POLICIES))
    result = cli.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "up to 50 new calls" in " ".join(result.output.split())


def test_each_trajectory_reads_and_loses_the_same_seniority_places(cli, tmp_path: Path) -> None:
    """The keying the guide documents, replayed independently of the engine, in each of two
    replicate markets: every trajectory starts from its replicate's initial workforce; the
    cycle's reader is the employee at the place the (seed, readers, cycle, replicate)
    generator draws among the trajectory's own workforce in order of joining, the leaver the
    one at the place the (seed, attrition, cycle, replicate) generator draws, and the hire the
    one its own reading picked."""
    data = market(policies=POLICIES, cycles=10, market={"workforce": 3, "replicates": 2})
    out = run(cli, tmp_path, data, "keyed")
    study = load_study(pipeline_studies.write(tmp_path / "keyed.yaml", data)).config
    pool = population_specs(study, "applicants")
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"].set_index("unit_id")
    table = pd.read_csv(out / "market.csv").set_index(["replicate", "policy", "cycle", "group"])
    person = lambda spec: (dict(spec.persona.attributes)["gender"], spec.persona.name)  # noqa: E731
    differ = 0
    for rep in (0, 1):
        first = sorted(market_rng(study.seed, "workforce", 0, rep).sample(range(len(pool)), 3))
        staffs = {}
        for policy in ("base", "same", "redacted"):
            stage = "offer" if policy == "base" else f"offer__{policy}"
            staff = [person(pool[i]) for i in first]
            mine = results[(results["stage"] == stage) & (results["replicate"] == rep)]
            readings = mine.set_index("cycle")
            for cycle in range(1, 11):
                reading = readings.loc[cycle]
                draw = market_rng(study.seed, "readers/managers", cycle, rep)
                place = draw.sample(range(len(staff)), 1)
                assert staff[place[0]] == (reading["gender"], reading["persona_name"]), (
                    rep,
                    policy,
                    cycle,
                )
                leaving = market_rng(study.seed, "attrition", cycle, rep)
                del staff[leaving.sample(range(len(staff)), 1)[0]]
                hired = reading["reads"].split("|")[int(reading["selected"]) - 1]
                staff.append(tuple(letters.loc[hired, ["gender", "persona_name"]]))
            staffs[policy] = staff
        differ += sum(a != b for a, b in zip(staffs["base"], staffs["redacted"], strict=True))
        for policy, staff in staffs.items():
            last = table.loc[rep].loc[policy].loc[10]["workforce"]
            want = {g: sum(s[0] == g for s in staff) for g in ("female", "male")}
            assert last.to_dict() == want, (rep, policy)
    # The trajectories did part: the checks above compared different workforces.
    assert differ > 0
    # The replicates' keys drew different initial workforces, so the replay above could tell
    # a replicate drawn on replicate 0's keys from one drawn on its own.
    firsts = [market_rng(study.seed, "workforce", 0, r).sample(range(len(pool)), 3) for r in (0, 1)]
    assert sorted(firsts[0]) != sorted(firsts[1])


def test_replicate_zero_of_a_run_with_replicates_is_the_single_market(cli, tmp_path: Path) -> None:
    """Replicates are the outer loop: replicate 0 of a run of three, every trajectory in it
    (policies and a decomposition's), is what the run without replicates writes, and every
    replicate's trajectories start from that replicate's initial workforce."""
    switches = {"decompose": ["readers", "attrition"]}
    single = market(policies=POLICIES, market=switches)
    one = pd.read_csv(run(cli, tmp_path, single, "one") / "market.csv")
    data = market(policies=POLICIES, market={**switches, "replicates": 3})
    table = pd.read_csv(run(cli, tmp_path, data, "three") / "market.csv")
    assert sorted(table["replicate"].unique()) == [0, 1, 2]
    assert table[table["replicate"] == 0].reset_index(drop=True).equals(one)
    keys = ["policy", "off"]
    assert len(table.groupby(keys)) == 3 + 3  # base, two policies, three switch subsets
    start = table[table["cycle"] == 0].set_index(["replicate", *keys, "group"])["workforce"]
    base = start.xs(("base", "none"), level=keys)
    for (policy, off), rows in start.groupby(level=keys):
        assert rows.droplevel(keys).equals(base), (policy, off)
    # The replicates are markets of their own: their trajectories part from replicate 0's.
    last = table[table["cycle"] == 6].set_index(["replicate", *keys, "group"])
    assert not all(last.loc[r].equals(last.loc[0]) for r in (1, 2))


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
    """Managers favour men 20 to 1 when they see the name; withholding names removes it. One
    run of ten replicate 12-cycle markets (unit: the replicate market, exact over 1,024 sign
    flips): the market_effects analysis of the run flags the redaction's change in women's
    workforce share, positive at the last cycle; a policy acting as the base is found less
    surely; the analysis's numbers are the plain functions' over the run's market.csv."""
    data = market(
        policies=POLICIES,
        cycles=12,
        market={"replicates": 10},
        analyses=[{"kind": "market_effects", "name": "effects"}],
    )
    truth = {"by": "gender", "weights": {"male": 20}}
    data["roles"]["manager"]["synthetic"]["selected"] = truth
    out = run(cli, tmp_path, data, "ten")
    table = pd.read_csv(out / "market.csv")
    assert sorted(table["replicate"].unique()) == list(range(10))
    summary = json.loads((out / "summary.json").read_text())
    effects = next(a for a in summary["analyses"] if a["name"] == "effects")
    tests = pd.DataFrame(effects["tests"]).set_index("policy")
    assert tests.loc["redacted", "n_units"] == 10 and tests.loc["redacted", "p_value"] < 0.05
    assert tests.loc["same", "p_value"] > tests.loc["redacted", "p_value"]
    oracle = policy_market_tests(table[table["off"] == "none"]).set_index("policy")
    assert np.allclose(tests["p_value"], oracle.loc[tests.index, "p_value"])
    shares = policy_shares(table).query("policy == 'redacted' and group == 'female'")
    assert shares["workforce_share_change"].iloc[-1] > 0


def test_estimate_counts_every_trajectory_of_every_replicate_as_the_run_asks(
    cli, tmp_path: Path
) -> None:
    """2 replicates x 6 cycles x (2 letters of the base's applicants + base, two policies and
    the attrition-off trajectory reading) = 72 calls, and letters of applicants only another
    trajectory draws: at most, per replicate, 2 of a cycle's 2 once the workforces can differ
    (cycles 2..6) for each of the three = 30, so up to 72 + 60 = 132. The run asks 72 and one
    call per letter whose `applies_in` does not name the base."""
    data = market(policies=POLICIES, market={"replicates": 2, "decompose": ["attrition"]})
    path = pipeline_studies.write(tmp_path / "all.yaml", data)
    result = cli.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "up to 132 new calls" in " ".join(result.output.split())
    out = run(cli, tmp_path, data, "all")
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"]["applies_in"].str.split("|")
    others = int((~letters.map(lambda keys: "base" in keys)).sum())
    with sqlite3.connect(out / "calls.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 72 + others <= 132
