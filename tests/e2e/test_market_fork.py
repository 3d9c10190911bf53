"""A policy that starts at cycle k (`from_cycle: k`) forks the base's trajectory: before k it is
the base (no calls of its own), from k on it reads with its own stage copies on the base's
random numbers; with `run --replay` of a run without it, only its calls are asked (its readings,
and letters of applicants only its trajectory draws): no base call again."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from biasim.analysis.stats.market_policy import policy_market_tests
from biasim.simulator.cli import app
from biasim.simulator.kinds.market_effects import NO_TABLE
from biasim.simulator.report import schema as summary_schema
from tests import pipeline_studies
from tests.market_studies import market

SAME = {"stages": {"offer": {"author": "name"}}}
#: Withholds names from cycle 3 on (of 6).
LATE = {"stages": {"offer": {"author": "redacted"}}, "from_cycle": 3}


def run(cli, tmp_path: Path, data: dict, name: str, *extra: str) -> Path:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = cli.invoke(app, ["run", str(path), "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("start", [0, 6, 7])
def test_validate_refuses_a_start_outside_the_cycles(cli, tmp_path: Path, start: int) -> None:
    data = market(policies={"late": {**LATE, "from_cycle": start}})
    path = pipeline_studies.write(tmp_path / "fork.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    line = path.read_text().splitlines().index(f"    from_cycle: {start}") + 1
    assert f"fork.yaml:{line}: policies.late.from_cycle: cycle {start} is outside 1 .. 5" in text


def test_a_start_outside_a_market_is_refused(cli, tmp_path: Path) -> None:
    data = market(policies={"late": LATE})
    del data["cycles"], data["market"]
    path = pipeline_studies.write(tmp_path / "round.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "policies.late.from_cycle: a policy starts at a cycle only in a market" in " ".join(
        result.output.split()
    )


def test_before_its_start_a_policy_is_the_base_and_reads_nothing(cli, tmp_path: Path) -> None:
    """Two replicate markets: the late policy's market.csv rows before cycle 3 are the base's;
    its copy of `offer` has no row (no call) before cycle 3 and one a cycle from it on; at
    cycle 3 it reads with the base's workforce (same reader, same pool); its trajectory
    parts from the base's later (the managers favour men 20 to 1 when they see names)."""
    data = market(policies={"late": LATE}, market={"replicates": 2})
    data["roles"]["manager"]["synthetic"]["selected"] = {"by": "gender", "weights": {"male": 20}}
    out = run(cli, tmp_path, data, "late")
    table = pd.read_csv(out / "market.csv")
    keys = ["replicate", "cycle", "group"]
    base = table[table["policy"] == "base"].drop(columns="policy").set_index(keys)
    late = table[table["policy"] == "late"].drop(columns="policy").set_index(keys)
    before = late.index.get_level_values("cycle") < 3
    assert late[before].equals(base[before])
    assert not late[~before].equals(base[~before])
    results = pd.read_parquet(out / "results.parquet")
    copies = results[results["stage"] == "offer__late"]
    assert sorted(copies.groupby(["replicate", "cycle"]).size().items()) == [
        ((r, c), 1) for r in (0, 1) for c in range(3, 7)
    ]
    first = results[results["cycle"] == 3].set_index(["replicate", "stage"])
    for column in ("persona_name", "gender", "reads"):
        assert first.loc[(slice(None), "offer"), column].tolist() == (
            first.loc[(slice(None), "offer__late"), column].tolist()
        ), column


def test_market_effects_tests_a_late_policy_over_its_own_cycles(cli, tmp_path: Path) -> None:
    """Changes are 0 before the start; the test row names the start and is the plain
    function's over cycles >= 3; the console says so."""
    data = market(
        policies={"late": LATE},
        market={"replicates": 3},
        analyses=[{"kind": "market_effects", "name": "effects"}],
    )
    path = pipeline_studies.write(tmp_path / "effects.yaml", data)
    out = tmp_path / "effects"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    assert "late starts at cycle 3 (the base before, changes 0): test over cycles >= 3" in printed
    row = next(line for line in result.output.splitlines() if line.startswith("│ late "))
    assert [c.strip() for c in row.strip("│").split("│")][:4] == ["late", "base", "3", "3"]
    summary = json.loads((out / "summary.json").read_text())
    effects = next(a for a in summary["analyses"] if a["name"] == "effects")
    changes = pd.DataFrame(effects["effects"])
    early = changes[changes["cycle"] < 3]
    assert len(early) == 2 * 2 and (early["workforce_share_change"] == 0).all()
    (test,) = effects["tests"]
    assert test["from_cycle"] == 3 and test["n_units"] == 3
    table = pd.read_csv(out / "market.csv")
    oracle = policy_market_tests(table[table["cycle"] >= 3])
    assert test["p_value"] == pytest.approx(oracle["p_value"].iloc[0])
    assert test["statistic"] == pytest.approx(oracle["statistic"].iloc[0], nan_ok=True)


