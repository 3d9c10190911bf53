"""Calibration of the EEOC tests and of the gate under a simulated null that keeps the design's
structure: applicants of unequal groups, each with their own qualification (what the tool reads),
sharing names within their group, in two jobs with different base rates; the tool selects on
qualification alone. Fisher's exact test and the two-standard-deviation reading reject 3-7 % at
alpha = 0.05 (unit: the applicant); the gate's interval rule passes in at least 93 of 100 seeds;
with a declared bias against one group the gate fails and writes JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.audit.ll144 import ll144_tables
from biasim.analysis.audit.presets import EEOC, AuditContext
from biasim.simulator.tools.audit import AuditOptions
from biasim.simulator.tools.gate import gate_rules, run_gate, write_junit

pytestmark = pytest.mark.slow

GROUP_SIZES = {"female": 300, "male": 450}
JOB_BASE = {"clerk": -0.2, "engineer": -1.2}
NAMES_PER_GROUP = 12


def _decisions(seed: int, female_odds: float = 1.0) -> pd.DataFrame:
    """One simulated audit: every applicant decided once; ``female_odds`` declares a bias."""
    rng = np.random.default_rng(seed)
    frames = []
    for job, base in JOB_BASE.items():
        for sex, n in GROUP_SIZES.items():
            quality = rng.normal(size=n)
            logit = base + 1.2 * quality + (np.log(female_odds) if sex == "female" else 0.0)
            frames.append(
                pd.DataFrame(
                    {
                        "job": job,
                        "sex": sex,
                        "name": rng.integers(0, NAMES_PER_GROUP, size=n).astype(str),
                        "selected": rng.random(n) < 1 / (1 + np.exp(-logit)),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def test_fisher_and_two_sd_reject_three_to_seven_percent_under_the_null() -> None:
    p_values, z_values = [], []
    for seed in range(600):
        audit = ll144_tables(_decisions(seed), sex_col="sex", selected_col="selected", by="job")
        context = AuditContext(by=["job"], categories={"sex": ["sex"]}, unit_note="row")
        tables, _ = EEOC.extend(audit.tables, context)
        tested = tables["sex"].dropna(subset=["fisher_p"])
        assert len(tested) == 2  # one comparison per job
        p_values += tested["fisher_p"].tolist()
        z_values += tested["two_sd_z"].tolist()
    fisher = np.mean(np.array(p_values) < 0.05)
    two_sd = np.mean(np.abs(np.array(z_values)) > 2)
    print(f"Fisher rejects {fisher:.3f}, |z| > 2 in {two_sd:.3f} of {len(p_values)} tests")
    assert 0.03 <= fisher <= 0.07
    assert 0.03 <= two_sd <= 0.07


def _gate(tmp_path, seed: int, female_odds: float, junit=None) -> bool:
    path = tmp_path / f"decisions{seed}.csv"
    _decisions(seed, female_odds).to_csv(path, index=False)
    options = AuditOptions(by=["job"], audit_format="eeoc")
    rules = gate_rules(path, ["impact_ratio.ci_high >= 0.8"], options)
    report = run_gate(path, rules, options)
    if junit is not None:
        write_junit(report, junit)
    return report.passed


def test_the_interval_gate_passes_a_fair_tool_and_fails_a_biased_one(tmp_path) -> None:
    passed = sum(_gate(tmp_path, seed, 1.0) for seed in range(100))
    print(f"gate passes {passed} of 100 seeds with no bias")
    assert passed >= 93
    # Odds of selection a third for women: impact ratios near 0.45-0.55.
    failed = sum(not _gate(tmp_path, 1000 + seed, 1 / 3) for seed in range(20))
    print(f"gate fails {failed} of 20 seeds with a declared bias")
    assert failed >= 19
    junit = tmp_path / "gate.xml"
    assert not _gate(tmp_path, 2000, 1 / 3, junit)
    assert ET.parse(junit).getroot().get("failures") == "1"
