"""A market's drift decomposed: each subset of the switches runs as a trajectory on the base's
random numbers, and switching a mechanism off does what the guide says it does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.market_decompose import decompose_drift
from biasim.simulator.cli import app
from tests import pipeline_studies
from tests.market_studies import MARKET, market

SWITCHES = ["readers", "attrition"]


def run(cli, tmp_path: Path, data: dict, name: str) -> Path:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_each_subset_of_switches_runs_on_the_bases_random_numbers(cli, tmp_path: Path) -> None:
    out = run(cli, tmp_path, market(market={"decompose": SWITCHES}), "dec")
    table = pd.read_csv(out / "market.csv")
    offs = ["none", "readers", "attrition", "readers|attrition"]
    assert list(dict.fromkeys(table["off"])) == offs and (table["policy"] == "base").all()
    plain = pd.read_csv(run(cli, tmp_path, MARKET, "plain") / "market.csv")
    assert table[table["off"] == "none"].reset_index(drop=True).equals(plain)
    per = table.groupby(["off", "cycle"])[["readers", "hires", "left", "workforce"]].sum()
    for off in offs:
        later = per.loc[off].loc[1:]
        assert (later["hires"] == 1).all()
        # Attrition off: nobody leaves, the workforce grows by its hire each cycle.
        grows = "attrition" in off
        assert (later["left"] == (0 if grows else 1)).all()
        assert later["workforce"].tolist() == ([5, 6, 7, 8, 9, 10] if grows else [4] * 6)
        # Readers off: nobody reads (a random pick, no call).
        assert (later["readers"] == (0 if "readers" in off else 1)).all()
    wide = table.set_index(["off", "cycle", "group"])
    results = pd.read_parquet(out / "results.parquet")
    # The two trajectories without readers pick the same applicants (one random pick a cycle)
    # in every cycle they draw the same applicants (each draws from the people it does not
    # employ; with attrition off it employs more): the first at least.
    letters = results[results["stage"] == "apply"]
    drawn = {
        key: letters[letters["applies_in"].str.split("|").map(lambda keys, k=key: k in keys)]
        .groupby("cycle")["agent_id"]
        .apply(frozenset)
        for key in ("off_readers", "off_readers_attrition")
    }
    same = [c for c in range(1, 7) if drawn["off_readers"][c] == drawn["off_readers_attrition"][c]]
    assert same[:1] == [1]
    off, both_off = wide.loc["readers"], wide.loc["readers|attrition"]
    for cycle in same:
        assert off.loc[cycle, "hires"].equals(both_off.loc[cycle, "hires"])
    assert sorted(results["stage"].unique()) == ["apply", "offer", "offer__off_attrition"]
    found = decompose_drift(table, SWITCHES)
    women = found[found["group"] == "female"].groupby("cycle")
    whole = women["drift"].first() - women["drift_all_off"].first()
    assert np.allclose(women["shapley"].sum(), whole)


def test_estimate_counts_the_readings_of_trajectories_whose_readers_read(
    cli, tmp_path: Path
) -> None:
    """6 cycles of 2 letters, the base's reading and the attrition-off trajectory's: 24; and
    the letters of applicants only a switched trajectory draws, at most a cycle's 2 for each
    of the three once their workforces can differ from the base's (cycles 2..6): 30."""
    path = pipeline_studies.write(tmp_path / "m.yaml", market(market={"decompose": SWITCHES}))
    result = cli.invoke(app, ["estimate", str(path)])
    assert result.exit_code == 0, result.output
    assert "up to 54 new calls" in " ".join(result.output.split())


