"""The paired policy comparison (analysis.stats.policy) against independent oracles: rates and
ratios by direct counting, the pool-swap permutation p against exact enumeration of every
swap, and its calibration and power on simulated pipelines with the real structure (pools of 8
from a stratified draw, 3 shortlisted by weight, 1 hired of the 3 by weight, each policy an
independent reading of the same pools)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import policy

RACES = ("Black", "White")
GENDERS = ("female", "male")


def simulate(
    n_pools: int,
    screen: dict[str, float],
    rng: np.random.Generator,
    n_studies: int = 1,
    offer: float = 1.5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Who is hired in ``n_studies`` studies of ``n_pools`` pools of 8 (2 of each race x
    gender cell): the screener picks 3 by race weight (Gumbel top-k), the manager 1 of those by
    gender weight (men ``offer``). Returns race codes, gender codes (per position) and hired
    (studies x pools x 8, bool)."""
    race = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    gender = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    log_w = np.log(np.array([screen.get(r, 1.0) for r in RACES]))[race]
    keys = log_w + rng.gumbel(size=(n_studies, n_pools, 8))
    shortlist = np.argsort(-keys, axis=-1)[..., :3]
    log_g = np.log(np.array([1.0, offer]))[gender[shortlist]]
    winner = np.take_along_axis(
        shortlist, np.argmax(log_g + rng.gumbel(size=shortlist.shape), axis=-1)[..., None], -1
    )
    hired = np.zeros((n_studies, n_pools, 8), dtype=bool)
    np.put_along_axis(hired, winner, True, axis=-1)
    return race, gender, hired


def outcomes_frame(
    race: np.ndarray, hired_a: np.ndarray, hired_b: np.ndarray, policies=("base", "new")
) -> pd.DataFrame:
    """The outcomes table of one study: hired_a, hired_b are (pools x 8)."""
    n_pools = hired_a.shape[0]
    pool = np.repeat(np.arange(n_pools), 8)
    frames = [
        pd.DataFrame(
            {
                "candidate": [f"p{c}/{i}" for c in range(n_pools) for i in range(8)],
                "policy": name,
                "cluster": pool.astype(str),
                "race": np.array(RACES)[np.tile(race, n_pools)],
                "selected": hired.reshape(-1),
            }
        )
        for name, hired in zip(policies, (hired_a, hired_b), strict=True)
    ]
    return pd.concat(frames, ignore_index=True)


def test_rates_and_ratios_are_direct_counts() -> None:
    rng = np.random.default_rng(1)
    race, _, hired = simulate(40, {"White": 1.5}, rng, n_studies=2)
    frame = outcomes_frame(race, hired[0], hired[1])
    table = policy.policy_rates(frame, "race", ["base", "new"], n_boot=200, seed=3)
    direct = frame.groupby(["policy", "race"])["selected"].mean()
    for row in table.itertuples():
        assert row.rate == pytest.approx(direct[(row.policy, row.value)])
        top = direct[row.policy].max()
        assert row.impact_ratio == pytest.approx(direct[(row.policy, row.value)] / top)
        assert row.rate_low <= row.rate <= row.rate_high
        assert row.entered == 160
    # The pooled rate is 1 hire per pool of 8.
    assert table.groupby("policy")["selected"].sum().tolist() == [40, 40]


