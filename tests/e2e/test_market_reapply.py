"""Reapplication in a market: rejected applicants apply again, their history in the prompt
(``applicant.history``) and in the results."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from tests.e2e.test_market_referrals import person_of
from tests.e2e.test_market_runs import run
from tests.market_studies import market

#: The cover letter names the applicant's earlier applications when there are any.
PROMPT = (
    "{% if applicant.history.applications %}I applied in cycles "
    "{{ applicant.history.cycles | join(', ') }} and was turned down "
    "{{ applicant.history.rejections }} times. {% endif %}Write a cover letter. {{ persona.name }}"
)


def test_rejected_applicants_reapply_with_their_history(cli, tmp_path: Path) -> None:
    data = market(cycles=8, market={"reapply": {"probability": 0.6}})
    data["stages"][0]["prompt"] = PROMPT
    out = run(cli, tmp_path, data, "again")
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"].sort_values("cycle")
    offers = results[results["stage"] == "offer"].set_index("cycle")
    hired = {
        cycle: person_of(row["reads"].split("|")[int(row["selected"]) - 1].removesuffix("/apply"))
        for cycle, row in offers.iterrows()
    }
    with sqlite3.connect(out / "calls.sqlite") as conn:
        prompts = {
            unit: json.loads(request)["messages"][-1]["content"]
            for unit, request in conn.execute("SELECT unit_id, request FROM calls")
        }
    seen: dict[str, list[int]] = {}
    for _, row in letters.iterrows():
        person, cycle = person_of(row["agent_id"]), row["cycle"]
        before = seen.setdefault(person, [])
        rejections = sum(hired[c] != person for c in before)
        # The history in the results is the applications before this cycle, from the rows.
        assert row["applications_before"] == len(before)
        assert row["rejections_before"] == rejections
        prompt = prompts[row["unit_id"]]
        if before:
            cycles = ", ".join(str(c) for c in before)
            assert prompt.startswith(
                f"I applied in cycles {cycles} and was turned down {rejections} times."
            )
        else:
            assert prompt.startswith("Write a cover letter.")
        if row["reapplied"]:
            assert rejections >= 1 and hired[before[-1]] != person
        before.append(cycle)
    assert letters["reapplied"].sum() >= 3  # the check saw reapplications
    table = pd.read_csv(out / "market.csv").set_index(["cycle", "group"])
    counted = letters[letters["reapplied"]].groupby(["cycle", "gender"]).size()
    for (cycle, group), n in table["reapplied"].items():
        assert n == counted.get((cycle, group), 0)


def test_without_reapplication_the_rows_carry_no_history(cli, tmp_path: Path) -> None:
    results = pd.read_parquet(run(cli, tmp_path, market(), "plain") / "results.parquet")
    assert not {"reapplied", "applications_before", "rejections_before"} & set(results.columns)
