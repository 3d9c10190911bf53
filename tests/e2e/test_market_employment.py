"""Nobody is employed twice at once: applicants come only from the people out of work (in every
trajectory), and market.csv's workforce counts distinct people."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.engine.market import MarketModel
from tests import pipeline_studies
from tests.market_studies import market

#: 10 people, 4 employed (8 at most in two trajectories, leaving the 2 applicants): before the
#: fix two cycles in three drew an employee among the applicants.
SMALL = {"design": {"agents_per_value": 5}, "cycles": 8}
POLICIES = {"redacted": {"stages": {"offer": {"author": "redacted"}}}}


def employed_per_cycle(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int, list[int]]]:
    """(trajectory, replicate, cycle, the people it employs) after every closed cycle."""
    seen: list[tuple[str, int, int, list[int]]] = []
    close = MarketModel._close_cycle

    def spy(self: MarketModel) -> None:
        close(self)
        for key, trajectory in self.trajectories.items():
            people = [e.person for e in trajectory.staff]
            seen.append((key, self.replicate, self.cycle, people))

    monkeypatch.setattr(MarketModel, "_close_cycle", spy)
    return seen


@pytest.mark.parametrize("policies", [False, True], ids=["base", "policies"])
def test_no_person_is_employed_twice(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policies: bool
) -> None:
    seen = employed_per_cycle(monkeypatch)
    data = market(**SMALL, market={"replicates": 3})
    if policies:
        data["policies"] = POLICIES
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(seen) == 3 * 8 * (2 if policies else 1)
    table = pd.read_csv(out / "market.csv")
    workforce = table.groupby(["policy", "replicate", "cycle"])["workforce"].sum()
    for key, replicate, cycle, people in seen:
        repeats = {p: n for p, n in Counter(people).items() if n > 1}
        assert not repeats, (key, replicate, cycle, repeats)
        assert workforce[(key, replicate, cycle)] == len(set(people))
    # Every applicant was out of work in every trajectory at the cycle's start.
    assert (table["applicants_short"] == 0).all()


def test_a_population_barely_larger_than_the_workforce_is_short_of_applicants(
    cli, tmp_path: Path
) -> None:
    """6 people, 4 employed, 2 applicants a cycle, nobody leaving: after the first hire one
    person is out of work; market.csv says how many applicants were missing and how many
    openings went unfilled, and the run says so."""
    data = market(
        design={"agents_per_value": 3},
        cycles=3,
        market={"openings": 1, "attrition": {"leavers": 0}},
        analyses=[{"kind": "market", "name": "composition"}],
    )
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "market.csv")
    per_cycle = table.groupby("cycle")[["applicants", "workforce"]].sum()
    short = table.groupby("cycle")["applicants_short"].first()
    unfilled = table.groupby("cycle")["unfilled"].first()
    # One person left out of work: one applicant, and a pool of 2 cannot form, so no hire.
    assert per_cycle["workforce"].tolist() == [4, 5, 5, 5]
    assert per_cycle["applicants"].tolist() == [0, 2, 1, 1]
    assert short.tolist() == [0, 0, 1, 1]
    assert unfilled.tolist() == [0, 0, 1, 1]
    assert "2 cycle(s) short of applicants, 2 applicant(s) missing" in result.output
    assert "2 opening(s) unfilled in 2 cycle(s)" in result.output
    # The market kind says so in the console and the report.
    text = " ".join(result.output.split())
    assert "unfilled openings: 2 in 2 of 3 market-cycles" in text
    assert "applicants missing: 2 in 2 market-cycles" in text
    report = (out / "report.html").read_text()
    assert "unfilled openings: 2 in 2 of 3 market-cycles" in report


def test_a_workforce_emptied_by_unfilled_openings_stops_the_run_with_the_reason(
    cli, tmp_path: Path
) -> None:
    """Both employees leave every cycle and a committee of two hires only when both pick the
    same applicant (`aggregate: all`): a cycle without a hire leaves nobody to read in the
    next. The run stops with the reason, not a traceback, and does not offer a resume that
    would end the same way; market.csv records the unfilled openings up to there."""
    data = market(
        cycles=8,
        market={"workforce": 2, "openings": 2, "attrition": {"leavers": 2}},
    )
    data["populations"]["managers"]["count"] = 2
    data["stages"][1]["readers"] = {"count": 2, "aggregate": "all"}
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    text = " ".join(result.output.split())
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert "the workforce is empty at the cycle's start" in text
    assert "resuming would end here again" in text and "--resume" not in text
    table = pd.read_csv(out / "market.csv")
    closed = table[table["cycle"] > 0].drop_duplicates("cycle").set_index("cycle")
    last = int(closed.index.max())
    assert last < 8 and closed.loc[last, "unfilled"] == 2
    assert table[table["cycle"] == last]["workforce"].sum() == 0


def test_validate_refuses_more_applicants_than_people_out_of_work(cli, tmp_path: Path) -> None:
    data = market(design={"agents_per_value": 2})  # 4 people, a workforce of 4
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    result = cli.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "per_cycle" in result.output and "employees do not apply" in result.output
