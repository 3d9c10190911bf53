"""Referral hiring in a market: applicants referred by employees over the social graph."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.engine.market import market_rng
from biasim.simulator.engine.referrals import homophily_graph
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.design import population_specs
from biasim.simulator.study.load import load_study
from tests import pipeline_studies
from tests.e2e.test_market_runs import run
from tests.market_studies import NETWORK, market, referral_market


def person_of(unit_or_agent: str) -> str:
    """``applicants/c003/<rest>[/stage]`` -> ``applicants/<rest>``: the person of the population."""
    population, _cycle, rest = unit_or_agent.split("/", 2)
    return f"{population}/{rest}"


def graph_and_people(study_path: Path, seed: int) -> tuple:
    """The social graph a run with ``seed`` built (rebuilt here from the seed) and the index
    of each person of the applicants' population."""
    study = load_study(study_path).config
    people = population_specs(study, "applicants")
    network = study.market.network
    groups = [dict(p.persona.attributes)[network.by] for p in people]
    graph = homophily_graph(groups, network, market_rng(seed, "network", 0))
    return graph, {p.agent_id: i for i, p in enumerate(people)}


def test_referred_applicants_come_over_the_graph_from_employees(cli, tmp_path: Path) -> None:
    out = run(cli, tmp_path, referral_market(cycles=8), "ref")
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"]
    referred = letters.dropna(subset=["referred_by"])
    # Half of each cycle's 2 applicants is referred.
    assert referred.groupby("cycle").size().tolist() == [1] * 8
    graph, index = graph_and_people(tmp_path / "ref.yaml", 3)
    offers = results[results["stage"] == "offer"]
    hired = {
        cycle: person_of(row["reads"].split("|")[int(row["selected"]) - 1].removesuffix("/apply"))
        for cycle, row in offers.set_index("cycle").iterrows()
    }
    initial = {list(index)[i] for i in market_rng(3, "workforce", 0).sample(range(len(index)), 4)}
    for _, row in referred.iterrows():
        referrer, person = row["referred_by"], person_of(row["agent_id"])
        # The referrer knows the person, and is an employee: an initial one or an earlier hire.
        assert graph.has_edge(index[referrer], index[person])
        earlier = {hired[c] for c in hired if c < row["cycle"]}
        assert referrer in initial | earlier
    # Hires join with their links: some referrer was hired during the run.
    assert set(referred["referred_by"]) - initial
    # The rows that are not referred carry no referrer, and market.csv counts the referred.
    table = pd.read_csv(out / "market.csv").set_index(["cycle", "group"])
    counted = referred.groupby(["cycle", "gender"]).size()
    for (cycle, group), n in table["referred"].items():
        assert n == counted.get((cycle, group), 0)


def test_switching_referrals_off_keeps_the_population_draws(cli, tmp_path: Path) -> None:
    """Common random numbers: the applicants a cycle draws from the population with referrals
    on are drawn in that cycle with referrals off too (the first of the same draw)."""
    on = pd.read_parquet(run(cli, tmp_path, referral_market(cycles=8), "on") / "results.parquet")
    off = pd.read_parquet(run(cli, tmp_path, market(cycles=8), "off") / "results.parquet")
    assert "referred_by" not in off.columns
    drawn_off = {
        c: set(rows["agent_id"]) for c, rows in off[off["stage"] == "apply"].groupby("cycle")
    }
    population = on[(on["stage"] == "apply") & on["referred_by"].isna()]
    for cycle, rows in population.groupby("cycle"):
        assert set(rows["agent_id"]) <= drawn_off[cycle]
    # Referrals bring people the population draw did not: the designs differ.
    referred = on[(on["stage"] == "apply") & on["referred_by"].notna()]
    pairs = zip(referred["agent_id"], referred["cycle"], strict=True)
    assert any(agent not in drawn_off[cycle] for agent, cycle in pairs)


#: A reference letter that a referred applicant's referrer writes in their own voice.
LETTER = {
    "name": "reference",
    "population": "applicants",
    "role": "applicant",
    "prompt": "{% if referrer %}You are {{ referrer.name }}, a {{ referrer.description }} "
    "employee who referred {{ persona.name }}. Write in your own voice. {% endif %}"
    "Write a reference letter for {{ persona.name }}.",
}


def letters_market(**referrals: object) -> dict:
    data = referral_market(cycles=6)
    data["stages"].insert(1, dict(LETTER))
    data["market"]["referrals"] = {"share": 0.5, "letters": "reference", **referrals}
    return data


def test_a_referred_applicants_letter_is_written_by_the_referrer(cli, tmp_path: Path) -> None:
    out = run(cli, tmp_path, letters_market(), "letters")
    results = pd.read_parquet(out / "results.parquet")
    with sqlite3.connect(out / "calls.sqlite") as conn:
        prompts = {
            unit: json.loads(request)["messages"][-1]["content"]
            for unit, request in conn.execute(
                "SELECT unit_id, request FROM calls WHERE stage = 'reference'"
            )
        }
    letters = results[results["stage"] == "reference"]
    assert len(letters) == 12 and letters["referred_by"].notna().sum() == 6
    people = population_specs(load_study(tmp_path / "letters.yaml").config, "applicants")
    personas = {p.agent_id: p.persona for p in people}
    for _, row in letters.iterrows():
        prompt = prompts[row["unit_id"]]
        if pd.isna(row["referred_by"]):
            assert prompt.startswith("Write a reference letter for")
            continue
        # The referrer's persona (name and description) opens the prompt.
        referrer = personas[row["referred_by"]]
        assert prompt.startswith(
            f"You are {referrer.name}, a {referrer.description} employee who referred "
            f"{row['persona_name']}."
        )


