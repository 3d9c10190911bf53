"""`biasim audit --format eeoc` (29 CFR 1607.4(D)) on a decisions CSV and on a run: the LL144
rates it shares, its own columns in the CSV, audit.json, console and report, the sections it
cites and what it says the data cannot show; a score alone is refused."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from biasim.simulator.cli import app
from tests.golden_studies import STUDIES


def _csv(tmp_path) -> str:
    rows = [("F", int(i < 12)) for i in range(40)] + [("M", int(i < 25)) for i in range(50)]
    path = tmp_path / "decisions.csv"
    pd.DataFrame(rows, columns=["sex", "hired"]).assign(score=range(90)).to_csv(path, index=False)
    return str(path)


def test_eeoc_from_a_csv_writes_its_columns_cites_and_limits(tmp_path, cli) -> None:
    out = tmp_path / "eeoc"
    args = ["audit", _csv(tmp_path), "--format", "eeoc", "--selected-col", "hired"]
    result = cli.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    sex = pd.read_csv(out / "eeoc_sex.csv").set_index("sex")
    # 12/40 against 25/50: ratio 0.6, under 4/5; 4 selections short of 16.
    assert sex.loc["F", "impact_ratio"] == pytest.approx(0.6)
    assert sex.loc["F", "shortfall"] == 4 and sex.loc["F", "reference"] == "M"
    # Under 4/5 but on small numbers: not significant (p 0.084), the interval reaches past 1;
    # the case 1607.4(D) says may not constitute adverse impact.
    assert sex.loc["F", "fisher_p"] == pytest.approx(0.0840, abs=1e-4)
    assert sex.loc["F", "impact_ratio_ci_high"] > 1
    audit = json.loads((out / "audit.json").read_text())
    assert audit["format"] == "eeoc"
    assert any(section == "29 CFR 1607.4(D)" for _, section in audit["cites"])
    assert any("job-related" in line for line in audit["cannot_show"])
    assert "unit of exchangeability: the applicant (one row of the file)" in audit["notes"][0]
    page = (out / "report.html").read_text()
    assert "29 CFR 1607.4(D)" in page and "Fisher p" in page and "job-related" in page
    assert "Not shown by these data" in result.stdout and "Fisher p" not in result.stdout


def test_eeoc_refuses_a_score_alone_and_ll144_keeps_its_files(tmp_path, cli) -> None:
    path = _csv(tmp_path)
    scored = cli.invoke(
        app,
        ["audit", path, "--format", "eeoc", "--score-col", "score", "--out", str(tmp_path / "s")],
    )
    assert scored.exit_code == 2 and "eeoc reads selection rates" in scored.stderr
    assert not (tmp_path / "s").exists()
    ll144 = tmp_path / "ll144"
    ok = cli.invoke(app, ["audit", path, "--selected-col", "hired", "--out", str(ll144)])
    assert ok.exit_code == 0, ok.output
    assert "fisher_p" not in pd.read_csv(ll144 / "ll144_sex.csv").columns


def test_eeoc_of_a_run_counts_the_same_rates_as_ll144(tmp_path, cli) -> None:
    text, _ = STUDIES["hiring_small"]
    study = tmp_path / "hiring.yaml"
    study.write_text(text)
    run = tmp_path / "run"
    assert cli.invoke(app, ["run", str(study), "--out", str(run)]).exit_code == 0
    for fmt in ("ll144", "eeoc", "eu-ai-act"):
        result = cli.invoke(app, ["audit", str(run), "--format", fmt, "--out", str(tmp_path / fmt)])
        assert result.exit_code == 0, result.output
    ll144 = pd.read_csv(tmp_path / "ll144" / "ll144_race_ethnicity.csv")
    eeoc = pd.read_csv(tmp_path / "eeoc" / "eeoc_race_ethnicity.csv")
    pd.testing.assert_frame_equal(ll144, eeoc[ll144.columns])
    audit = json.loads((tmp_path / "eeoc" / "audit.json").read_text())
    assert "a simulated applicant of the run" in audit["notes"][0]
    # Applicants share a few names: the note says what the applicant-level p speaks of.
    names = f"applicants carry {audit['n_distinct_names']} distinct names"
    assert audit["n_distinct_names"] < audit["n_individuals"]
    assert any(names in note for note in audit["notes"])
    summary = json.loads((run / "summary.json").read_text())
    assert {a["format"] for a in summary["audits"].values()} == {"ll144", "eeoc", "eu-ai-act"}
    assert "EEOC Uniform Guidelines" in (run / "report.html").read_text()


@pytest.mark.parametrize(
    ("fmt", "section"),
    [
        ("colorado", "C.R.S. 6-1-1703(3)(b)(II)"),
        ("california", "Cal. Code Regs. tit. 2, 11009(f)"),
        ("eu-ai-act", "Art. 10(2)(f)-(g)"),
    ],
)
def test_impact_assessment_presets_fill_what_the_data_can(tmp_path, cli, fmt, section) -> None:
    out = tmp_path / fmt
    args = ["audit", _csv(tmp_path), "--format", fmt, "--selected-col", "hired"]
    result = cli.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    sex = pd.read_csv(out / f"{fmt}_sex.csv").set_index("sex")
    assert sex.loc["F", "shortfall"] == 4  # the EEOC columns, one definition
    audit = json.loads((out / "audit.json").read_text())
    assert any(cited == section for _, cited in audit["cites"])
    filled = {row["field"]: row["value"] for row in audit["assessment"]}
    results = [v for k, v in filled.items() if v and "lowest impact ratio 0.600" in v]
    assert len(results) == 1 and "sex table (reference M)" in results[0]
    assert None in filled.values()  # what only the deployer can write is left to them
    assert any("sex: F, M" in (v or "") for v in filled.values())
    page = (out / "report.html").read_text()
    assert "Impact assessment fields" in page and "to be completed by the deployer" in page
    assert "to be completed by the deployer" in result.stdout
