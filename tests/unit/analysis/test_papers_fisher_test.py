"""An et al.'s Table 1 test (appendix C.3), as `papers_stratum_fisher_test` computes it: each role
tested with single emails as the unit, the roles' one-sided p-values combined by Fisher's method.

Unit of exchangeability: the email, within its role. Under the test's own assumptions (emails
independent) it holds its level; when the same names write in every role and names differ, it
does not, which is why Table 1 prints it only beside the calibrated joint test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.stats.disparity import papers_stratum_fisher_test

GROUPS = ["race", "gender"]


def _emails(rng, name_sd: float, names: int = 10, roles: int = 8, emails: int = 6) -> pd.DataFrame:
    """Six groups of ``names`` names; every name writes ``emails`` emails in every role, each
    accepted with the name's own propensity (log-odds N(0, name_sd)): no group differs."""
    group = np.repeat(np.arange(6), names)
    leaning = rng.normal(0.0, name_sd, size=group.size)
    name = np.repeat(np.arange(group.size), roles * emails)
    role = np.tile(np.repeat(np.arange(roles), emails), group.size)
    hit = rng.random(name.size) < 1 / (1 + np.exp(-leaning[name]))
    return pd.DataFrame(
        {
            "race": group[name] // 2,
            "gender": group[name] % 2,
            "name": name,
            "job": role,
            "outcome": np.where(hit, "accept", "reject"),
        }
    )


def _rate(name_sd: float, datasets: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    marked = total = 0
    for _ in range(datasets):
        table = papers_stratum_fisher_test(
            _emails(rng, name_sd), GROUPS, "outcome", "accept", stratum_col="job"
        )
        marked += int((table["p_greater"] < 0.05).sum() + (table["p_less"] < 0.05).sum())
        total += 2 * len(table)
    return marked / total


def test_the_combined_p_is_fishers_method_over_each_roles_mid_p() -> None:
    df = _emails(np.random.default_rng(0), 0.0, names=3, roles=3, emails=4)
    table = papers_stratum_fisher_test(df, GROUPS, "outcome", "accept", stratum_col="job")
    row = table[(table["race"] == 1) & (table["gender"] == 0)].iloc[0]
    logs = []
    for _, part in df.groupby("job"):
        big_n, big_k = len(part), int((part["outcome"] == "accept").sum())
        mine = part[(part["race"] == 1) & (part["gender"] == 0)]
        n, k = len(mine), int((mine["outcome"] == "accept").sum())
        tail = stats.hypergeom.sf(k, big_n, big_k, n) + stats.hypergeom.pmf(k, big_n, big_k, n) / 2
        logs.append(np.log(tail))
    expected = stats.chi2.sf(-2 * sum(logs), 2 * len(logs))
    assert row["n_strata"] == 3
    assert row["p_greater"] == pytest.approx(expected, rel=1e-9)
    assert row["p_marked"] == (row["p_greater"] if row["d"] > 0 else row["p_less"])


@pytest.mark.slow
def test_it_holds_its_level_when_emails_are_independent() -> None:
    # 100 null data sets x 6 groups x 2 one-sided tests: 5 % +- 0.6 %.
    assert 0.03 <= _rate(0.0, 100, seed=1) <= 0.07


@pytest.mark.slow
def test_it_marks_far_too_often_when_the_same_names_write_in_every_role() -> None:
    # Names' own leanings (sd 0.5 on the log-odds), no group effect: measured 17 % per side.
    assert _rate(0.5, 40, seed=3) > 0.10