def test_pool_swap_p_matches_exact_enumeration() -> None:
    rng = np.random.default_rng(7)
    race, _, base = simulate(10, {"White": 2.0}, rng)
    _, _, new = simulate(10, {}, rng)
    frame = outcomes_frame(race, base[0], new[0])
    table = policy.policy_difference(
        frame, "race", "base", "new", n_permutations=40_000, n_boot=100, seed=0
    ).set_index("value")
    # The oracle: every one of the 2**10 assignments of the two policies to each pool.
    a = np.array([[base[0, c][race == r].sum() for r in (0, 1)] for c in range(10)])
    b = np.array([[new[0, c][race == r].sum() for r in (0, 1)] for c in range(10)])
    observed = np.abs(b.sum(0) - a.sum(0))
    count = np.zeros(2)
    for swap in itertools.product((0, 1), repeat=10):
        s = np.array(swap)[:, None]
        diff = (np.where(s, a, b) - np.where(s, b, a)).sum(0)
        count += np.abs(diff) >= observed - 1e-12
    exact = count / 2**10
    for code, name in enumerate(RACES):
        assert table.loc[name, "p_value"] == pytest.approx(exact[code], abs=0.01)
        assert table.loc[name, "rate_change"] == pytest.approx((b.sum(0) - a.sum(0))[code] / 40)
    # Holm over the two groups, as statsmodels computes it.
    from statsmodels.stats.multitest import multipletests

    holm = multipletests(table["p_value"].to_numpy(), method="holm")[1]
    assert table["p_adjusted"].to_numpy() == pytest.approx(holm)


def test_every_candidate_must_be_read_under_both_policies() -> None:
    rng = np.random.default_rng(2)
    race, _, hired = simulate(5, {}, rng, n_studies=2)
    frame = outcomes_frame(race, hired[0], hired[1]).iloc[1:]
    with pytest.raises(ValueError, match="exactly one row under every policy"):
        policy.policy_difference(frame, "race", "base", "new")


def _comparisons(
    n_studies: int, n_pools: int, screen_a: dict, screen_b: dict, seed: int
) -> dict[str, np.ndarray]:
    """Per study and group: p, Holm p, rate change and its interval of policy B against A."""
    rng = np.random.default_rng(seed)
    race, _, base = simulate(n_pools, screen_a, rng, n_studies)
    _, _, new = simulate(n_pools, screen_b, rng, n_studies)
    rows = [
        policy.policy_difference(
            outcomes_frame(race, base[s], new[s]),
            "race",
            "base",
            "new",
            n_permutations=399,
            n_boot=300,
            seed=s,
        )
        for s in range(n_studies)
    ]
    columns = ("p_value", "p_adjusted", "rate_change", "rate_change_low", "rate_change_high")
    return {c: np.array([r[c].to_numpy() for r in rows]) for c in columns}


@pytest.mark.slow
def test_calibrated_under_no_policy_effect() -> None:
    # 600 studies of 60 pools, both policies the same biased process read independently.
    out = _comparisons(600, 60, {"White": 1.5}, {"White": 1.5}, seed=11)
    for g, name in enumerate(RACES):
        rate = np.mean(out["p_value"][:, g] <= 0.05)
        assert 0.03 <= rate <= 0.07, (name, rate)
    assert np.mean((out["p_adjusted"] <= 0.05).any(axis=1)) <= 0.07  # Holm: the family's rate
    covered = (out["rate_change_low"] <= 0) & (out["rate_change_high"] >= 0)
    assert 0.92 <= covered.mean() <= 0.98


@pytest.mark.slow
def test_power_against_a_declared_redaction_effect() -> None:
    # Redaction removes the screener's preference for White applicants (weight 2 -> 1); the
    # true change of each group's rate from a large simulation of the same pools.
    rng = np.random.default_rng(5)
    race, _, base = simulate(50_000, {"White": 2.0}, rng)
    _, _, new = simulate(50_000, {}, rng)
    truth = [new[0][:, race == r].mean() - base[0][:, race == r].mean() for r in (0, 1)]
    out = _comparisons(150, 400, {"White": 2.0}, {}, seed=12)
    for g, name in enumerate(RACES):
        assert np.mean(out["p_adjusted"][:, g] <= 0.05) >= 0.8, name
        low, high = out["rate_change_low"][:, g], out["rate_change_high"][:, g]
        covered = np.mean((low <= truth[g]) & (truth[g] <= high))
        assert 0.9 <= covered <= 0.99, (name, covered)