def test_a_letters_stage_that_breaks_without_a_referrer_is_refused(cli, tmp_path: Path) -> None:
    """`referrer` is none for applicants nobody referred: validation renders both cases."""
    data = letters_market()
    data["stages"][1]["prompt"] = "You are {{ referrer.name }}. Write for {{ persona.name }}."
    path = pipeline_studies.write(tmp_path / "bad.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "stages[1].prompt" in text and "`referrer` is none here" in text, text


def final_imbalance(data: dict, tmp_path: Path, seed: int) -> float:
    """|share of women - 0.5| in the workforce at the end of a run of ``data`` with ``seed``."""
    path = pipeline_studies.write(tmp_path / f"{data['name']}.yaml", data)
    out = tmp_path / f"{data['name']}-{seed}"
    execute(prepare(RunOptions(study=str(path), out=out, seed=seed, throwaway=True)))
    table = pd.read_csv(out / "market.csv")
    last = table[table["cycle"] == table["cycle"].max()].set_index("group")["workforce"]
    return abs(last["female"] / last.sum() - 0.5)


@pytest.mark.slow
def test_referrals_over_a_homophilous_graph_make_the_workforce_drift_faster(
    tmp_path: Path,
) -> None:
    """Managers favour their own group 3 to 1 in both designs; with referrals over a graph of
    homophily 1 every applicant is also of a current employee's group. Paired on the seeds
    (common random numbers), the workforce ends further from balance with referrals, by more
    than 2 standard errors of the paired differences (a market whose referrals ignored the
    graph, or brought no one, would not)."""
    network = {**NETWORK, "homophily": 1.0}
    with_referrals = referral_market(1.0, name="on", market={"network": network})
    without = market(name="off")
    seeds = range(24)
    diffs = np.array(
        [
            final_imbalance(with_referrals, tmp_path, s) - final_imbalance(without, tmp_path, s)
            for s in seeds
        ]
    )
    se = diffs.std(ddof=1) / np.sqrt(len(diffs))
    assert diffs.mean() > 2 * se, (diffs.mean(), se)


@pytest.mark.slow
def test_referred_applicants_share_the_referrers_group_at_the_graphs_rate(
    tmp_path: Path,
) -> None:
    """Each employee knows 8 people, 6 of their own group: a referred applicant is of the
    referrer's group with probability 6/8 (up to the few neighbours who are employees or
    already applying, out of 200 people), so the observed share is 0.75 within 4 standard
    errors of a proportion of the referrals."""
    data = referral_market(
        0.5,
        cycles=12,
        market={
            "network": {**NETWORK, "degree": 8},
            "applicants": {"population": "applicants", "per_cycle": 4},
        },
        design={"agents_per_value": 100},
    )
    path = pipeline_studies.write(tmp_path / "share.yaml", data)
    people = population_specs(load_study(path).config, "applicants")
    group = {p.agent_id: dict(p.persona.attributes)["gender"] for p in people}
    same = []
    for seed in range(10):
        out = tmp_path / f"share-{seed}"
        execute(prepare(RunOptions(study=str(path), out=out, seed=seed, throwaway=True)))
        rows = pd.read_parquet(out / "results.parquet").query("stage == 'apply'")
        referred = rows.dropna(subset=["referred_by"])
        same += [
            group[r] == g for r, g in zip(referred["referred_by"], referred["gender"], strict=True)
        ]
    assert len(same) == 10 * 12 * 2
    share = np.mean(same)
    assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / len(same)), share


def test_each_replicate_market_refers_over_its_own_graph(cli, tmp_path: Path) -> None:
    """The graph is drawn per replicate market (keyed by the replicate; replicate 0's is a
    single market's): every referrer knows whom they referred in their replicate's graph, and
    replicate 0 refers exactly as the run without replicates does."""
    single = run(cli, tmp_path, referral_market(cycles=4), "one")
    out = run(cli, tmp_path, referral_market(cycles=4, market={"replicates": 2}), "two")
    results = pd.read_parquet(out / "results.parquet")
    referred = results[results["stage"] == "apply"].dropna(subset=["referred_by"])
    assert sorted(referred["replicate"].unique()) == [0, 1]
    study = load_study(tmp_path / "two.yaml").config
    people = population_specs(study, "applicants")
    index = {p.agent_id: i for i, p in enumerate(people)}
    groups = [dict(p.persona.attributes)["gender"] for p in people]
    network = study.market.network
    graphs = [homophily_graph(groups, network, market_rng(3, "network", 0, r)) for r in (0, 1)]
    assert set(graphs[0].edges) != set(graphs[1].edges)
    for _, row in referred.iterrows():
        population, *_tags, rest = row["agent_id"].split("/", 3 if row["replicate"] else 2)
        person = index[f"{population}/{rest}"]
        assert graphs[row["replicate"]].has_edge(index[row["referred_by"]], person)
    columns = ["agent_id", "referred_by", "cycle"]
    first = referred[referred["replicate"] == 0][columns].reset_index(drop=True)
    alone = pd.read_parquet(single / "results.parquet")
    alone = alone[alone["stage"] == "apply"].dropna(subset=["referred_by"])[columns]
    assert first.equals(alone.reset_index(drop=True))
