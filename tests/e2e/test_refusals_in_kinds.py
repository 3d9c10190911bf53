"""The decision kinds show the validity test and the exclusion bounds: refusals injected into a
recorded run, and the bounds' "excluded as negative" DPD equals the DPD before the refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.engine.runner import reanalyze
from tests.golden_studies import GOLDEN_DIR


def _run_with_refusals(tmp_path: Path, study: str, refuse) -> tuple[Path, pd.DataFrame]:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(GOLDEN_DIR / study / "manifest.json", run / "manifest.json")
    results = pd.read_parquet(GOLDEN_DIR / study / "results.parquet")
    hit = refuse(results)
    results.loc[hit, "valid"] = False
    results.loc[hit, "status"] = "invalid"
    results.to_parquet(run / "results.parquet")
    return run, results


def test_demographic_parity_bounds_recover_the_dpd_before_refusals(tmp_path) -> None:
    def refuse(results: pd.DataFrame) -> pd.Series:
        # Female personas refuse instead of answering anything but the targeted decision.
        rows = results["stage"].eq("decide") & results["gender"].eq("Female")
        return rows & results["decision"].ne(results["target"])

    run, results = _run_with_refusals(tmp_path, "li2025_small", refuse)
    for column in ("decision", "rationale"):
        results.loc[~results["valid"].astype(bool), column] = None
    results.to_parquet(run / "results.parquet")
    summary = reanalyze(run, accept_edits=True)  # the refusals are edits of the results
    analysis = next(a for a in summary["analyses"] if a["kind"] == "demographic_parity")
    bounds = pd.DataFrame(analysis["exclusions"])
    before = pd.read_csv(GOLDEN_DIR / "li2025_small" / "decisions_cases.csv")
    keys = ["model_label", "persona_condition", "scenario", "attribute"]
    gender = bounds[bounds["attribute"] == "gender"].merge(before[[*keys, "dpd"]], on=keys)
    assert len(gender) > 0
    np.testing.assert_allclose(gender["dpd_excluded_as_negative"], gender["dpd"], atol=1e-12)
    assert (gender["n_excluded"] > 0).all()
    assert gender["test"].str.contains("unit: persona_id").all()  # units.design_units
    text = (run / "report.html").read_text(encoding="utf-8")
    assert "Refusals and invalid answers: validity and exclusion bounds" in text


def test_acceptance_bounds_and_claims_name_the_refused_group(tmp_path) -> None:
    def refuse(results: pd.DataFrame) -> pd.Series:
        # Every rejection written for a Black applicant becomes a refusal.
        return results["race"].eq("Black") & results["text"].str.contains("regret", na=False)

    run, results = _run_with_refusals(tmp_path, "hiring_small", refuse)
    summary = reanalyze(run, accept_edits=True)  # the refusals are edits of the results
    analysis = next(a for a in summary["analyses"] if a["kind"] == "acceptance")
    (row,) = analysis["exclusions"]
    refused = int(refuse(results).sum())
    assert row["n_excluded"] == refused > 0
    assert row["dpd_excluded_as_positive"] >= row["dpd_valid_only"] - 1e-12
    per_group = results.groupby(analysis["groups"])["valid"].mean()
    assert row["validity_gap"] == pytest.approx(per_group.max() - per_group.min())
    notes = " ".join(next(iter(analysis["models"].values()))["notes"])
    # Black applicants' valid answers are all acceptances, so the others fall below four-fifths
    # among valid answers only; the notes say the flags may come from who is excluded.
    assert "the four-fifths flag may come from who is excluded" in notes
