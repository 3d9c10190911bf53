"""Permutation tests with names as the unit: exactness against enumeration, and calibration under
a null that keeps the seed-001 structure (every name answers in every role, names differ in how
much the model likes them, no group effect)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.disparity import (
    RESOLUTION,
    combine_pvalues_across,
    disparity_report,
    joint_vs_population,
    permutation_vs_population,
)
from biasim.analysis.stats.permutation import (
    block_permutation_sums,
    parity_permutation_test,
    smallest_p,
)

GROUPS = ["race", "gender"]
CELLS = [(r, g) for r in ("White", "Black", "Hispanic") for g in ("female", "male")]


def name_study(
    rng: np.random.Generator,
    names: int = 10,
    roles: int = 12,
    sd: float = 1.0,
    emails: int = 1,
    invalid: float = 0.0,
) -> pd.DataFrame:
    """Every name answers in every role; a name's own propensity (logit ~ N(0, sd)) and a role
    effect set its acceptance rate; the group has no effect at all. A share ``invalid`` of the
    emails says nothing usable."""
    units = len(CELLS) * names
    name_effect = rng.normal(0.0, sd, size=units)
    role_effect = rng.normal(0.0, 0.5, size=roles)
    p = 1 / (1 + np.exp(-(name_effect[:, None, None] + role_effect[None, None, :])))
    accept = rng.random((units, emails, roles)) < p
    unit = np.repeat(np.arange(units), emails * roles)
    cell = unit // names
    return pd.DataFrame(
        {
            "race": np.array([c[0] for c in CELLS], dtype=object)[cell],
            "gender": np.array([c[1] for c in CELLS], dtype=object)[cell],
            "name": np.char.add("name-", unit.astype(str)).astype(object),
            "role": np.tile(np.arange(roles), units * emails),
            "outcome": np.where(
                rng.random(accept.size) < invalid,
                "invalid",
                np.where(accept.ravel(), "accept", "reject"),
            ).astype(object),
        }
    )


def by_name_and_role(df: pd.DataFrame, n_permutations: int) -> dict:
    """The report of a name-swap design tested within and across roles."""
    return disparity_report(
        df,
        GROUPS,
        "outcome",
        positive="accept",
        unit_col="name",
        stratum_col="role",
        n_permutations=n_permutations,
        n_simulations=500,
    )


# --- the engine ------------------------------------------------------------------------------


def test_relabellings_keep_block_sizes_and_match_sampling_moments() -> None:
    """Within each block a relabelling is a uniformly random assignment: a group's sum has the
    mean and variance of sampling without replacement (the finite-population formulas)."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=12)
    group = np.array([0, 0, 1, 1, 1, 2] * 2)
    block = np.array([0] * 6 + [1] * 6)
    sums = np.concatenate(list(block_permutation_sums(values, group, block, 3, 40_000, rng)))
    ones = np.concatenate(
        list(block_permutation_sums(np.ones(12, dtype=np.int64), group, block, 3, 50, rng))
    )
    assert (ones == np.bincount(group)).all()  # each block keeps its group sizes
    for code in range(3):
        mean = var = 0.0
        for b in (0, 1):
            v, m = values[block == b], int(((group == code) & (block == b)).sum())
            big_n = v.size
            mean += m * v.mean()
            var += m * (big_n - m) / big_n * v.var(ddof=1)
        assert sums[:, code].mean() == pytest.approx(mean, abs=4 * np.sqrt(var / 40_000))
        assert sums[:, code].var() == pytest.approx(var, rel=0.05)


def _enumerated_joint(df: pd.DataFrame) -> dict[tuple, float]:
    """Exact one-sided p (greater) of the joint statistic by enumerating every relabelling."""
    units = df.groupby("name").agg(race=("race", "first"), gender=("gender", "first"))
    rate = df.assign(y=df["outcome"] == "accept").groupby("role")["y"].mean()
    df = df.assign(r=(df["outcome"] == "accept") - df["role"].map(rate))
    residual = df.groupby("name")["r"].sum().reindex(units.index).to_numpy()
    labels = list(map(tuple, units[GROUPS].to_numpy()))
    out = {}
    for group in set(labels):
        size = labels.count(group)
        observed = residual[[lab == group for lab in labels]].sum()
        sums = [residual[list(c)].sum() for c in itertools.combinations(range(len(labels)), size)]
        out[group] = float(np.mean(np.array(sums) >= observed - 1e-9))
    return out


