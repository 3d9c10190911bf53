"""`biasim audit --format ll144` on a decisions CSV (against a hand-computed example) and on a
run; and `analyze --decisions` with 0/1 and true/false outcomes and per-stratum impact ratios."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from biasim.simulator.cli import app
from tests.golden_studies import STUDIES


def _decisions() -> pd.DataFrame:
    rows = []

    def add(sex: str, race: str, n: int, selected: int) -> None:
        for i in range(n):
            day = 5 + len(rows) % 20
            rows.append(
                {"sex": sex, "race": race, "hired": int(i < selected), "date": f"2026-02-{day:02d}"}
            )

    add("Female", "White", 20, 12)
    add("Male", "White", 20, 16)
    add("Female", "Black", 9, 3)
    add("Male", "Black", 10, 5)
    add("Male", "Asian", 1, 1)
    add("Female", "", 2, 0)  # race unknown: in the sex table only
    return pd.DataFrame(rows)


def test_ll144_tables_from_a_csv_equal_the_hand_computed_ones(tmp_path, cli) -> None:
    path = tmp_path / "decisions.csv"
    _decisions().to_csv(path, index=False)
    out = tmp_path / "audit"
    args = ["audit", str(path), "--format", "ll144", "--selected-col", "hired", "--out", str(out)]
    result = cli.invoke(app, [*args, "--date-col", "date"])
    assert result.exit_code == 0, result.output
    race = pd.read_csv(out / "ll144_race_ethnicity.csv").set_index("race")
    # White 28/40 = 0.7, Black 8/19, Asian 1/1 (1 of 60 with a known race: 1.7 %, flagged).
    assert race.loc["White", "selection_rate"] == pytest.approx(0.7)
    assert race.loc["Black", "selection_rate"] == pytest.approx(8 / 19)
    assert race["impact_ratio"].to_dict() == pytest.approx(
        {"White": 0.7, "Black": 8 / 19, "Asian": 1.0}
    )
    assert race["under_2pct"].to_dict() == {"White": False, "Black": False, "Asian": True}
    assert race["n"].to_dict() == {"White": 40, "Black": 19, "Asian": 1}
    sex = pd.read_csv(out / "ll144_sex.csv").set_index("sex")
    # Female 15/31 (the two of unknown race count here), Male 22/31.
    assert sex.loc["Female", "impact_ratio"] == pytest.approx((15 / 31) / (22 / 31))
    both = pd.read_csv(out / "ll144_intersectional.csv")
    assert len(both) == 5 and both["n"].sum() == 60
    audit = json.loads((out / "audit.json").read_text())
    assert audit["unknown"]["race_ethnicity"] == 2 and audit["unknown"]["sex"] == 0
    assert audit["source"]["date_range"] == ["2026-02-05", "2026-02-24"]
    page = (out / "report.html").read_text()
    assert "Bias audit (NYC Local Law 144)" in page and "2026-02-05 to 2026-02-24" in page

    # The auditor may leave the category under 2 % out of the impact ratios.
    excluded = tmp_path / "excluded"
    result = cli.invoke(app, [*args[:-1], str(excluded), "--exclude-small"])
    assert result.exit_code == 0, result.output
    race = pd.read_csv(excluded / "ll144_race_ethnicity.csv").set_index("race")
    assert race.loc["White", "impact_ratio"] == pytest.approx(1.0)
    assert race.loc["Black", "impact_ratio"] == pytest.approx((8 / 19) / 0.7)
    assert pd.isna(race.loc["Asian", "impact_ratio"]) and race.loc["Asian", "n"] == 1


def test_audit_input_errors_name_the_option_or_line(tmp_path, cli) -> None:
    frame = _decisions()
    path = tmp_path / "decisions.csv"
    frame.to_csv(path, index=False)
    no_out = cli.invoke(app, ["audit", str(path), "--selected-col", "hired"])
    assert no_out.exit_code == 2 and "--out: required when auditing a CSV" in no_out.stderr
    missing = cli.invoke(
        app, ["audit", str(path), "--selected-col", "hire", "--out", str(tmp_path / "a")]
    )
    assert missing.exit_code == 2 and "decisions.csv:1: hire: no such column" in missing.stderr
    frame["hired"] = frame["hired"].astype(str)
    frame.loc[6, "hired"] = "maybe"
    frame.to_csv(path, index=False)
    bad = cli.invoke(
        app, ["audit", str(path), "--selected-col", "hired", "--out", str(tmp_path / "b")]
    )
    assert bad.exit_code == 2
    assert "decisions.csv:8: hired: `maybe` is not 1/0, true/false or yes/no" in bad.stderr
    fmt = cli.invoke(app, ["audit", str(path), "--format", "eu-ai", "--out", str(tmp_path / "c")])
    assert fmt.exit_code == 2
    assert (
        "--format: unknown audit format `eu-ai`; did you mean `eu-ai-act`?; known: california, "
        "colorado, eeoc, eu-ai-act, ll144; a plug-in audit format is known once its package is "
        "installed with a `biasim.audit_formats` entry point"
    ) in " ".join(fmt.stderr.split())
    assert not any((tmp_path / d).exists() for d in ("a", "b", "c"))


def test_audit_of_a_run_adds_its_section_to_the_report(tmp_path, cli) -> None:
    text, _ = STUDIES["hiring_small"]
    study = tmp_path / "hiring.yaml"
    study.write_text(text)
    run = tmp_path / "run"
    assert cli.invoke(app, ["run", str(study), "--out", str(run)]).exit_code == 0
    result = cli.invoke(app, ["audit", str(run), "--format", "ll144"])
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    [(where, audit)] = summary["audits"].items()
    sex = pd.read_csv(run / where / "ll144_sex.csv")
    race = pd.read_csv(run / where / "ll144_race_ethnicity.csv").set_index("race")
    outcomes = pd.read_csv(run / "tables" / "hiring_outcomes.csv")
    valid = outcomes[outcomes["outcome"] != "invalid"]
    assert sex["n"].sum() == len(valid)
    white = valid[valid["race"] == "White"]
    assert race.loc["White", "selection_rate"] == pytest.approx(
        (white["outcome"] == "accept").mean()
    )
    assert audit["source"]["kind"] == "test data"
    assert audit["columns"]["sex"] == "gender"
    assert "Bias audit (NYC Local Law 144)" in (run / "report.html").read_text()
    # `analyze` keeps the audit it did not make.
    assert cli.invoke(app, ["analyze", str(run)]).exit_code == 0
    assert where in json.loads((run / "summary.json").read_text())["audits"]


@pytest.mark.parametrize(("values", "positive"), [(("1", "0"), "1"), (("True", "False"), "True")])
def test_analyze_decisions_defaults_the_positive_outcome(tmp_path, cli, values, positive) -> None:
    rows = [
        {"grp": g, "job": j, "ok": values[0] if i < k else values[1]}
        for g, j, n, k in (
            ("A", "x", 10, 8),
            ("B", "x", 10, 4),
            ("A", "y", 10, 5),
            ("B", "y", 10, 5),
        )
        for i in range(n)
    ]
    path = tmp_path / "d.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = tmp_path / "tables"
    args = ["analyze", "--decisions", str(path), "--group-cols", "grp", "--outcome-col", "ok"]
    result = cli.invoke(app, [*args, "--stratum-col", "job", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"positive outcome: {positive} (default for a" in " ".join(result.stdout.split())
    rates = pd.read_csv(out / "rates.csv").set_index("grp")
    assert rates["rate"].to_dict() == pytest.approx({"A": 0.65, "B": 0.45})
    # Within each stratum: x gives B/A = 0.4 / 0.8 = 0.5, y gives 1.0.
    ratios = pd.read_csv(out / "impact_ratios_by_stratum.csv")
    got = {(r.job, r.grp): r.impact_ratio for r in ratios.itertuples()}
    assert got == pytest.approx(
        {("x", "A"): 1.0, ("x", "B"): 0.5, ("y", "A"): 1.0, ("y", "B"): 1.0}
    )
    by_stratum = pd.read_csv(out / "rates_by_stratum.csv")
    assert len(by_stratum) == 4 and by_stratum["n"].sum() == 40
