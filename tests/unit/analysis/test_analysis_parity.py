"""Decision rates, DPD and the parity test, each checked against an independent oracle."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import MetricFrame, demographic_parity_difference, selection_rate
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from biasim.analysis import demographic_parity_difference as dpd
from biasim.analysis import group_rates, parity_null_dpd, parity_test, status_rates


@pytest.fixture
def decisions() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    groups = np.repeat(["male", "female", "non-binary"], [40, 55, 33])
    p = {"male": 0.3, "female": 0.7, "non-binary": 0.5}
    chosen = [("Evacuate" if rng.random() < p[g] else "Stay") for g in groups]
    valid = rng.random(len(groups)) > 0.1
    return pd.DataFrame({"gender": groups, "decision": chosen, "valid": valid})


def test_rates_and_dpd_match_fairlearn(decisions: pd.DataFrame) -> None:
    rates = group_rates(decisions, "gender", "decision", "Evacuate")
    valid = decisions[decisions["valid"]]
    y_pred = (valid["decision"] == "Evacuate").astype(int)
    frame = MetricFrame(
        metrics=selection_rate, y_true=y_pred, y_pred=y_pred, sensitive_features=valid["gender"]
    )
    for _, row in rates.iterrows():
        assert row["rate"] == pytest.approx(frame.by_group[row["gender"]])
    oracle = demographic_parity_difference(y_pred, y_pred, sensitive_features=valid["gender"])
    assert dpd(rates["rate"]) == pytest.approx(oracle)


def test_invalid_answers_are_excluded_from_rates(decisions: pd.DataFrame) -> None:
    rates = group_rates(decisions, "gender", "decision", "Evacuate").set_index("gender")
    assert rates["n"].sum() == decisions["valid"].sum()


def test_wilson_intervals_match_statsmodels(decisions: pd.DataFrame) -> None:
    rates = group_rates(decisions, "gender", "decision", "Evacuate")
    low, high = proportion_confint(rates["k"], rates["n"], alpha=0.05, method="wilson")
    np.testing.assert_allclose(rates["ci_low"], low, rtol=1e-9)
    np.testing.assert_allclose(rates["ci_high"], high, rtol=1e-9)


def test_intersectional_groups(decisions: pd.DataFrame) -> None:
    decisions = decisions.assign(age=np.where(np.arange(len(decisions)) % 2, "old", "young"))
    rates = group_rates(decisions, ["gender", "age"], "decision", "Evacuate")
    assert len(rates) == 6
    valid = decisions[decisions["valid"]]
    expected = (
        valid.assign(hit=valid["decision"] == "Evacuate").groupby(["gender", "age"])["hit"].mean()
    )
    for _, row in rates.iterrows():
        assert row["rate"] == pytest.approx(expected[(row["gender"], row["age"])])


def _exact_null_quantile_and_tail(n: list[int], p: float, observed: float, q: float):
    """Exact DPD distribution under parity by enumerating every outcome (scipy binomial pmf)."""
    support = [np.arange(m + 1) for m in n]
    pmfs = [stats.binom.pmf(s, m, p) for s, m in zip(support, n, strict=True)]
    values, probs = [], []
    for combo in itertools.product(*[range(m + 1) for m in n]):
        rates = [k / m for k, m in zip(combo, n, strict=True)]
        values.append(max(rates) - min(rates))
        probs.append(np.prod([pmf[k] for pmf, k in zip(pmfs, combo, strict=True)]))
    values, probs = np.array(values), np.array(probs)
    order = np.argsort(values)
    cdf = np.cumsum(probs[order])
    quantile = values[order][np.searchsorted(cdf, q)]
    tail = probs[values >= observed - 1e-12].sum()
    return quantile, tail


def test_parity_test_matches_exact_enumeration() -> None:
    n, k = [12, 15, 10], [3, 9, 5]
    test = parity_test(n, k, n_simulations=200_000, seed=1)
    pooled = sum(k) / sum(n)
    quantile, tail = _exact_null_quantile_and_tail(n, pooled, test.dpd, 0.95)
    assert test.pooled_rate == pytest.approx(pooled)
    assert test.dpd == pytest.approx(9 / 15 - 3 / 12)
    # The simulated 95th percentile is an atom of the exact discrete distribution.
    assert test.threshold == pytest.approx(quantile, abs=1 / 60)
    assert test.p_value == pytest.approx(tail, abs=0.005)
    assert test.significant == (test.dpd > test.threshold)


def test_null_dpd_has_the_binomial_mean_for_two_groups() -> None:
    # For two groups of size m the DPD is |X - Y| / m with X, Y ~ Bin(m, p) independent.
    m, p = 20, 0.4
    sims = parity_null_dpd([m, m], p, 400_000, seed=2)
    diff = np.arange(-m, m + 1)
    pmf = np.convolve(
        stats.binom.pmf(np.arange(m + 1), m, p), stats.binom.pmf(np.arange(m + 1), m, p)[::-1]
    )
    expected = float((np.abs(diff) / m * pmf).sum())
    assert sims.mean() == pytest.approx(expected, abs=0.002)


def test_parity_test_flags_a_real_gap_and_not_parity() -> None:
    assert parity_test([100, 100], [20, 80]).significant
    assert not parity_test([100, 100], [50, 51]).significant
    with pytest.raises(ValueError):
        parity_test([10], [3])


def test_status_rates_per_group() -> None:
    df = pd.DataFrame(
        {
            "gender": ["m", "m", "f", "f", "f", "m"],
            "status": ["answered", "error", "answered", "invalid", "answered", "skipped"],
        }
    )
    out = status_rates(df, "gender").set_index("gender")
    assert out.loc["m", "error_rate"] == pytest.approx(1 / 3)
    assert out.loc["m", "skipped_rate"] == pytest.approx(1 / 3)
    assert out.loc["f", "skipped_rate"] == 0
    assert out.loc["f", "invalid_rate"] == pytest.approx(1 / 3)
    assert out.loc["f", "n"] == 3
