"""Disparity statistics of a decisions table, each checked against an independent oracle."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.multitest import multipletests

from biasim.analysis.stats.disparity import (
    acceptance_rates,
    adjust_family,
    cmh_test,
    combine_pvalues_across,
    disparity_report,
    impact_ratios,
    permutation_vs_population,
    rate_breakdown,
)
from tests.paths import SHARED

GROUPS = ["race", "gender"]
#: The papers and reference data beside the repository (tests skip when absent).
BLOOMBERG = (
    SHARED / "reference" / "bloomberg-gpt-hiring" / "data" / "output" / "performance_ranking.csv"
)


def _mc_close(p_mc: np.ndarray, p_exact: np.ndarray, b: int) -> None:
    """Monte Carlo p-values within 4 standard errors (plus the (b+1)/(B+1) shift) of exact."""
    p_mc, p_exact = np.asarray(p_mc, dtype=float), np.asarray(p_exact, dtype=float)
    bound = 4 * np.sqrt(p_exact * (1 - p_exact) / b) + 1 / (b + 1)
    assert np.all(np.abs(p_mc - p_exact) <= bound), (p_mc, p_exact, bound)


def _decisions(seed: int, boost: dict[tuple[str, str], float], roles: int = 4) -> pd.DataFrame:
    """Names nested in race x gender, crossed with roles; outcome accept / reject / invalid."""
    rng = np.random.default_rng(seed)
    cells = [("White", "female"), ("White", "male"), ("Black", "female")]
    cells += [("Black", "male"), ("Hispanic", "female"), ("Hispanic", "male")]
    rows = []
    for race, gender in cells:
        p = 0.45 + boost.get((race, gender), 0.0)
        for i in range(10):
            for role in range(roles):
                for _ in range(12):
                    u = rng.random()
                    out = "invalid" if u < 0.05 else ("accept" if u < 0.05 + 0.95 * p else "reject")
                    rows.append((race, gender, f"{race[0]}{gender[0]}{i}", f"role{role}", out))
    return pd.DataFrame(rows, columns=[*GROUPS, "name", "role", "outcome"])


# --- rates ------------------------------------------------------------------------------------


def test_rates_exclude_and_count_invalid_answers() -> None:
    df = _decisions(0, {})
    rates = acceptance_rates(df, GROUPS, "outcome", "accept").set_index(GROUPS)
    expected = df.assign(acc=df["outcome"] == "accept", bad=df["outcome"] == "invalid")
    by = expected.groupby(GROUPS).agg(acc=("acc", "sum"), bad=("bad", "sum"), size=("acc", "size"))
    assert (rates["n_excluded"] == by["bad"]).all()
    assert (rates["n"] == by["size"] - by["bad"]).all()
    np.testing.assert_allclose(rates["rate"], by["acc"] / (by["size"] - by["bad"]))
    valid = expected[~expected["bad"]]
    assert rates["population_rate"].iloc[0] == pytest.approx(valid["acc"].mean())


def test_valid_column_and_all_invalid_group() -> None:
    df = pd.DataFrame(
        {
            "grp": ["a", "a", "a", "b", "b", "c"],
            "y": ["yes", "no", "yes", "yes", "no", "junk"],
            "ok": [True, True, False, True, True, True],
        }
    )
    rates = acceptance_rates(df, "grp", "y", "yes", valid="ok", invalid=["junk"]).set_index("grp")
    assert rates.loc["a", ["n", "k", "n_excluded"]].tolist() == [2, 1, 1]
    assert rates.loc["c", ["n", "n_excluded"]].tolist() == [0, 1]
    assert np.isnan(rates.loc["c", "rate"])
    assert rates["population_rate"].iloc[0] == pytest.approx(2 / 4)


def test_input_validation_names_missing_and_available_columns() -> None:
    df = _decisions(0, {}, roles=1)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['ethnicity'\].*available"):
        disparity_report(df, ["ethnicity"], "outcome", positive="accept")
    with pytest.raises(ValueError, match="never takes the positive value 'hired'"):
        disparity_report(df, GROUPS, "outcome", positive="hired")
    with pytest.raises(ValueError, match="more than one group"):
        shared = df.assign(name=np.where(df["gender"] == "male", "same", df["name"]))
        permutation_vs_population(shared, GROUPS, "outcome", "accept", n_permutations=10)


# --- permutation tests ------------------------------------------------------------------------


def test_email_unit_exact_matches_enumeration() -> None:
    # 10 answers, group "a" holds 4 of them: enumerate all C(10, 4) relabellings.
    hits = np.array([1, 1, 1, 0, 1, 0, 0, 1, 0, 0])
    grp = np.array(["a"] * 4 + ["b"] * 6)
    df = pd.DataFrame({"g": grp, "y": np.where(hits == 1, "acc", "rej")})
    res = permutation_vs_population(df, "g", "y", "acc", unit="email").set_index("g")
    k_obs = hits[:4].sum()
    draws = np.array([hits[list(c)].sum() for c in itertools.combinations(range(10), 4)])
    assert res.loc["a", "p_greater"] == pytest.approx(np.mean(draws >= k_obs), abs=1e-12)
    assert res.loc["a", "p_less"] == pytest.approx(np.mean(draws <= k_obs), abs=1e-12)
    assert res.loc["a", "method"] == "exact"
    assert res.loc["a", "d"] == pytest.approx(3 / 4 - 5 / 10)


def test_email_unit_monte_carlo_agrees_with_hypergeometric() -> None:
    df = _decisions(1, {("White", "male"): 0.12}, roles=2)
    b = 20_000
    mc = permutation_vs_population(
        df,
        GROUPS,
        "outcome",
        "accept",
        unit="email",
        stratum_col="role",
        method="monte_carlo",
        n_permutations=b,
        seed=5,
    )
    # Oracle: counts from a pandas groupby, tails straight from scipy's hypergeometric.
    valid = df[df["outcome"] != "invalid"].assign(acc=lambda x: x["outcome"] == "accept")
    cell = valid.groupby(["role", *GROUPS])["acc"].agg(["size", "sum"]).reset_index()
    role = valid.groupby("role")["acc"].agg(["size", "sum"])
    big_n, big_k = role.loc[cell["role"], "size"].to_numpy(), role.loc[cell["role"], "sum"]
    greater = stats.hypergeom.sf(cell["sum"] - 1, big_n, big_k.to_numpy(), cell["size"])
    less = stats.hypergeom.cdf(cell["sum"], big_n, big_k.to_numpy(), cell["size"])
    assert mc[["role", *GROUPS]].equals(cell[["role", *GROUPS]])
    assert (mc["method"] == "monte_carlo").all()
    _mc_close(mc["p_greater"], greater, b)
    _mc_close(mc["p_less"], less, b)
    exact = permutation_vs_population(
        df, GROUPS, "outcome", "accept", unit="email", stratum_col="role"
    )
    np.testing.assert_allclose(exact["p_greater"], greater, rtol=1e-9)
    np.testing.assert_allclose(exact["p_less"], less, rtol=1e-9)
    two = np.minimum(1, 2 * np.minimum(greater, less))
    np.testing.assert_allclose(exact["p_two_sided"], two, rtol=1e-9)


def _exact_name_tails(names: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Enumerate every assignment of names to groups of the observed sizes."""
    sizes = names["g"].value_counts().sort_index()
    n, k = names["n"].to_numpy(), names["k"].to_numpy()
    obs = {g: k[names["g"] == g].sum() / n[names["g"] == g].sum() for g in sizes.index}
    ge = dict.fromkeys(sizes.index, 0)
    le = dict.fromkeys(sizes.index, 0)
    total = 0
    labels = np.repeat(sizes.index.to_numpy(), sizes.to_numpy())
    for perm in set(itertools.permutations(labels)):
        perm = np.array(perm)
        total += 1
        for g in sizes.index:
            rate = k[perm == g].sum() / n[perm == g].sum()
            ge[g] += rate >= obs[g] - 1e-12
            le[g] += rate <= obs[g] + 1e-12
    return {g: (ge[g] / total, le[g] / total) for g in sizes.index}


