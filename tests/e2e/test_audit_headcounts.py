"""Who an audit counts, from one source: individuals are distinct simulated applicants (never
applicant x policy), every policy is audited side by side (never `base` silently), each audit
has its own directory, and the console, audit.json and report.html print the same counts."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app

POLICIES = ["base", "redacted", "shortlist5"]


@pytest.fixture(scope="module")
def policy_run(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("policies") / "run"
    args = ["run", "hiring_policies", "--backend", "synthetic", "--agents", "10", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def _read_under_every_policy(run: Path) -> set[str]:
    """The oracle: applicants whose letter was shown in a screening pool under every policy
    (read from the stored readings, not from the audit's code)."""
    results = pd.read_parquet(run / "results.parquet")
    shown = []
    for policy in POLICIES:
        stage = "screen" if policy == "base" else f"screen__{policy}"
        reads = results.loc[results["stage"] == stage, "reads"].str.split("|").explode()
        shown.append({r.removesuffix("/apply") for r in reads})
    return set.intersection(*shown)


def _console_count(output: str) -> int:
    found = re.search(r"Individuals assessed: ([\d,]+)", " ".join(output.split()))
    assert found, output
    return int(found.group(1).replace(",", ""))


def _html_values(page: str, where: str, key: str) -> list[str]:
    path = html.escape(json.dumps(["audits", where, key]))
    return re.findall(rf'data-path="{re.escape(path)}" data-value="([^"]*)"', page)


def test_a_policy_study_is_audited_per_policy_counting_each_applicant_once(
    policy_run, tmp_path, cli
) -> None:
    run = Path(shutil.copytree(policy_run, tmp_path / "run"))
    result = cli.invoke(app, ["audit", str(run)])
    assert result.exit_code == 0, result.output
    audit = json.loads((run / "audit" / "policies" / "audit.json").read_text())
    applicants = _read_under_every_policy(run)
    assert audit["policies"] == POLICIES
    assert audit["n_individuals"] == len(applicants)
    assert audit["n_assessed"] == len(applicants) * len(POLICIES)
    sex = pd.DataFrame(audit["tables"]["sex"])
    assert sex.groupby("policy")["n"].sum().to_dict() == dict.fromkeys(POLICIES, len(applicants))
    # Applicants left over from the pools have no outcome: counted, not dropped.
    written = pd.read_parquet(run / "results.parquet").query("stage == 'apply'")
    assert audit["n_missing_outcome"] == (len(written) - len(applicants)) * len(POLICIES)
    assert "every policy side by side" in audit["source"]["description"]
    # One count, three routes: console, audit.json, report.html.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["audits"]["audit/policies"]["n_individuals"] == audit["n_individuals"]
    assert _console_count(result.output) == audit["n_individuals"]
    page = (run / "report.html").read_text()
    assert _html_values(page, "audit/policies", "n_individuals") == [str(len(applicants))]
    assert _html_values(page, "audit/policies", "n_assessed") == [str(audit["n_assessed"])]


def test_audits_do_not_overwrite_each_other(policy_run, tmp_path, cli) -> None:
    run = Path(shutil.copytree(policy_run, tmp_path / "run"))
    assert cli.invoke(app, ["audit", str(run)]).exit_code == 0
    first = (run / "audit" / "policies" / "audit.json").read_bytes()
    again = cli.invoke(app, ["audit", str(run), "--exclude-small"])
    assert again.exit_code == 2
    message = " ".join(again.stderr.split())
    assert "audit/policies already exists and is not empty; pass --force" in message
    assert (run / "audit" / "policies" / "audit.json").read_bytes() == first
    screen = cli.invoke(app, ["audit", str(run), "--stage", "screen"])
    assert screen.exit_code == 0, screen.output
    staged = json.loads((run / "audit" / "policies-screen" / "audit.json").read_text())
    assert staged["policies"] == POLICIES
    # Each pool shortlists 3 (5 under shortlist5, whose left-over pool of 4 is not read).
    sex = pd.DataFrame(staged["tables"]["sex"]).groupby("policy")["n_selected"].sum()
    stages = pd.read_parquet(run / "results.parquet")["stage"].value_counts()
    expected = {
        "base": 3 * stages["screen"],
        "redacted": 3 * stages["screen__redacted"],
        "shortlist5": 5 * stages["screen__shortlist5"],
    }
    assert sex.to_dict() == expected
    base_only = cli.invoke(app, ["audit", str(run), "--analysis", "pipeline"])
    assert base_only.exit_code == 0, base_only.output
    described = json.loads((run / "audit" / "pipeline" / "audit.json").read_text())
    assert "under policy `base` only" in described["source"]["description"]
    assert described["policies"] is None
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["audits"]) == {"audit/policies", "audit/policies-screen", "audit/pipeline"}
    page = (run / "report.html").read_text()
    headings = re.findall(r"<h2>Bias audit \(NYC Local Law 144\): ([^<]*)</h2>", page)
    assert headings == ["audit/policies", "audit/policies-screen", "audit/pipeline"]
    forced = cli.invoke(app, ["audit", str(run), "--exclude-small", "--force"])
    assert forced.exit_code == 0, forced.output
    assert json.loads((run / "audit" / "policies" / "audit.json").read_text())["exclude_small"]


def test_an_audit_attached_before_audits_had_directories_stays_in_the_report(
    policy_run, tmp_path, cli
) -> None:
    run = Path(shutil.copytree(policy_run, tmp_path / "run"))
    assert cli.invoke(app, ["audit", str(run)]).exit_code == 0
    summary = json.loads((run / "summary.json").read_text())
    old = summary.pop("audits")["audit/policies"]
    del old["n_individuals"], old["policies"], old["n_distinct_names"]
    summary["audit"] = old  # the shape `biasim audit` wrote before
    (run / "summary.json").write_text(json.dumps(summary))
    assert cli.invoke(app, ["analyze", str(run)]).exit_code == 0
    page = (run / "report.html").read_text()
    assert "<h2>Bias audit (NYC Local Law 144): audit</h2>" in page
    assert _html_values(page, "audit", "n_assessed") == [str(old["n_assessed"])]


def test_auditing_a_run_whose_summary_an_older_biasim_wrote_redraws_its_page(
    policy_run, tmp_path, cli
) -> None:
    """`audit` redraws the page from the run's summary; a section whose summary lacks what the
    kind reads now says so, instead of a traceback for the whole command."""
    run = Path(shutil.copytree(policy_run, tmp_path / "run"))
    summary = json.loads((run / "summary.json").read_text())
    policies = next(a for a in summary["analyses"] if a["kind"] == "policy_effect")
    for part in policies["by_group"].values():
        del part["tests"]  # the shape before the joint policy test
    (run / "summary.json").write_text(json.dumps(summary))
    result = cli.invoke(app, ["audit", str(run)])
    assert result.exit_code == 0, result.output
    page = " ".join((run / "report.html").read_text().split())
    assert "written by an older version of biasim (it has no &#x27;tests&#x27;)" in page
    assert "<h2>Bias audit (NYC Local Law 144): audit/policies</h2>" in page