@pytest.mark.parametrize("first", [{}, {"same": SAME}], ids=["base", "base+policy"])
def test_replay_of_a_run_asks_only_the_late_policys_calls(cli, tmp_path: Path, first: dict) -> None:
    """A run without the late policy, then the same study with it and `--replay FIRST`: every
    base (and old policy) answer comes from the store, and the calls made are the late
    policy's: its readings in cycles 3..6 (4 of them) and the letters of applicants only its
    trajectory draws (each trajectory draws its own applicants from the people it does not
    employ); the first run's trajectories are unchanged. 10 people and managers who favour
    men when they see names: the late policy hires others than the base, and one of its
    applicants is someone the base employs (one letter here in each case)."""
    small = {"design": {"agents_per_value": 5}}
    study = market(**small, policies=first)
    study["roles"]["manager"]["synthetic"]["selected"] = {"by": "gender", "weights": {"male": 20}}
    one = run(cli, tmp_path, study, "first")
    path = pipeline_studies.write(
        tmp_path / "second.yaml", {**study, "policies": {**first, "late": LATE}}
    )
    two = tmp_path / "second"
    result = cli.invoke(app, ["run", str(path), "--out", str(two), "--replay", str(one)])
    assert result.exit_code == 0, result.output
    results = pd.read_parquet(two / "results.parquet")
    asked = results[~results["cached"]]
    readings = asked[asked["stage"] == "offer__late"]
    assert sorted(readings["cycle"]) == [3, 4, 5, 6]
    letters = asked[asked["stage"] == "apply"]
    assert len(asked) == len(readings) + len(letters)
    assert len(letters) == 1
    assert (letters["applies_in"] == "late").all() and (letters["cycle"] > 3).all()
    calls = 12 + 6 * (1 + len(first))  # letters, the base's and the old policy's readings
    text = " ".join(result.output.split())
    assert f"new calls: {len(asked)}, from cache: {calls} calls" in text
    with sqlite3.connect(two / "calls.sqlite") as conn:
        made = conn.execute("SELECT stage FROM calls WHERE NOT from_store").fetchall()
    assert sorted(made) == sorted((s,) for s in asked["stage"])
    old = pd.read_csv(one / "market.csv")
    new = pd.read_csv(two / "market.csv")
    assert new[new["policy"].isin(old["policy"])].reset_index(drop=True).equals(old)


def test_estimate_counts_a_late_policys_readings_from_its_start(cli, tmp_path: Path) -> None:
    """2 replicates x (6 cycles x (2 letters + the base's reading) + 4 cycles of the late
    policy's reading) = 2 x 22 = 44, and the letters of applicants only the late policy
    draws: none at cycle 3 (the base's workforce), at most a cycle's 2 from cycle 4 on, so
    up to 2 x 3 x 2 = 12 more: up to 56. The run asks 44 and one call per such letter."""
    data = market(policies={"late": LATE}, market={"replicates": 2})
    path = pipeline_studies.write(tmp_path / "late.yaml", data)
    result = cli.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "up to 56 new calls" in " ".join(result.output.split())
    out = run(cli, tmp_path, data, "late")
    letters = pd.read_parquet(out / "results.parquet").query("stage == 'apply'")
    others = int((letters["applies_in"] == "late").sum())
    with sqlite3.connect(out / "calls.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 44 + others <= 56


@pytest.mark.slow
def test_power_counts_a_late_policys_test_over_its_own_cycles(cli, tmp_path: Path) -> None:
    """`biasim power` on a market whose policies start at cycle 3: every simulated study runs
    the forks, and each policy's test (cycles >= 3, unit the replicate market) is counted with
    its start in its name; a late policy the test double cannot tell from the base (it shows
    the names the base shows) is said to declare no effect rather than given a power."""
    data = market(
        policies={"late": LATE, "same": {**SAME, "from_cycle": 3}},
        market={"replicates": 3},
        analyses=[{"kind": "market_effects", "name": "effects"}],
    )
    path = pipeline_studies.write(tmp_path / "power.yaml", data)
    args = ["power", str(path), "--agents", "20", "--studies", "2", "--workers", "1"]
    result = cli.invoke(app, [*args, "--out", str(tmp_path / "power")])
    assert result.exit_code == 0, result.output
    assert "not counted" not in result.output
    rows = pd.read_csv(tmp_path / "power" / "power.csv").set_index("test")
    assert set(rows.index) == {"late vs base from cycle 3", "same vs base from cycle 3"}
    assert (rows["unit"] == "replicate, 3 units").all()
    assert rows.loc["late vs base from cycle 3", "effect_declared"]
    assert not rows.loc["same vs base from cycle 3", "effect_declared"]
    # 3 replicate markets: the sign-flip test's smallest p is 2/8, so its power is 0 whatever
    # the effect, and the table says why instead of a bare 0 %.
    assert rows.loc["late vs base from cycle 3", "smallest_p"] == 0.25
    said = " ".join(result.output.split())
    assert "0% (too few" in said and "no p below 0.25 is reachable" in said, result.output


def test_compare_of_runs_with_a_late_policy_says_why_the_market_kinds_are_not_computed(
    cli, tmp_path: Path
) -> None:
    """`biasim compare` of two runs of a market with a policy from cycle 3: no traceback; the
    market kinds, which read a run's market.csv, say in the console and summary.json that a
    comparison has none (each run's own report holds them), and the summary validates."""
    data = market(
        policies={"late": LATE},
        market={"replicates": 2},
        analyses=[
            {"kind": "market", "name": "composition"},
            {"kind": "market_effects", "name": "effects"},
        ],
    )
    first = run(cli, tmp_path, data, "a")
    shutil.copytree(first, tmp_path / "b")
    out = tmp_path / "cmp"
    result = cli.invoke(app, ["compare", str(first), str(tmp_path / "b"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "composition (market): composition over cycles not computed: no market.csv" in text
    assert f"effects (market_effects): market effects over cycles {NO_TABLE}" in text
    summary = json.loads((out / "summary.json").read_text())
    jsonschema.Draft202012Validator(summary_schema.summary_schema()).validate(summary)
    parts = {a["name"]: a for a in summary["analyses"]}
    assert parts["effects"]["note"] == NO_TABLE and parts["effects"]["tests"] == []
    assert parts["composition"]["unavailable"].startswith("no market.csv")