def test_name_unit_monte_carlo_agrees_with_enumeration() -> None:
    rng = np.random.default_rng(11)
    # Stratum A: 8 names in 2 groups (C(8,4) = 70 assignments); stratum B: 9 names in 3 groups
    # (1,680 assignments). Names answer different numbers of times, some answers invalid.
    specs = {"A": ["x"] * 4 + ["y"] * 4, "B": ["x"] * 3 + ["y"] * 3 + ["z"] * 3}
    rows, per_name = [], []
    for stratum, groups in specs.items():
        for i, g in enumerate(groups):
            m = int(rng.integers(3, 9))
            p = {"x": 0.7, "y": 0.4, "z": 0.5}[g]
            out = np.where(rng.random(m) < p, "acc", "rej")
            out[rng.random(m) < 0.15] = "invalid"
            rows += [(stratum, f"{stratum}{i}", g, o) for o in out]
            valid = out != "invalid"
            per_name.append((stratum, g, valid.sum(), (out == "acc").sum()))
    df = pd.DataFrame(rows, columns=["stratum", "who", "grp", "y"])
    names = pd.DataFrame(per_name, columns=["stratum", "g", "n", "k"])
    names = names[names["n"] > 0]
    b = 20_000
    res = permutation_vs_population(
        df,
        "grp",
        "y",
        "acc",
        unit="name",
        unit_col="who",
        stratum_col="stratum",
        n_permutations=b,
        seed=3,
    )
    assert len(res) == 5
    for stratum in specs:
        oracle = _exact_name_tails(names[names["stratum"] == stratum])
        got = res[res["stratum"] == stratum].set_index("grp")
        for g, (p_ge, p_le) in oracle.items():
            _mc_close([got.loc[g, "p_greater"]], [p_ge], b)
            _mc_close([got.loc[g, "p_less"]], [p_le], b)
    assert (res["n_permutations"] == b).all()


