"""A tool that scores, audited on its scores: a run of the loopback vendor API audited with
``--score-col score`` under LL144 (scoring rates: the share above the median) and EEOC (its
decisions, with the score tables beside them); the rank and sweep tables agree with the
functions of analysis.audit.scores over the run's own results, the sweep's figure is written,
and the report shows both; a score column that is not numeric is exit 2 naming it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from biasim.analysis.audit.scores import rank_positions, threshold_sweep
from biasim.simulator.cli import app
from tests.decision_tool_server import ToolServer
from tests.e2e.test_decision_tools import KEY, KEY_ENV, study_text


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    from typer.testing import CliRunner

    tmp = tmp_path_factory.mktemp("scores")
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, KEY)
    with ToolServer(KEY) as server:
        study = tmp / "vendor.yaml"
        study.write_text(study_text(server.url))
        run = tmp / "run"
        args = ["run", str(study), "--allow-endpoint", "127.0.0.1", "--out", str(run)]
        result = CliRunner().invoke(app, args)
    mp.undo()
    assert result.exit_code == 0, result.output
    return run


def _audit(cli, run, fmt, *extra):
    out = run / "audit" / f"{fmt}-scores"
    result = cli.invoke(
        app, ["audit", str(run), "--format", fmt, "--out", str(out), "--force", *extra]
    )
    assert result.exit_code == 0, result.output + result.stderr
    return out, json.loads((out / "audit.json").read_text())


def test_ll144_reads_the_tools_score_as_a_scoring_rate(scored_run, cli) -> None:
    out, audit = _audit(cli, scored_run, "ll144", "--score-col", "score")
    assert audit["metric"] == "scoring_rate"
    results = pd.read_parquet(scored_run / "results.parquet")
    median = results["score"].median()
    above = (results["score"] > median).groupby(results["gender"]).mean()
    sex = pd.read_csv(out / "ll144_sex.csv").set_index("gender")
    assert sex["scoring_rate"].to_dict() == pytest.approx(above.to_dict())
    assert audit["median_score"] == pytest.approx(median)
    assert sex.loc["female", "impact_ratio"] < 0.8  # the declared penalty against women


def test_eeoc_keeps_the_decisions_and_adds_the_score_tables(scored_run, cli) -> None:
    out, audit = _audit(cli, scored_run, "eeoc", "--score-col", "score")
    assert audit["metric"] == "selection_rate"
    results = pd.read_parquet(scored_run / "results.parquet")
    positions = pd.read_csv(out / "eeoc_positions_sex.csv")
    expected = rank_positions(results, "score", "gender")
    pd.testing.assert_frame_equal(positions, expected, check_dtype=False)
    female = positions.set_index("gender").loc["female"]
    assert female["mean_position"] > len(results) / 2 and female["mann_whitney_p"] < 0.001
    sweep = pd.read_csv(out / "eeoc_sweep_race_ethnicity.csv")
    pd.testing.assert_frame_equal(
        sweep, threshold_sweep(results, "score", "race"), check_dtype=False
    )
    assert (out / "eeoc_sweep_sex.png").read_bytes()[:4] == b"\x89PNG"
    report = (scored_run / "report.html").read_text()
    assert "Threshold sweep: impact ratio at each cut-off (gender)" in report
    assert "Figure of this sweep: audit/eeoc-scores/eeoc_sweep_sex.png." in report
    assert any("Mann-Whitney" in note for note in audit["notes"])


def test_a_score_column_that_is_no_number_is_exit_2(scored_run, cli) -> None:
    result = cli.invoke(
        app, ["audit", str(scored_run), "--out", str(scored_run / "x"), "--score-col", "decision"]
    )
    assert result.exit_code == 2, result.output
    assert "--score-col" in result.stderr and "`decision` is no numeric output" in result.stderr
    assert "Traceback" not in result.stderr


def test_applicants_scored_twice_get_no_rank_test_and_the_audit_says_why() -> None:
    from biasim.analysis.audit.presets import AuditContext
    from biasim.simulator.tools.audit import _score_tables

    frame = pd.DataFrame(
        {"gender": ["female", "male"] * 20, "_score": [float(i) for i in range(40)]}
    )
    once = AuditContext(by=[], categories={"sex": ["gender"]}, unit_note="a row")
    tables, _ = _score_tables(frame, once)
    assert tables["positions_sex"]["mann_whitney_p"].notna().all()
    twice = AuditContext(by=[], categories={"sex": ["gender"]}, repeated=20, unit_note="a row")
    tables, notes = _score_tables(frame, twice)
    assert tables["positions_sex"]["mann_whitney_p"].isna().all()
    assert tables["positions_sex"]["top_k_rate"].notna().all()  # the measures stand
    assert "20 applicant(s) were scored more than once" in notes[-1]


def test_an_impact_assessment_lists_the_score_measures(scored_run, cli) -> None:
    _, audit = _audit(cli, scored_run, "colorado", "--score-col", "score")
    [metrics] = [row["value"] for row in audit["assessment"] if row["field"].startswith("metrics")]
    assert "Mann-Whitney" in metrics and "Fisher" in metrics
