"""The `market` analysis kind on real market runs: per-cycle composition with intervals over
replicate markets (none with one market, and why), impact ratios that equal the per-cycle
audit's, drift tests named by their unit, and refusals where there is no market."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from rich.console import Console

from biasim.simulator.cli import app
from biasim.simulator.kinds import get_kind
from biasim.simulator.report import schema as summary_schema
from biasim.simulator.report.outputs import print_report
from tests import pipeline_studies
from tests.builtin_runs import run_builtin
from tests.market_studies import market

ANALYSES = [
    {"kind": "market", "name": "composition"},
    {"kind": "pipeline", "name": "hiring", "stages": ["offer"], "groups": ["gender"]},
]


def run(cli, tmp_path: Path, replicates: int) -> tuple[Path, dict]:
    data = market(market={"replicates": replicates}, analyses=ANALYSES)
    path = pipeline_studies.write(tmp_path / f"r{replicates}.yaml", data)
    out = tmp_path / f"r{replicates}"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    return out, summary


def section(summary: dict) -> dict:
    return next(a for a in summary["analyses"] if a["kind"] == "market")


def console_text(summary: dict, width: int = 80) -> str:
    buffer = io.StringIO()
    print_report(summary, Console(file=buffer, width=width, color_system=None, markup=False))
    return buffer.getvalue()


def test_replicate_markets_give_shares_with_intervals_and_a_drift_test(cli, tmp_path: Path) -> None:
    out, summary = run(cli, tmp_path, 5)
    jsonschema.Draft202012Validator(summary_schema.summary_schema()).validate(summary)
    part = section(summary)
    assert (part["replicates"], part["cycles"], part["unit"]) == (5, 6, "replicate market")
    table = pd.read_csv(out / "market.csv")
    rows = pd.DataFrame(part["trajectory"]).set_index(["measure", "cycle", "group"])
    # The workforce share at cycle 3, from market.csv by hand: the mean over the 5 markets.
    at3 = table[table["cycle"] == 3].pivot(index="replicate", columns="group", values="workforce")
    women = (at3["female"] / at3.sum(axis=1)).mean()
    assert rows.loc[("workforce", 3, "female"), "mean"] == women
    assert (rows["n_replicates"] <= 5).all()
    assert (rows["ci_low"] <= rows["mean"]).all() and (rows["mean"] <= rows["ci_high"]).all()
    drift = {row["group"]: row for row in part["drift"]}
    assert drift["female"]["unit"] == "replicate market" and drift["female"]["n_units"] == 5
    tests = get_kind("market").power_tests(part)
    assert {t.unit for t in tests.values()} == {"replicate"}
    text = console_text(summary)
    assert max(map(len, text.splitlines())) <= 80
    text = " ".join(text.split())
    assert "share per cycle by gender" in text and "over the 5 replicate markets" in text
    assert "composition: drift of the workforce's composition" in text
    assert "one-sample t test of each market's change of workforce share" in text
    # Two groups: one drift test, shown once; the other group's row is named as its repeat.
    why = "the same test as the first group's (two groups: the shares add up to 1"
    assert "1 row not shown" in text and why in text and "row: male" in text
    assert len(tests) == 1 and [r["same_test_as"] for r in part["drift"]] == ["", "female"]
    page = " ".join((out / "report.html").read_text().split())
    assert "share per cycle by gender" in page and "t interval" in page
    assert why.replace("'", "&#x27;") in page or why in page
    assert (out / "tables" / "composition_trajectory.csv").is_file()
    for figure in ("composition_trajectories.png", "composition_funnel.png"):
        assert (out / "figures" / figure).is_file()
    assert "band: 95% t interval of the mean share over the 5 replicate markets" in page


def test_one_market_prints_its_trajectory_without_intervals_and_says_why(
    cli, tmp_path: Path
) -> None:
    out, summary = run(cli, tmp_path, 1)
    part = section(summary)
    assert part["drift"] == [] and all(r["ci_low"] is None for r in part["trajectory"])
    text = " ".join(console_text(summary).split())
    assert "one replicate market: the trajectory is one draw" in text
    page = " ".join((out / "report.html").read_text().split())
    assert "band: none, one replicate market" in page
    assert "drift: no test with one replicate market" in text
    assert get_kind("market").power_tests(part) == {}


def test_the_per_cycle_audit_has_the_kinds_impact_ratios(cli, tmp_path: Path) -> None:
    """`audit --format ll144` on a market: one row per cycle and group, its selection rates
    and impact ratios those of the kind (one derivation, two routes)."""
    out, summary = run(cli, tmp_path, 3)
    result = cli.invoke(app, ["audit", str(out), "--analysis", "hiring"])
    assert result.exit_code == 0, result.output
    audited = pd.read_csv(out / "audit" / "hiring" / "ll144_sex.csv").set_index(["cycle", "gender"])
    kinds = pd.DataFrame(section(summary)["impact_ratios"]).set_index(["cycle", "group"])
    assert len(audited) == len(kinds) == 12
    for key, row in kinds.iterrows():
        assert audited.loc[key, "n"] == row["applicants"]
        assert audited.loc[key, "n_selected"] == row["hires"]
        assert abs(audited.loc[key, "impact_ratio"] - row["impact_ratio"]) < 1e-9


def test_the_audit_counts_hires_not_all_those_advanced(cli, tmp_path: Path) -> None:
    """4 applicants in 2 pools, the manager advances one of each, 1 opening: the audit's
    selected per cycle and gender are market.csv's hires (the same list of hires), not the 2
    advanced a cycle."""
    data = market(
        market={"replicates": 3, "applicants": {"population": "applicants", "per_cycle": 4}},
        analyses=ANALYSES,
    )
    path = pipeline_studies.write(tmp_path / "wide.yaml", data)
    out = tmp_path / "wide"
    assert cli.invoke(app, ["run", str(path), "--out", str(out)]).exit_code == 0
    result = cli.invoke(app, ["audit", str(out), "--analysis", "hiring"])
    assert result.exit_code == 0, result.output
    audited = pd.read_csv(out / "audit" / "hiring" / "ll144_sex.csv").set_index(["cycle", "gender"])
    table = pd.read_csv(out / "market.csv")
    counts = table[table["cycle"] > 0].groupby(["cycle", "group"])[["applicants", "hires"]].sum()
    assert len(audited) == len(counts) == 12
    for (cycle, group), row in counts.iterrows():
        assert audited.loc[(cycle, group), "n"] == row["applicants"]
        assert audited.loc[(cycle, group), "n_selected"] == row["hires"]
    # One hire a cycle in each of the 3 markets, though two were advanced.
    assert (audited.groupby(level="cycle")["n_selected"].sum() == 3).all()


def test_validate_refuses_the_kind_without_a_market(cli, tmp_path: Path) -> None:
    data = pipeline_studies.study()
    data["analyses"] = [{"kind": "market"}]
    path = pipeline_studies.write(tmp_path / "single.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "declares no `cycles:` and `market:`" in " ".join(result.output.split())


def test_the_labor_market_study_prints_composition_with_intervals_and_its_figures(
    tmp_path: Path, cli
) -> None:
    """`biasim run labor_market --backend synthetic` (its smallest size): per-cycle composition
    with intervals over its 20 markets, the drift its truth declares, the figures and the
    report section; `analyze run` recomputes it, `compare` says why it cannot."""
    out = run_builtin("labor_market", tmp_path / "run")
    summary = json.loads((out / "summary.json").read_text())
    part = section(summary)
    assert (part["replicates"], part["cycles"]) == (20, 10)
    text = " ".join(console_text(summary).split())
    assert "composition: share per cycle by gender" in text
    assert "over the 20 replicate markets" in text
    # Managers who favour men (2 to 1) move the workforce to men: the drift test sees it.
    drift = {row["group"]: row for row in part["drift"]}
    assert drift["male"]["change"] > 0 and drift["male"]["p_value"] < 0.05
    for figure in ("composition_trajectories.png", "composition_funnel.png"):
        assert (out / "figures" / figure).is_file()
    for side in ("a", "b"):
        shutil.copytree(out, tmp_path / side)
    compared = cli.invoke(
        app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]
    )
    assert compared.exit_code == 0, compared.output
    assert "not computed: no market.csv" in " ".join(compared.output.split())
    again = cli.invoke(app, ["analyze", "run", str(tmp_path / "a")])
    assert again.exit_code == 0, again.output
    redone = section(json.loads((tmp_path / "a" / "summary.json").read_text()))
    assert redone["trajectory"] == part["trajectory"]


@pytest.mark.slow
def test_power_counts_the_drift_tests_over_replicate_markets(cli, tmp_path: Path) -> None:
    """`biasim power` on a market study: each simulated study is a whole run of replicate
    markets (through the engine), and its tests are the drift tests, unit the replicate."""
    data = market(cycles=3, market={"replicates": 4}, analyses=ANALYSES[:1])
    path = pipeline_studies.write(tmp_path / "power.yaml", data)
    args = ["power", str(path), "--agents", "20", "--studies", "3", "--workers", "1"]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ composition")]
    assert len(rows) == 1  # two groups: one drift test, its unit the replicate market
    assert all("drift of" in row and "replicate, 4" in row for row in rows)


def test_the_market_kind_shows_the_base_market_of_a_run_with_trajectories(
    cli, tmp_path: Path
) -> None:
    """With policies and a decomposition, market.csv holds every trajectory of every
    replicate; the `market` kind reads the base's (policy base, nothing off) only: the numbers
    of a run without them (each trajectory draws its own applicants; test_market_policies
    holds the base to the run without policies)."""
    data = market(
        market={"replicates": 3, "decompose": ["attrition"]},
        policies={"redacted": {"stages": {"offer": {"author": "redacted"}}}},
        analyses=[ANALYSES[0]],
    )
    path = pipeline_studies.write(tmp_path / "more.yaml", data)
    out = tmp_path / "more"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "market.csv")
    assert len(table.groupby(["policy", "off"])) == 3
    more = section(json.loads((out / "summary.json").read_text()))
    base = table[(table["policy"] == "base") & (table["off"] == "none") & (table["cycle"] > 0)]
    counts = base.groupby(["cycle", "group"])[["applicants", "hires"]].sum()
    assert more["replicates"] == 3 and len(more["impact_ratios"]) == len(counts) == 12
    for row in more["impact_ratios"]:
        assert counts.loc[(row["cycle"], row["group"])].tolist() == [
            row["applicants"],
            row["hires"],
        ]
    # The workforce share at the last cycle: the base's alone, by hand.
    last = base[base["cycle"] == 6].pivot(index="replicate", columns="group", values="workforce")
    women = (last["female"] / last.sum(axis=1)).mean()
    found = {(r["measure"], r["cycle"], r["group"]): r for r in more["trajectory"]}
    assert found[("workforce", 6, "female")]["mean"] == pytest.approx(women)