def test_injected_effect_is_recovered_and_others_are_not_flagged() -> None:
    df = _decisions(8, {("Hispanic", "male"): 0.10}, roles=8)
    tests = permutation_vs_population(df, GROUPS, "outcome", "accept", n_permutations=5000)
    tests = adjust_family(tests, "p_two_sided").set_index(GROUPS)
    assert tests.loc[("Hispanic", "male"), "p_greater"] < 0.002
    assert tests.loc[("Hispanic", "male"), "p_adjusted"] < 0.05
    assert (tests.drop(index=[("Hispanic", "male")])["p_adjusted"] > 0.05).all()
    by_role = permutation_vs_population(df, GROUPS, "outcome", "accept", stratum_col="role")
    fisher = combine_pvalues_across(by_role, "role", GROUPS).set_index(GROUPS)
    assert fisher.loc[("Hispanic", "male"), "p_value"] < 0.001
    cmh = cmh_test(df, "role", GROUPS, "outcome", "accept").set_index(GROUPS)
    assert cmh.loc[("Hispanic", "male"), "odds_ratio"] > 1.3
    assert cmh.loc[("Hispanic", "male"), "p_value"] < 0.001


def test_email_unit_is_more_confident_than_name_unit_under_name_effects() -> None:
    # Each name has its own acceptance propensity; no group effect. Treating emails as
    # independent overstates the evidence; the name unit should not.
    rng = np.random.default_rng(2)
    rows = []
    for g in ("a", "b", "c"):
        for i in range(8):
            p = rng.uniform(0.1, 0.9)
            rows += [(g, f"{g}{i}", "yes" if rng.random() < p else "no") for _ in range(60)]
    df = pd.DataFrame(rows, columns=["g", "who", "y"])
    email = permutation_vs_population(df, "g", "y", "yes", unit="email")
    name = permutation_vs_population(df, "g", "y", "yes", unit_col="who", n_permutations=4000)
    assert email["p_two_sided"].min() < name["p_two_sided"].min()


# --- combining strata, CMH, multiplicity ------------------------------------------------------


def _tests_table() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    rows = [
        (f"r{r}", g, rng.uniform(0.001, 0.999), int(rng.integers(20, 400)))
        for r in range(7)
        for g in ("a", "b", "c")
    ]
    return pd.DataFrame(rows, columns=["role", "grp", "p_greater", "n"])


