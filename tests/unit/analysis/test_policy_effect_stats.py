"""The paired policy comparison (analysis.stats.policy) against independent oracles: rates and
ratios by direct counting, the joint pool-swap permutation p against exact enumeration of every
swap, and its calibration and power on simulated pipelines with the real structure (pools of 8
applicants of three races and two genders, 3 shortlisted by weight and position, 1 hired of the
3 by gender weight and position, each policy an independent reading of the same pools)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import policy

RACES = ("Black", "Hispanic", "White")
GENDERS = ("female", "male")
#: Position effects of the null studies: the first letters of a pool and the first of a
#: shortlist are favoured, as a reader who tires would.
SCREEN_POSITIONS = np.log([1.6, 1.3, 1.1, 1.0, 1.0, 1.0, 1.0, 1.0])
OFFER_POSITIONS = np.log([1.5, 1.0, 1.0])


def hire(
    race: np.ndarray,
    gender: np.ndarray,
    rng: np.random.Generator,
    screen: dict[int, float],
    *,
    offer: float = 1.5,
    select: int = 3,
    positions: bool = False,
) -> np.ndarray:
    """Who is hired in pools of 8 (``race``, ``gender``: codes, shape (..., 8)): the screener
    picks ``select`` by race weight (Gumbel top-k), the manager 1 of those by gender weight
    (men ``offer``); with ``positions``, both also by position. Returns hired (bool)."""
    log_w = np.log(np.array([screen.get(r, 1.0) for r in range(len(RACES))]))[race]
    if positions:
        log_w = log_w + SCREEN_POSITIONS
    keys = log_w + rng.gumbel(size=race.shape)
    shortlist = np.sort(np.argsort(-keys, axis=-1)[..., :select], axis=-1)
    log_g = np.log(np.array([1.0, offer]))[np.take_along_axis(gender, shortlist, -1)]
    if positions:
        log_g = log_g + np.pad(OFFER_POSITIONS, (0, select - 3))
    pick = np.argmax(log_g + rng.gumbel(size=shortlist.shape), axis=-1)
    winner = np.take_along_axis(shortlist, pick[..., None], -1)
    hired = np.zeros(race.shape, dtype=bool)
    np.put_along_axis(hired, winner, True, axis=-1)
    return hired


def outcomes_frame(race: np.ndarray, gender: np.ndarray, hired: dict[str, np.ndarray]):
    """The outcomes table of one study: ``race``, ``gender`` and each policy's hired are
    (pools x 8)."""
    n_pools = race.shape[0]
    pool = np.repeat(np.arange(n_pools), 8)
    frames = [
        pd.DataFrame(
            {
                "candidate": [f"p{c}/{i}" for c in range(n_pools) for i in range(8)],
                "policy": name,
                "cluster": pool.astype(str),
                "race": np.array(RACES)[race.reshape(-1)],
                "gender": np.array(GENDERS)[gender.reshape(-1)],
                "selected": chosen.reshape(-1),
            }
        )
        for name, chosen in hired.items()
    ]
    return pd.concat(frames, ignore_index=True)


def draw_pools(rng: np.random.Generator, *shape: int) -> tuple[np.ndarray, np.ndarray]:
    """Race and gender codes of pool members, drawn independently (shape (..., 8))."""
    return rng.integers(0, 3, size=(*shape, 8)), rng.integers(0, 2, size=(*shape, 8))


def test_rates_and_ratios_are_direct_counts() -> None:
    rng = np.random.default_rng(1)
    race, gender = draw_pools(rng, 40)
    hired = {"base": hire(race, gender, rng, {2: 1.5}), "new": hire(race, gender, rng, {2: 1.5})}
    frame = outcomes_frame(race, gender, hired)
    table = policy.policy_rates(frame, "race", ["base", "new"], n_boot=200, seed=3)
    direct = frame.groupby(["policy", "race"])["selected"].mean()
    for row in table.itertuples():
        assert row.rate == pytest.approx(direct[(row.policy, row.value)])
        top = direct[row.policy].max()
        assert row.impact_ratio == pytest.approx(direct[(row.policy, row.value)] / top)
        assert row.rate_low <= row.rate <= row.rate_high
        assert row.entered == (race == RACES.index(row.value)).sum()
    # The pooled rate is 1 hire per pool of 8.
    assert table.groupby("policy")["selected"].sum().tolist() == [40, 40]


def _exact_joint_p(changes: np.ndarray, form) -> float:
    """The oracle: every one of the 2**clusters sign assignments, with ``form`` the
    statistic of a summed change vector."""
    observed = form(changes.sum(axis=0))
    count = 0
    for swap in itertools.product((1, -1), repeat=len(changes)):
        count += form(np.array(swap) @ changes) >= observed - 1e-9
    return count / 2 ** len(changes)


def test_joint_pool_swap_p_matches_exact_enumeration() -> None:
    # Three races, one hire per pool under each policy: the changes sum to zero over the
    # groups, so the form has rank 2; the oracle inverts W on the first two groups.
    rng = np.random.default_rng(7)
    race = rng.integers(0, 3, size=(10, 8))
    base = hire(race, np.zeros_like(race), rng, {2: 2.0})
    new = hire(race, np.zeros_like(race), rng, {})
    frame = outcomes_frame(race, np.zeros_like(race), {"base": base, "new": new})
    table = policy.policy_tests(frame, "race", "base", ["base", "new"], n_permutations=40_000)
    changes = np.array(
        [
            [(new[c] & (race[c] == r)).sum() - (base[c] & (race[c] == r)).sum() for r in range(3)]
            for c in range(10)
        ],
        dtype=float,
    )
    assert np.all(changes.sum(axis=1) == 0)
    inverse = np.linalg.inv(changes[:, :2].T @ changes[:, :2])
    exact = _exact_joint_p(changes, lambda d: d[:2] @ inverse @ d[:2])
    row = table.iloc[0]
    assert row["df"] == 2 and row["policy"] == "new" and row["n_units"] == 10
    assert row["p_value"] == pytest.approx(exact, abs=0.01)
    # 10 pools: the observed assignment and its mirror are 2 of the 1024 (no p below them).
    assert row["smallest_p"] == 2 / 1024


def test_three_pools_cannot_reach_alpha_and_the_row_says_so() -> None:
    """With 3 pools the joint statistic takes its largest value on 2 of the 8 sign
    assignments, so p lands near 0.25 however strong the policy; the row states that floor."""
    rng = np.random.default_rng(3)
    race = rng.integers(0, 2, size=(3, 8))
    base = hire(race, np.zeros_like(race), rng, {1: 50.0})
    new = hire(race, np.zeros_like(race), rng, {0: 50.0})
    frame = outcomes_frame(race, np.zeros_like(race), {"base": base, "new": new})
    row = policy.policy_tests(frame, "race", "base", ["base", "new"], n_permutations=4000).iloc[0]
    assert row["smallest_p"] == 0.25 and row["p_value"] > 0.2


def test_joint_p_without_the_constraint_matches_exact_enumeration() -> None:
    # Applicants read alone (or a threshold stage): the changes need not sum to zero and the
    # form is full rank.
    rng = np.random.default_rng(3)
    changes = rng.integers(-2, 3, size=(11, 3)).astype(float)
    changes[:, 0] += rng.integers(0, 2, size=11)  # a shift in one group
    flips = 1.0 - 2.0 * np.array(list(itertools.product((0, 1), repeat=11)), dtype=float)
    null, observed, rank = policy.joint_statistic(changes, flips)
    inverse = np.linalg.inv(changes.T @ changes)
    exact = _exact_joint_p(changes, lambda d: d @ inverse @ d)
    assert rank == 3
    assert observed == pytest.approx(changes.sum(0) @ inverse @ changes.sum(0))
    assert np.mean(null >= observed - 1e-9) == pytest.approx(exact)


def test_two_groups_the_joint_test_is_the_group_test_and_holm_is_across_policies() -> None:
    rng = np.random.default_rng(5)
    race = rng.integers(0, 2, size=(30, 8))
    none = np.zeros_like(race)
    hired = {
        name: hire(race, none, rng, screen)
        for name, screen in (("base", {1: 2.0}), ("a", {}), ("b", {1: 2.0}))
    }
    frame = outcomes_frame(race, none, hired)
    table = policy.policy_tests(frame, "race", "base", ["base", "a", "b"], n_permutations=999)
    # With two groups and one hire per pool, the joint statistic orders the swaps as the
    # group's own |change| does: the same p as a one-group test by exact enumeration.
    changes = np.array(
        [
            [(hired["a"][c] & (race[c] == 1)).sum() - (hired["base"][c] & (race[c] == 1)).sum()]
            for c in range(30)
        ],
        dtype=float,
    )
    assert table.loc[0, "df"] == 1
    group_p = np.mean(
        np.abs((1.0 - 2.0 * rng.integers(0, 2, size=(200_000, 30))) @ changes[:, 0])
        >= abs(changes.sum()) - 1e-9
    )
    assert table.loc[0, "p_value"] == pytest.approx(group_p, abs=0.02)
    from statsmodels.stats.multitest import multipletests

    holm = multipletests(table["p_value"].to_numpy(), method="holm")[1]
    assert table["p_adjusted"].to_numpy() == pytest.approx(holm)
    assert list(table["policy"]) == ["a", "b"]


def test_rate_changes_are_direct_counts_with_intervals() -> None:
    rng = np.random.default_rng(8)
    race = rng.integers(0, 3, size=(40, 8))
    none = np.zeros_like(race)
    hired = {"base": hire(race, none, rng, {2: 2.0}), "new": hire(race, none, rng, {})}
    frame = outcomes_frame(race, none, hired)
    table = policy.policy_difference(frame, "race", "base", "new", n_boot=300).set_index("value")
    for code, name in enumerate(RACES):
        entered = (race == code).sum()
        change = (hired["new"] & (race == code)).sum() - (hired["base"] & (race == code)).sum()
        assert table.loc[name, "rate_change"] == pytest.approx(change / entered)
        assert table.loc[name, "rate_change_low"] <= table.loc[name, "rate_change"]
        assert table.loc[name, "rate_change"] <= table.loc[name, "rate_change_high"]
    assert "p_value" not in table.columns  # intervals beside the joint test, not tests


def test_every_candidate_must_be_read_under_both_policies() -> None:
    rng = np.random.default_rng(2)
    race, gender = draw_pools(rng, 5)
    hired = {"base": hire(race, gender, rng, {}), "new": hire(race, gender, rng, {})}
    frame = outcomes_frame(race, gender, hired).iloc[1:]
    with pytest.raises(ValueError, match="exactly one row under every policy"):
        policy.policy_tests(frame, "race", "base", ["base", "new"])


def _studies(n_studies: int, n_pools: int, policies: dict[str, dict], seed: int, **hiring):
    """Per simulated study: the outcomes table of every policy read in the same pools."""
    rng = np.random.default_rng(seed)
    race, gender = draw_pools(rng, n_studies, n_pools)
    hired = {
        name: hire(race, gender, rng, screen, **{**hiring, **extra})
        for name, (screen, extra) in policies.items()
    }
    for s in range(n_studies):
        yield outcomes_frame(race[s], gender[s], {k: v[s] for k, v in hired.items()})


@pytest.mark.slow
def test_joint_test_holds_its_level_per_family_under_bias_and_position_effects() -> None:
    # 300 studies of 60 pools: a screener who favours White applicants, a manager who favours
    # men, both favouring the first positions; every policy is the same process read anew.
    same = ({2: 1.5}, {})
    policies = {"base": same, "a": same, "b": same}
    families, tests, covered = [], [], []
    for s, frame in enumerate(_studies(300, 60, policies, seed=11, positions=True)):
        for group in ("race", "gender"):
            table = policy.policy_tests(
                frame, group, "base", list(policies), n_permutations=199, seed=s
            )
            families.append((table["p_adjusted"] <= 0.05).any())
            tests += list(table["p_value"] <= 0.05)
        change = policy.policy_difference(frame, "race", "base", "a", n_boot=200, seed=s)
        covered += list((change["rate_change_low"] <= 0) & (change["rate_change_high"] >= 0))
    print(f"family-wise {np.mean(families):.3f}, per test {np.mean(tests):.3f}")
    assert 0.03 <= np.mean(families) <= 0.07
    assert 0.03 <= np.mean(tests) <= 0.07
    assert 0.92 <= np.mean(covered) <= 0.98


def _group_counts(race: np.ndarray, hired: np.ndarray) -> np.ndarray:
    """Hired per (..., pool, race)."""
    return np.stack([(hired & (race == r)).sum(-1) for r in range(len(RACES))], -1).astype(float)


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm's adjusted p over the last axis (an oracle independent of analysis.stats)."""
    order = np.argsort(p, axis=-1)
    m = p.shape[-1]
    stepped = np.maximum.accumulate(np.take_along_axis(p, order, -1) * (m - np.arange(m)), -1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.minimum(stepped, 1.0), -1)
    return out