def test_joint_test_agrees_with_enumeration() -> None:
    rng = np.random.default_rng(5)
    df = name_study(rng, names=2, roles=3, emails=2)
    df = df[df["race"] != "Hispanic"]  # 8 names: every relabelling can be enumerated
    exact = _enumerated_joint(df)
    b = 20_000
    got = joint_vs_population(
        df, GROUPS, "outcome", "accept", unit_col="name", stratum_col="role", n_permutations=b
    )
    for row in got.itertuples():
        p = exact[(row.race, row.gender)]
        # Counting the observed labelling shifts the estimate by at most 1 / (B + 1).
        assert abs(row.p_greater - p) <= 4 * np.sqrt(p * (1 - p) / b) + 1 / (b + 1)
        assert row.n_units == 2 and row.n_blocks == 1
        assert row.smallest_p == pytest.approx(2 / 28)  # C(8, 2) memberships
    # Names nested in roles: only relabellings within each role exist, 2^3 of them for a
    # group with one name in each of 3 two-name roles.
    nested = df.assign(name=df["name"] + "@" + df["role"].astype(str))
    pair = nested[nested["race"] == "White"].copy()
    pair["name"] = pair["gender"] + pair["role"].astype(str)
    found = joint_vs_population(
        pair, GROUPS, "outcome", "accept", unit_col="name", stratum_col="role", n_permutations=50
    )
    assert (found["n_blocks"] == 3).all()
    assert found["smallest_p"].tolist() == pytest.approx([2 / 8, 2 / 8])
    only = joint_vs_population(
        pair[pair["gender"] == "male"],
        GROUPS,
        "outcome",
        "accept",
        unit_col="name",
        stratum_col="role",
        reference=("White", "male"),
    )
    assert only.empty and "p_two_sided" in only.columns


def test_invalid_answers_do_not_split_the_relabelling_blocks() -> None:
    """Blocks come from where a name was asked, not where its answers were valid: with
    invalid emails scattered over the roles every name still shares one block."""
    df = name_study(np.random.default_rng(8), names=5, roles=20, invalid=0.1)
    per_name = df[df["outcome"] != "invalid"].groupby("name")["role"].nunique()
    assert per_name.nunique() > 1  # valid answers cover different roles per name
    joint = joint_vs_population(
        df, GROUPS, "outcome", "accept", unit_col="name", stratum_col="role", n_permutations=500
    )
    assert (joint["n_blocks"] == 1).all()
    assert (joint["p_two_sided"] < 1).any()
    dpd = by_name_and_role(df, 300)
    assert dpd["dpd_p_value"] < 1


def test_reference_comparison_is_the_two_group_test() -> None:
    """Against a reference group, only the two groups' names are relabelled."""
    df = name_study(np.random.default_rng(2), names=5, roles=4)
    pair = df[df["race"].isin(["White", "Black"]) & (df["gender"] == "male")]
    versus = joint_vs_population(
        df,
        GROUPS,
        "outcome",
        "accept",
        unit_col="name",
        stratum_col="role",
        reference=("White", "male"),
        n_permutations=2000,
        seed=3,
    ).set_index(GROUPS)
    alone = joint_vs_population(
        pair,
        GROUPS,
        "outcome",
        "accept",
        unit_col="name",
        stratum_col="role",
        n_permutations=2000,
        seed=3,
    ).set_index(GROUPS)
    assert len(versus) == 5 and (versus["compared_with"] == "White male").all()
    # In the two-group data "versus the population" is the same relabelling of the same names.
    row = versus.loc[("Black", "male")]
    assert row["n_units"] == 5
    assert row["rate"] == pytest.approx(alone.loc[("Black", "male"), "rate"])
    assert row["d"] == pytest.approx(alone.loc[("Black", "male"), "d"])
    with pytest.raises(ValueError, match="not found"):
        joint_vs_population(df, GROUPS, "outcome", "accept", unit_col="name", reference=("x", "y"))