@pytest.mark.parametrize("method", ["fisher", "stouffer"])
def test_combination_matches_scipy(method: str) -> None:
    tests = _tests_table()
    got = combine_pvalues_across(tests, "role", "grp", method=method).set_index("grp")
    for g, part in tests.groupby("grp"):
        weights = np.sqrt(part["n"]) if method == "stouffer" else None
        ref = stats.combine_pvalues(part["p_greater"], method=method, weights=weights)
        assert got.loc[g, "statistic"] == pytest.approx(ref.statistic, rel=1e-10)
        assert got.loc[g, "p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
        assert got.loc[g, "n_strata"] == 7
    unweighted = combine_pvalues_across(tests, "role", "grp", method="stouffer", weight_col=None)
    ref = stats.combine_pvalues(tests.loc[tests["grp"] == "b", "p_greater"], method="stouffer")
    assert unweighted.set_index("grp").loc["b", "p_value"] == pytest.approx(ref.pvalue, rel=1e-9)


@pytest.mark.parametrize("correction", [False, True])
def test_cmh_matches_statsmodels(correction: bool) -> None:
    df = _decisions(3, {("Black", "female"): 0.08}, roles=5)
    got = cmh_test(df, "role", GROUPS, "outcome", "accept", correction=correction)
    valid = df[df["outcome"] != "invalid"]
    for _, row in got.iterrows():
        mine = (valid["race"] == row["race"]) & (valid["gender"] == row["gender"])
        tables = []
        for _, part in valid.groupby("role"):
            inside = mine.loc[part.index]
            acc = part["outcome"] == "accept"
            tables.append(
                [
                    [(inside & acc).sum(), (inside & ~acc).sum()],
                    [(~inside & acc).sum(), (~inside & ~acc).sum()],
                ]
            )
        ref = StratifiedTable(np.array(tables, dtype=float).transpose(1, 2, 0))
        null = ref.test_null_odds(correction=correction)
        assert row["odds_ratio"] == pytest.approx(ref.oddsratio_pooled, rel=1e-10)
        assert row["statistic"] == pytest.approx(null.statistic, rel=1e-9)
        assert row["p_value"] == pytest.approx(null.pvalue, rel=1e-9)
        assert row["n_strata"] == 5


@pytest.mark.parametrize(("ours", "theirs"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_family_adjustment_matches_statsmodels(ours: str, theirs: str) -> None:
    tests = _tests_table()
    whole = adjust_family(tests, "p_greater", ours)
    np.testing.assert_allclose(
        whole["p_adjusted"], multipletests(tests["p_greater"], method=theirs)[1], rtol=1e-12
    )
    per_role = adjust_family(tests, "p_greater", ours, family_cols="role")
    for _, part in per_role.groupby("role"):
        expected = multipletests(part["p_greater"], method=theirs)[1]
        np.testing.assert_allclose(part["p_adjusted"], expected, rtol=1e-12)


# --- impact ratios ----------------------------------------------------------------------------


def test_impact_ratio_chance_matches_exact_enumeration() -> None:
    n = np.array([20, 25, 30])
    k = np.array([7, 12, 15])
    table = pd.DataFrame({"g": ["a", "b", "c"], "n": n, "k": k})
    sims = 200_000
    got = impact_ratios(table, n_simulations=sims, seed=9)
    pooled = k.sum() / n.sum()
    np.testing.assert_allclose(got["impact_ratio"], (k / n) / (k / n).max())
    assert got["four_fifths_flag"].tolist() == [True, False, False]
    # Exact: enumerate every count triple with its binomial probability.
    grids = np.meshgrid(*[np.arange(m + 1) for m in n], indexing="ij")
    prob = np.ones(grids[0].shape)
    for grid, m in zip(grids, n, strict=True):
        prob = prob * stats.binom.pmf(grid, m, pooled)
    rates = np.stack([grid / m for grid, m in zip(grids, n, strict=True)], axis=-1)
    top = rates.max(axis=-1, keepdims=True)
    ratio = np.divide(rates, top, out=np.ones_like(rates), where=top > 0)
    flagged = ratio < 0.8 - 1e-12
    exact_each = [(prob * flagged[..., i]).sum() for i in range(3)]
    exact_any = (prob * flagged.any(axis=-1)).sum()
    _mc_close(got["p_flag_by_chance"], exact_each, sims)
    _mc_close([got["p_any_flag_by_chance"].iloc[0]], [exact_any], sims)
    # Closed form for one group: flagged unless every other rate <= its rate / 0.8.
    own = stats.binom.pmf(np.arange(n[0] + 1), n[0], pooled)
    safe = np.ones(n[0] + 1)
    for m in n[1:]:
        limit = np.floor(m * (np.arange(n[0] + 1) / n[0]) / 0.8 + 1e-9)
        safe *= stats.binom.cdf(limit, m, pooled)
    assert exact_each[0] == pytest.approx((own * (1 - safe)).sum(), rel=1e-9)
    # The reported 5th percentile of the smallest ratio is a 5 % quantile of the exact law.
    q = got["min_ratio_p05"].iloc[0]
    low = ratio.min(axis=-1)
    assert (prob * (low <= q + 1e-12)).sum() >= 0.05 - 0.005
    assert (prob * (low < q - 1e-12)).sum() <= 0.05 + 0.005


def test_impact_ratios_reproduce_bloomberg_table() -> None:
    if not BLOOMBERG.exists():
        pytest.skip("Bloomberg reference data not available")
    ref = pd.read_csv(BLOOMBERG)
    for _, part in ref.groupby(["model", "job"]):
        table = part.assign(n=1000, k=part["top"])
        got = impact_ratios(table, n_simulations=100)
        np.testing.assert_allclose(got["impact_ratio"], part["disparate_impact_ratio"], atol=1e-12)


# --- breakdown and report ---------------------------------------------------------------------


def test_rate_breakdown_is_a_pivot_with_markers() -> None:
    df = _decisions(5, {("White", "male"): 0.2}, roles=3)
    tests = permutation_vs_population(df, GROUPS, "outcome", "accept", stratum_col="role")
    table = rate_breakdown(
        df, "role", GROUPS, "outcome", "accept", row_order=["role2", "role0"], tests=tests
    )
    assert table["role"].tolist() == ["role2", "role0"]
    valid = df[df["outcome"] != "invalid"]
    for _, row in table.iterrows():
        part = valid[valid["role"] == row["role"]]
        rates = part.groupby(GROUPS)["outcome"].apply(lambda s: 100 * (s == "accept").mean())
        assert row["White male"] == pytest.approx(rates[("White", "male")])
        assert row["max_difference"] == pytest.approx(rates.max() - rates.min())
        assert row["average"] == pytest.approx(100 * (part["outcome"] == "accept").mean())
        assert row["n"] == len(part)
        p = tests.set_index(["role", *GROUPS]).loc[(row["role"], "White", "male"), "p_two_sided"]
        level = "†" if p < 0.01 else "*" if p < 0.05 else ""
        side = "+" if row["White male"] > row["average"] else "-"
        assert row["White male sig"] == (level + side if level else "")
    with pytest.raises(ValueError, match="not found"):
        rate_breakdown(df, "role", GROUPS, "outcome", "accept", row_order=["role9"])


def test_report_has_every_part() -> None:
    df = _decisions(6, {("White", "female"): 0.1}, roles=3)
    report = disparity_report(
        df,
        GROUPS,
        "outcome",
        positive="accept",
        unit_col="name",
        stratum_col="role",
        n_permutations=500,
        n_simulations=2000,
    )
    rates = report["rates"]
    assert report["dpd"] == pytest.approx(rates["rate"].max() - rates["rate"].min())
    assert report["n_excluded"] == (df["outcome"] == "invalid").sum()
    assert len(report["permutation_by_stratum"]) == 18
    # Every name answers in every role: the joint test replaces the independent-strata ones.
    assert "combined" not in report and len(report["joint"]) == 6
    for key in ("permutation", "permutation_by_stratum", "joint"):
        assert "p_adjusted" in report[key].columns
    per_email = disparity_report(
        df, GROUPS, "outcome", positive="accept", stratum_col="role", n_simulations=500
    )
    assert set(per_email["combined"]["method"]) == {"fisher", "stouffer"}
    assert len(per_email["combined"]) == 24
    assert "p_adjusted" in per_email["cmh"].columns
    plain = disparity_report(df, GROUPS, "outcome", positive="accept", n_simulations=500)
    assert "cmh" not in plain and "joint" not in plain
    assert (plain["permutation"]["method"] == "exact").all()


def test_a_table_without_any_positive_is_a_finding_when_labels_are_fixed() -> None:
    """A model that rejects everyone: every rate is 0, nothing is significant, and no statistic
    turns into an error or a warning (a study's run must still write its report)."""
    df = _decisions(0, {}, roles=3)
    df = df.assign(outcome="reject")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = disparity_report(
            df,
            GROUPS,
            "outcome",
            positive="accept",
            stratum_col="role",
            n_permutations=50,
            n_simulations=200,
            require_positive=False,
        )
    assert (report["rates"]["rate"] == 0).all() and report["dpd"] == 0
    assert (report["permutation"]["p_two_sided"] == 1).all()
    assert report["cmh"]["p_value"].isna().all()  # no variance: CMH is undefined, not 0 or 1
