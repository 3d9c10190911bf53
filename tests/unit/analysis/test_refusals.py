"""Refusals and invalid answers: validity by group, and the headline's exclusion bounds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from biasim.analysis.stats import refusals


def mnar_decisions(seed: int = 1, names: int = 60, reps: int = 5) -> pd.DataFrame:
    """No group effect; half of group B's rejections become refusals (missing not at random)."""
    rng = np.random.default_rng(seed)
    group = np.repeat(["A", "B"], names * reps)
    name = np.repeat([f"n{i}" for i in range(2 * names)], reps)
    accept = rng.random(group.size) < 0.5
    outcome = np.where(accept, "accept", "reject").astype(object)
    outcome[(group == "B") & ~accept & (rng.random(group.size) < 0.5)] = "refused"
    return pd.DataFrame({"group": group, "name": name, "decision": outcome})


def test_validity_rates_count_excluded_answers_with_wilson_intervals() -> None:
    df = mnar_decisions()
    table = refusals.validity_rates(df, ["group"], "decision", invalid=["refused"]).set_index(
        "group"
    )
    refused = (df["decision"] == "refused").groupby(df["group"]).sum()
    assert table.loc["A", "n_excluded"] == 0
    assert table.loc["B", "n_excluded"] == refused["B"] > 0
    low, high = proportion_confint(table["n_valid"], table["n_rows"], method="wilson")
    np.testing.assert_allclose(table["ci_low"], low)
    np.testing.assert_allclose(table["ci_high"], high)


def test_validity_test_without_units_matches_exact_binomial_enumeration() -> None:
    n, k = np.array([40, 50]), np.array([31, 46])
    rows = [(g, ok) for g in (0, 1) for ok in [True] * k[g] + [False] * (n[g] - k[g])]
    df = pd.DataFrame(rows, columns=["g", "ok"]).assign(
        decision=lambda d: np.where(d["ok"], "yes", "invalid")
    )
    found = refusals.validity_test(
        df, ["g"], "decision", invalid=["invalid"], n_permutations=40_000, seed=3
    )
    # Oracle: P(|K1/n1 - K2/n2| >= observed) with K_g ~ Binomial(n_g, pooled), enumerated.
    pooled = k.sum() / n.sum()
    k1, k2 = np.meshgrid(np.arange(n[0] + 1), np.arange(n[1] + 1), indexing="ij")
    prob = np.outer(
        stats.binom.pmf(np.arange(n[0] + 1), n[0], pooled),
        stats.binom.pmf(np.arange(n[1] + 1), n[1], pooled),
    )
    observed = abs(k[0] / n[0] - k[1] / n[1])
    exact = prob[np.abs(k1 / n[0] - k2 / n[1]) >= observed - 1e-12].sum()
    assert found["validity_gap"] == pytest.approx(observed)
    assert found["validity_p_value"] == pytest.approx(exact, abs=4 * np.sqrt(exact / 40_000))
    assert "unit: answer" in found["validity_test"]


def test_validity_test_with_units_names_the_unit_and_counts_them() -> None:
    found = refusals.validity_test(
        mnar_decisions(),
        ["group"],
        "decision",
        invalid=["refused"],
        unit_col="name",
        n_permutations=500,
    )
    assert found["validity_test"].endswith("unit: name, 120 units")
    assert found["validity_p_value"] < 0.01


def test_exclusion_bounds_recount_every_excluded_answer_each_way() -> None:
    # A: 6/10 accepted, nothing excluded; B: 6/8 accepted among valid, 2 refused.
    df = pd.DataFrame(
        {
            "group": ["A"] * 10 + ["B"] * 10,
            "decision": ["accept"] * 6
            + ["reject"] * 4
            + ["accept"] * 6
            + ["reject"] * 2
            + ["refused"] * 2,
        }
    )
    bounds = refusals.exclusion_bounds(
        df, ["group"], "decision", "accept", invalid=["refused"], n_permutations=200
    ).set_index("scenario")
    assert bounds.loc["valid_only", "dpd"] == pytest.approx(0.75 - 0.6)
    assert bounds.loc["excluded_as_negative", "dpd"] == pytest.approx(0.0)
    assert bounds.loc["excluded_as_positive", "dpd"] == pytest.approx(0.8 - 0.6)
    assert (bounds["highest"] == "B").all() and (bounds["lowest"] == "A").all()
    assert refusals.bounds_include_parity(bounds.reset_index())


def test_bounds_exclude_parity_when_every_treatment_keeps_the_gap() -> None:
    rows = {"A": (90, 10, 0), "B": (30, 60, 10)}  # accept, reject, refused
    df = pd.DataFrame(
        [
            (g, o)
            for g, counts in rows.items()
            for o, c in zip(("accept", "reject", "refused"), counts, strict=True)
            for _ in range(c)
        ],
        columns=["group", "decision"],
    )
    bounds = refusals.exclusion_bounds(
        df, ["group"], "decision", "accept", invalid=["refused"], n_permutations=500
    )
    assert not refusals.bounds_include_parity(bounds)
    assert refusals.bounds_sentence(bounds).endswith("the bounds exclude parity")


def test_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="scenario is one of"):
        refusals.with_excluded_as(mnar_decisions(), "decision", "accept", "drop", ["refused"])