def test_parity_permutation_agrees_with_enumeration() -> None:
    n = np.array([3, 2, 4, 3, 1, 2, 3, 2])
    k = np.array([3, 0, 1, 2, 1, 0, 3, 1])
    group = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    rates = lambda members: k[members].sum() / n[members].sum()  # noqa: E731
    observed = abs(rates(group == 0) - rates(group == 1))
    null = []
    for c in itertools.combinations(range(8), 4):
        mask = np.isin(np.arange(8), c)
        null.append(abs(rates(mask) - rates(~mask)))
    exact = float(np.mean(np.array(null) >= observed - 1e-12))
    b = 20_000
    test = parity_permutation_test(n, k, group, n_permutations=b, seed=1)
    assert test.dpd == pytest.approx(observed)
    assert abs(test.p_value - exact) <= 4 * np.sqrt(exact * (1 - exact) / b) + 1 / (b + 1)
    assert test.significant == (test.p_value < 0.05) == (test.dpd > test.threshold)


def test_smallest_attainable_p_is_two_over_the_memberships() -> None:
    assert smallest_p(10, np.array([5]))[0] == pytest.approx(2 / 252)
    assert smallest_p(4, np.array([2]))[0] == pytest.approx(2 / 6)


# --- reachable significance --------------------------------------------------------------------


def test_adjusted_significance_stays_reachable_in_a_large_family() -> None:
    """246 per-stratum tests at B = 200 could never survive Holm (246 / 201 > 1): strata with a
    small p get enough permutations that the smallest two-sided adjusted p is alpha / 2."""
    rng = np.random.default_rng(1)
    df = name_study(rng, names=6, roles=41, sd=0.3, emails=3)
    role0, black_men = df["role"] == 0, (df["race"] == "Black") & (df["gender"] == "male")
    df.loc[role0, "outcome"] = np.where(black_men[role0], "reject", "accept")
    tests = permutation_vs_population(
        df, GROUPS, "outcome", "accept", unit_col="name", stratum_col="role", n_permutations=200
    )
    assert len(tests) == 246
    extended = tests[tests["n_permutations"] > 200]
    assert (extended["n_permutations"] == int(np.ceil(RESOLUTION * 246 / 0.05))).all()
    assert tests.loc[tests["p_two_sided"] >= 0.1, "n_permutations"].min() == 200
    hit = tests[(tests["role"] == 0) & (tests["race"] == "Black") & (tests["gender"] == "male")]
    assert hit["n_permutations"].iloc[0] > 200 and hit["p_less"].iloc[0] < 0.05 / 246


def test_a_family_that_cannot_reach_significance_is_reported() -> None:
    df = name_study(np.random.default_rng(0), names=2, roles=8)
    report = by_name_and_role(df, 200)
    notes = " ".join(report["notes"])
    assert "permutation_by_stratum: no test of this family can be significant" in notes


# --- which tests run, and what they assume ----------------------------------------------------


def test_shared_names_replace_independent_strata_combinations_by_the_joint_test() -> None:
    df = name_study(np.random.default_rng(4), names=4, roles=5)
    shared = by_name_and_role(df, 300)
    assert "combined" not in shared and "cmh" not in shared
    assert {"p_greater_adjusted", "p_less_adjusted", "p_adjusted"} <= set(shared["joint"])
    assert "24 name values answer in several role strata" in shared["notes"][0]
    assert shared["dpd_test"] == "permutation of name labels"
    # Names nested in roles: the strata are independent and the combinations come back.
    nested = df.assign(name=df["name"] + "@" + df["role"].astype(str))
    own = by_name_and_role(nested, 300)
    assert {"combined", "cmh", "joint"} <= set(own)
    assert "independent (no name answers in two strata)" in own["notes"][0]