def test_readers_switched_off_pick_uniformly(cli, tmp_path: Path) -> None:
    """Managers favour men 20 to 1; switched off, the pick among a man and a woman is a coin:
    over 60 cycles of pools of 2 the women hired from mixed pools are within 3 standard errors
    of half (a reader's pick would give about 1 in 21)."""
    data = market(market={"decompose": ["readers"]}, cycles=60)
    data["roles"]["manager"]["synthetic"]["selected"] = {"by": "gender", "weights": {"male": 20}}
    table = pd.read_csv(run(cli, tmp_path, data, "coin") / "market.csv")
    wide = table[table["cycle"] >= 1].pivot_table(
        index="cycle", columns=["off", "group"], values=["applicants", "hires"]
    )
    mixed = wide[("applicants", "none", "female")] == 1
    women = wide.loc[mixed, ("hires", "readers", "female")]
    n = len(women)
    assert n >= 15
    assert abs(women.mean() - 0.5) <= 3 * np.sqrt(0.25 / n)
    assert wide.loc[mixed, ("hires", "none", "female")].mean() < 0.25


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"market": {"decompose": ["bias"]}}, "market.decompose", "no switch `bias`"),
        (
            {
                "market": {"decompose": ["attrition"]},
                "policies": {"off_x": {"stages": {"offer": {"author": "redacted"}}}},
            },
            "policies.off_x",
            "decomposition's trajectories",
        ),
    ],
)
def test_validation_refuses_a_decomposition_it_cannot_run(
    cli, tmp_path: Path, changes: dict, field: str, reason: str
) -> None:
    path = pipeline_studies.write(tmp_path / "bad.yaml", market(**changes))
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert field in text and reason in text, text


def test_switching_off_readers_that_pick_no_number_is_refused(cli, tmp_path: Path) -> None:
    data = market(market={"decompose": ["readers"]})
    data["stages"][1] = {
        "name": "offer",
        "population": "managers",
        "role": "manager",
        "reads": {"stage": "apply", "matching": "single"},
        "output": {"decision": {"type": "choice", "choices": ["yes", "no"]}},
        "advance": "decision == 'yes'",
        "prompt": "{{ document.text }}",
    }
    path = pipeline_studies.write(tmp_path / "single.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "reads one document at a time" in " ".join(result.output.split())
    data["market"]["decompose"] = ["attrition"]
    path = pipeline_studies.write(tmp_path / "single.yaml", data)
    assert cli.invoke(app, ["validate", str(path)]).exit_code == 0


def test_the_market_effects_analysis_prints_reports_and_writes_its_tables(
    cli, tmp_path: Path
) -> None:
    data = market(
        market={"decompose": SWITCHES},
        policies={"redacted": {"stages": {"offer": {"author": "redacted"}}}},
        analyses=[{"kind": "market_effects", "name": "effects"}],
    )
    path = pipeline_studies.write(tmp_path / "fx.yaml", data)
    out = tmp_path / "fx"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "market effects over cycles" in line)
    shown = "\n".join(lines[start : start + 20])
    assert "1 row not shown (kept in the CSV tables): no test (one replicate market" in " ".join(
        shown.split()
    ), shown
    assert "row: redacted" in shown, shown
    assert "attrition off removes" in shown and "Shapley" in shown, shown
    assert all(len(line) <= 80 for line in lines[start : start + 20]), shown
    tables = {
        name: pd.read_csv(out / "tables" / f"effects_{name}.csv")
        for name in ("effects", "decomposition")
    }
    # What the console shows at the last cycle is the table's row.
    table = pd.read_csv(out / "market.csv")
    last = table.query("cycle == 6 and group == 'female' and off == 'none'").set_index("policy")
    share = last["workforce"] / 4
    row = tables["effects"].query("cycle == 6 and group == 'female'").iloc[0]
    assert np.isclose(row["workforce_share_change"], share["redacted"] - share["base"])
    assert f"{share['base']:.3f} -> {share['redacted']:.3f}" in shown
    assert set(tables["decomposition"]["switch"]) == set(SWITCHES)
    assert "Market effects" in (out / "report.html").read_text(encoding="utf-8")
    again = cli.invoke(app, ["analyze", str(out)])
    assert again.exit_code == 0, again.output
    assert "market effects over cycles" in again.output


def test_market_effects_needs_a_market_with_something_to_compare(cli, tmp_path: Path) -> None:
    data = market(analyses=[{"kind": "market_effects"}])
    path = pipeline_studies.write(tmp_path / "none.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "no `policies:` and no `market.decompose`" in " ".join(
        result.output.split()
    ), result.output
