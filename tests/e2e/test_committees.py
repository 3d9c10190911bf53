"""Committees and selection rules end to end on the synthetic responder: each member is its own
reader, call and row; the stage's decided row combines the members' picks as declared and the
next stage reads exactly what was decided; a selection rule across pools decides after every
pool is read; ``estimate`` counts every member's call; refusals at validate name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from tests import pipeline_studies
from tests.market_studies import market


def invoke(cli, *args):
    return cli.invoke(app, [str(a) for a in args])


def committee_study(**screen) -> dict:
    data = pipeline_studies.study()
    data["stages"][1].update(screen)
    return data


def run(cli, tmp_path: Path, data: dict) -> pd.DataFrame:
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    result = invoke(cli, "run", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    return pd.read_parquet(tmp_path / "out" / "results.parquet")


def labels(value) -> set[str]:
    return set(value.split("|")) if isinstance(value, str) and value else set()


def offer_pools(results: pd.DataFrame) -> dict[str, set[str]]:
    offer = results[results["stage"] == "offer"]
    return dict(zip(offer["cluster"], offer["reads"].map(labels), strict=True))


def advanced_units(rows: pd.DataFrame) -> dict[str, set[str]]:
    """Per pool, the documents (unit ids) its ``advanced`` labels name."""
    out = {}
    for _, row in rows.iterrows():
        shown = row["reads"].split("|")
        out[row["cluster"]] = {shown[int(label) - 1] for label in labels(row["advanced"])}
    return out


@pytest.mark.parametrize("aggregate", ["any", "all", "majority"])
def test_a_committee_reads_each_pool_by_other_readers_and_decides_as_declared(
    tmp_path: Path, cli, aggregate: str
) -> None:
    results = run(cli, tmp_path, committee_study(readers={"count": 2, "aggregate": aggregate}))
    members = {j: results[results["stage"] == f"screen.reader{j}"] for j in (1, 2)}
    decided = results[results["stage"] == "screen"]
    assert len(decided) == len(members[1]) == len(members[2]) == 8
    for j in (1, 2):
        assert (members[j]["committee"] == "screen").all() and members[j]["valid"].all()
        # Every member reads the very pool the stage decides, with its own picks.
        assert list(members[j]["reads"]) == list(decided["reads"])
        assert (members[j]["selected"].map(labels).map(len) == 3).all()
    # Two screeners in the population: the members of a committee are different readers.
    assert (members[1]["agent_id"].to_numpy() != members[2]["agent_id"].to_numpy()).all()
    combine = {"any": set.union, "all": set.intersection, "majority": set.intersection}
    for one, two, (_, row) in zip(
        members[1].itertuples(), members[2].itertuples(), decided.iterrows(), strict=True
    ):
        assert labels(row["advanced"]) == combine[aggregate](
            labels(one.advanced), labels(two.advanced)
        )
        assert row["members"].split("|") == [one.unit_id, two.unit_id]
        assert one.unit_id == row["unit_id"] + "/reader1"
        assert row["prompt_tokens"] == 0 and row["status"] == "answered"
    # The manager reads exactly the documents the committee advanced, pool by pool.
    chosen = {c: u for c, u in advanced_units(decided).items() if u}
    assert offer_pools(results) == {c: u for c, u in chosen.items() if len(u) > 1}
    # The committee's picks are no k-of-size draw: no position test against k / size.
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    pipeline = next(a for a in summary["analyses"] if a["kind"] == "pipeline")
    assert {r["stage"] for r in pipeline["position_effect"]} == {"offer"}


def test_estimate_counts_every_members_call(tmp_path: Path, cli) -> None:
    data = committee_study(readers={"count": 2, "aggregate": "any"})
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    result = invoke(cli, "estimate", path)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("screen"))
    assert line.split()[2:4] == ["<=", "16"]  # 8 pools, 2 members each
    results = run(cli, tmp_path, data)
    assert results["stage"].str.startswith("screen.reader").sum() == 16
    # The summary counts units of work as the progress does: a decided row is none.
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert len(results) == 64 + 16 + 8 + 8 and summary["units"] == 64 + 16 + 8


def test_global_top_k_advances_k_across_pools_and_the_next_stage_reads_them(
    tmp_path: Path, cli
) -> None:
    results = run(cli, tmp_path, committee_study(selection={"rule": "global_top_k", "k": 20}))
    screen = results[results["stage"] == "screen"]
    chosen = advanced_units(screen)
    assert sum(len(u) for u in chosen.values()) == 20
    # The pools' own picks (3 each) are kept beside the rule's decision.
    assert (screen["pool_advanced"].map(labels).map(len) == 3).all()
    # One reader per pool: support is 1 for its picks, so all 20 are pool picks.
    own = advanced_units(screen.assign(advanced=screen["pool_advanced"]))
    assert all(chosen[c] <= own[c] for c in chosen)
    assert offer_pools(results) == {c: u for c, u in chosen.items() if len(u) > 1}


def test_four_fifths_raises_each_groups_stage_rate_to_four_fifths_of_the_highest(
    tmp_path: Path, cli
) -> None:
    data = committee_study(selection={"rule": "four_fifths", "by": "race"})
    # A screener who strongly favours White applicants puts Black applicants below 0.8.
    data["roles"]["screener"]["synthetic"]["selected"]["weights"] = {"White": 6.0}
    results = run(cli, tmp_path, data)
    race = dict(
        zip(
            results.loc[results["stage"] == "apply", "unit_id"],
            results.loc[results["stage"] == "apply", "race"],
            strict=True,
        )
    )
    screen = results[results["stage"] == "screen"]
    read = pd.Series([race[u] for r in screen["reads"] for u in r.split("|")]).value_counts()

    def rates(column: str) -> pd.Series:
        units = advanced_units(screen.assign(advanced=screen[column]))
        picked = pd.Series([race[u] for us in units.values() for u in us]).value_counts()
        return picked.reindex(read.index, fill_value=0) / read

    pooled, final = rates("pool_advanced"), rates("advanced")
    assert pooled["Black"] < 0.8 * pooled["White"]  # the rule has something to correct
    assert final["Black"] >= 0.8 * final["White"] and final["White"] == pooled["White"]
    # The fewest added: one fewer Black applicant would leave the rate below 0.8.
    assert final["Black"] - 1 / read["Black"] < 0.8 * final["White"]


@pytest.mark.parametrize(
    ("screen", "field", "reason"),
    [
        ({"readers": {"count": 3, "aggregate": "any"}}, "readers.count", "needs as many readers"),
        (
            {"readers": {"count": 2, "aggregate": "any", "score": "x"}},
            "readers.score",
            "`score` is for `aggregate: mean_score`",
        ),
        ({"readers": {"count": 2, "aggregate": "vote"}}, "readers.aggregate", "any"),
        ({"selection": {"rule": "four_fifths", "by": "age"}}, "selection.by", "not a persona"),
        ({"selection": {"rule": "global_top_k"}}, "selection", "takes `k`"),
        (
            {"readers": {"count": 2, "aggregate": "any"}, "answer": "logprobs"},
            "answer",
            "no log-probabilities of its own",
        ),
    ],
)
def test_a_committee_or_rule_the_stage_cannot_take_is_refused(
    tmp_path: Path, cli, screen: dict, field: str, reason: str
) -> None:
    path = pipeline_studies.write(tmp_path / "study.yaml", committee_study(**screen))
    result = invoke(cli, "validate", path)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert reason in text and f"{path}:" in text and field.split(".")[0] in text


def test_mean_score_of_single_readings_needs_a_numeric_score(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    rate = {
        "name": "rate",
        "population": "screeners",
        "role": "screener",
        "reads": {"stage": "apply"},
        "output": {"score": {"type": "choice", "choices": ["low", "high"]}},
        "advance": "score == 'high'",
        "readers": {"count": 2, "aggregate": "mean_score", "score": "score"},
        "prompt": "{{ document.text }}",
    }
    data["stages"] = [data["stages"][0], rate]
    data["analyses"] = []
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    result = invoke(cli, "validate", path)
    assert result.exit_code == 2
    assert "averages a numeric answer field" in " ".join(result.output.split())


POLICIES = {
    "second_reader": {
        "description": "a second screener; the two readers' picks combined by votes",
        "stages": {"screen": {"readers": {"count": 2, "aggregate": "mean_score"}}},
    },
    "four_fifths": {
        "description": "the four-fifths rule by race at screening",
        "stages": {"screen": {"selection": {"rule": "four_fifths", "by": "race"}}},
    },
}


def test_a_second_reader_and_a_selection_rule_run_as_policies_on_the_same_pools(
    tmp_path: Path, cli
) -> None:
    data = pipeline_studies.study(policies=POLICIES)
    data["analyses"].append(
        {
            "kind": "policy_effect",
            "name": "policies",
            "stages": ["screen", "offer"],
            "groups": ["race"],
            "n_permutations": 200,
            "n_boot": 200,
        }
    )
    results = run(cli, tmp_path, data)
    screens = {
        stage: dict(zip(rows["cluster"], rows["reads"], strict=True))
        for stage, rows in results.groupby("stage")
        if stage.startswith("screen")
    }
    assert set(screens) == {
        "screen",
        "screen__second_reader",
        "screen__second_reader.reader1",
        "screen__second_reader.reader2",
        "screen__four_fifths",
    }
    # Every policy (and every committee member) reads the same documents in the same pools.
    assert all(pools == screens["screen"] for pools in screens.values())
    committee = results[results["stage"] == "screen__second_reader"]
    assert (committee["advanced"].map(labels).map(len) == 3).all()  # mean score: 3 of 8
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    section = next(a for a in summary["analyses"] if a["kind"] == "policy_effect")
    assert section["policies"] == ["base", "second_reader", "four_fifths"]
    tests = section["by_group"]["race"]["tests"]
    assert [t["policy"] for t in tests] == ["second_reader", "four_fifths"]
    assert section["applicants"] == 64 and section["clusters"] == 8
    # The rule couples the pools: the report says the pool-swap test is conservative for it.
    assert section["coupled"] == ["four_fifths"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "four_fifths: a selection rule decides across the pools" in " ".join(html.split())


def test_a_policys_committee_is_checked_where_the_policy_writes_it(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study(
        policies={"panel": {"stages": {"screen": {"readers": {"count": 3, "aggregate": "all"}}}}}
    )
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    result = invoke(cli, "validate", path)
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "policies.panel.stages.screen.readers.count" in text and "a committee of 3" in text


def test_in_a_market_the_committee_is_the_workforce_and_the_rule_picks_the_hires(
    tmp_path: Path, cli
) -> None:
    """A workforce of two, both replaced every cycle by the two hires: a committee of two is
    the whole workforce, so cycle t+1's members are exactly cycle t's hires, whom the global
    top-2 of the committee's votes chose across the cycle's pool."""
    data = market(
        market={
            "applicants": {"population": "applicants", "per_cycle": 4},
            "workforce": 2,
            "openings": 2,
            "attrition": {"leavers": 2},
        },
    )
    data["populations"]["managers"]["count"] = 2
    offer = data["stages"][1]
    offer["reads"]["size"] = 4
    offer["readers"] = {"count": 2, "aggregate": "mean_score"}
    offer["selection"] = {"rule": "global_top_k", "k": 2}
    results = run(cli, tmp_path, data)
    letters = results[results["stage"] == "apply"].set_index("unit_id")
    decided = results[results["stage"] == "offer"].set_index("cycle").sort_index()
    hired = {}
    for cycle, row in decided.iterrows():
        shown = row["reads"].split("|")
        units = [shown[int(label) - 1] for label in labels(row["advanced"])]
        assert len(units) == 2  # the rule's top 2 of the cycle's pool
        hired[cycle] = sorted(tuple(letters.loc[u, ["gender", "persona_name"]]) for u in units)
    members = results[results["stage"].str.startswith("offer.reader")]
    assert set(members["cycle"]) == set(decided.index) == set(range(1, 7))
    for cycle in range(2, 7):
        here = members[members["cycle"] == cycle]
        assert here["agent_id"].nunique() == 2  # two employees, one call each
        assert sorted(map(tuple, here[["gender", "persona_name"]].to_numpy())) == hired[cycle - 1]
    table = pd.read_csv(tmp_path / "out" / "market.csv")
    assert (table[table["cycle"] > 0].groupby("cycle")["hires"].sum() == 2).all()


def test_a_replayed_committee_run_decides_alike(tmp_path: Path, cli) -> None:
    """Every committee decision and rule is a function of the answers and seeded draws: a run
    replayed from the first one's stored answers (none asked again) decides the same."""
    data = committee_study(
        readers={"count": 2, "aggregate": "mean_score"},
        selection={"rule": "global_top_k", "k": 20},
    )
    first = run(cli, tmp_path, data)
    path = tmp_path / "study.yaml"
    result = invoke(cli, "run", path, "--replay", tmp_path / "out", "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    again = pd.read_parquet(tmp_path / "again" / "results.parquet")
    columns = ["unit_id", "stage", "reads", "advanced", "pool_advanced", "members"]
    assert again[columns].equals(first[columns])
    assert again.loc[again["members"].isna(), "cached"].all()


def test_a_committee_whose_member_failed_leaves_its_pool_undecided(tmp_path: Path, cli) -> None:
    data = committee_study(readers={"count": 2, "aggregate": "any"})
    data["roles"]["screener"]["options"] = {"fail_rate": 0.3}
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    out = tmp_path / "out"
    result = invoke(cli, "run", path, "--out", out, "--max-error-rate", "0.9")
    assert result.exit_code == 0, result.output
    results = pd.read_parquet(out / "results.parquet")
    members = results[results["stage"].str.startswith("screen.reader")]
    ok = members.groupby("cluster")["valid"].all()
    decided = results[results["stage"] == "screen"].set_index("cluster")
    assert not ok.all() and ok.any()  # the declared failures hit some committees
    assert (decided["valid"] == ok.reindex(decided.index)).all()
    failed = decided[~decided["valid"]]
    assert (failed["status"] == "skipped").all() and failed["advanced"].isna().all()
    assert failed["error"].str.contains("gave no valid answer").all()
    # Nobody of an undecided pool reaches the manager; the analysis counts them, by reason.
    assert not set(offer_pools(results)) & set(failed.index)
    summary = json.loads((out / "summary.json").read_text())
    pipeline = next(a for a in summary["analyses"] if a["kind"] == "pipeline")
    counted = {(e["stage"], e["reason"]): e["count"] for e in pipeline["exclusions"]}
    assert counted[("screen", "in an evaluation that failed")] == 8 * len(failed)