@pytest.mark.slow
def test_joint_test_finds_redaction_more_often_than_group_tests_with_holm() -> None:
    # The built-in study's size (450 pools of 8) and declared truth: redaction removes the
    # screener's preference for White applicants it can see (weight 1.5 -> 1); the manager
    # favours men. The former test (each race's |change| by the same pool swap, Holm across
    # the races of the comparison) against the joint test of the comparison, and the joint
    # test Holm-adjusted across the study's two policies (a shortlist of 5 the second).
    rng = np.random.default_rng(1)
    race, gender = draw_pools(rng, 200, 450)
    base = _group_counts(race, hire(race, gender, rng, {2: 1.5}))
    redacted = _group_counts(race, hire(race, gender, rng, {})) - base
    shortlist = _group_counts(race, hire(race, gender, rng, {2: 1.5}, select=5)) - base
    former, joint = [], []
    for s in range(200):
        flips = 1.0 - 2.0 * rng.integers(0, 2, size=(399, 450))
        hits = (np.abs(flips @ redacted[s]) >= np.abs(redacted[s].sum(0)) - 1e-9).sum(0)
        former.append(_holm((1 + hits) / 400).min())
        p = []
        for changes in (redacted[s], shortlist[s]):
            null, observed, _rank = policy.joint_statistic(changes, flips)
            p.append((1 + np.count_nonzero(null >= observed - 1e-9)) / 400)
        joint.append(p)
    found = {
        "former": np.mean(np.array(former) <= 0.05),
        "joint": np.mean(np.array(joint)[:, 0] <= 0.05),
        "joint, holm across policies": np.mean(_holm(np.array(joint))[:, 0] <= 0.05),
    }
    print(found)
    assert found["joint"] >= found["former"] + 0.05