def test_stouffer_gives_a_stratum_without_information_no_weight() -> None:
    """Both one-sided p-values are 1 where every answer is the same: mid-p 0.5, z = 0."""
    tests = pd.DataFrame(
        {
            "role": ["a", "b", "c"],
            "grp": "g",
            "p_greater": [0.02, 1.0, 0.3],
            "p_less": [0.99, 1.0, 0.8],
            "n": [50, 50, 50],
        }
    )
    from scipy import stats

    got = combine_pvalues_across(tests, "role", "grp", method="stouffer")
    mid = [(1 + 0.02 - 0.99) / 2, (1 + 0.3 - 0.8) / 2]
    z = stats.norm.isf(mid).sum() / np.sqrt(3)
    assert got["statistic"].iloc[0] == pytest.approx(z)


# --- calibration -------------------------------------------------------------------------------


@pytest.mark.slow
def test_joint_test_rejects_at_its_level_when_names_recur_across_roles() -> None:
    """1,000 null studies (60 names, 12 roles, name-level heterogeneity): each group's joint
    test rejects 3-7 % at alpha = 0.05, and Holm over the six groups at most 7 %."""
    rng = np.random.default_rng(7)
    single, family = [], []
    for study in range(1000):
        joint = joint_vs_population(
            name_study(rng, invalid=0.05),
            GROUPS,
            "outcome",
            "accept",
            unit_col="name",
            stratum_col="role",
            n_permutations=499,
            seed=study,
        )
        single.append(joint["p_two_sided"].iloc[0] < 0.05)
        family.append(len(joint) * joint["p_two_sided"].min() < 0.05)
    assert 0.03 <= np.mean(single) <= 0.07
    assert np.mean(family) <= 0.07


@pytest.mark.slow
def test_dpd_by_name_rejects_at_its_level_where_the_binomial_null_does_not() -> None:
    """The DPD's binomial null treats each answer as independent: with names that recur across
    roles it rejects almost always under no group effect. Relabelling names keeps the level
    (500 null studies: a rate of 5 % lies in 3-7 % with 96 % probability)."""
    rng = np.random.default_rng(3)
    by_name, binomial = [], []
    for study in range(500):
        df = name_study(rng, names=10, roles=12, invalid=0.05)
        common = {"positive": "accept", "n_permutations": 50, "n_simulations": 499, "seed": study}
        by_name.append(
            disparity_report(df, GROUPS, "outcome", unit_col="name", **common)["dpd_p_value"] < 0.05
        )
        if study < 100:
            binomial.append(disparity_report(df, GROUPS, "outcome", **common)["dpd_p_value"] < 0.05)
    assert 0.03 <= np.mean(by_name) <= 0.07
    assert np.mean(binomial) > 0.2


@pytest.mark.parametrize("k_share", [0, 1, 0.5])
def test_units_of_one_rate_need_no_draws_and_give_what_drawing_gives(monkeypatch, k_share) -> None:
    """Every unit at the same rate (no answer invalid, say): every relabelling gives DPD 0, so
    the test skips drawing them; the result is the drawn one."""
    import biasim.analysis.stats.permutation as permutation

    n = np.array([4, 2, 6, 8, 2, 4])
    k = (n * k_share).astype(np.int64)
    g = np.array([0, 0, 1, 1, 2, 2])
    short = permutation.parity_permutation_test(n, k, g, n_permutations=200, seed=3)
    monkeypatch.setattr(permutation, "_one_rate", lambda n, k: False)
    drawn = permutation.parity_permutation_test(n, k, g, n_permutations=200, seed=3)
    assert short == drawn and short.p_value == 1.0 and short.dpd == 0.0
    # One unit off the common rate: the draws run (and the test is not trivially 1).
    k[0] = 0 if k_share else 1
    assert permutation._one_rate(n, k) is False
