"""Pipeline stages, compounding, position effects and counterfactual name swaps.

Oracles are independent of the code under test: tables written by hand, scipy's Fisher and
binomial tests, statsmodels' McNemar and multipletests, and exact permutation distributions
enumerated with itertools.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from biasim.analysis.figures import plot_funnel, save_figure
from biasim.analysis.stats import pipeline as pipeline_stats
from biasim.analysis.stats.counterfactual import counterfactual_table, counterfactual_test
from biasim.analysis.stats.pipeline import (
    choice_rates,
    compounding,
    first_position_test,
    position_table,
    stage_table,
)

# --------------------------------------------------------------------------- builders


def _frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["candidate", "stage", "race", "advanced", "cluster"])


def _pipeline(
    rng: np.random.Generator,
    n: int,
    stages: list[tuple[str, int, int]],
    effect: dict[str, float],
    shares: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1),
) -> pd.DataFrame:
    """A nested pipeline: each stage shuffles its entrants into pools of ``pool`` (the last one
    possibly smaller) and advances the top ``k`` of each pool by a score shifted by group;
    the next stage's entrants are exactly those advanced."""
    groups = list(effect)
    alive = pd.DataFrame(
        {
            "candidate": [f"c{i}" for i in range(n)],
            "race": rng.choice(groups, size=n, p=list(shares)),
        }
    )
    frames = []
    for name, pool, k in stages:
        alive = alive.iloc[rng.permutation(len(alive))].reset_index(drop=True)
        cluster = np.arange(len(alive)) // pool
        score = rng.normal(size=len(alive)) + alive["race"].map(effect).to_numpy()
        stage = alive.assign(stage=name, cluster=[f"{name}-{c}" for c in cluster], score=score)
        rank = stage.groupby("cluster")["score"].rank(ascending=False, method="first")
        stage["advanced"] = (rank <= k).to_numpy()
        frames.append(stage.drop(columns="score"))
        alive = stage.loc[stage["advanced"], ["candidate", "race"]]
    return pd.concat(frames, ignore_index=True)


def _two_group_stage(n_a: int, k_a: int, n_b: int, k_b: int) -> pd.DataFrame:
    """One stage, nobody in a pool: group A with k_a of n_a advancing, B with k_b of n_b."""
    race = ["A"] * n_a + ["B"] * n_b
    advanced = [True] * k_a + [False] * (n_a - k_a) + [True] * k_b + [False] * (n_b - k_b)
    return pd.DataFrame(
        {
            "candidate": [f"c{i}" for i in range(n_a + n_b)],
            "stage": "screen",
            "race": race,
            "advanced": advanced,
        }
    )


def _dpd(counts: dict[str, int], entered: dict[str, int]) -> float:
    rates = [counts[g] / entered[g] for g in entered]
    return max(rates) - min(rates)


# --------------------------------------------------------------------------- stage_table


def test_stage_table_counts_and_rates_by_hand():
    rows = [
        # screen: pools p1 (4 read, 2 advance) and p2 (6 read, 1 advances)
        ("a1", "screen", "A", True, "p1"),
        ("a2", "screen", "A", True, "p1"),
        ("b1", "screen", "B", False, "p1"),
        ("b2", "screen", "B", False, "p1"),
        ("a3", "screen", "A", False, "p2"),
        ("a4", "screen", "A", False, "p2"),
        ("b3", "screen", "B", True, "p2"),
        ("b4", "screen", "B", False, "p2"),
        ("b5", "screen", "B", False, "p2"),
        ("c1", "screen", "C", False, "p2"),
        # hire: one shortlist of three, one hired
        ("a1", "hire", "A", True, "h1"),
        ("a2", "hire", "A", False, "h1"),
        ("b3", "hire", "B", False, "h1"),
    ]
    table = stage_table(_frame(rows), ["screen", "hire"], "race", n_permutations=99)
    assert list(table["stage"]) == ["screen"] * 3 + ["hire"] * 3
    assert list(table["value"]) == ["A", "B", "C"] * 2
    assert (table["group"] == "race").all()
    assert list(table["entered"]) == [4, 5, 1, 2, 1, 0]
    assert list(table["advanced"]) == [2, 1, 0, 1, 0, 0]
    np.testing.assert_allclose(table["rate"], [0.5, 0.2, 0.0, 0.5, 0.0, np.nan])
    np.testing.assert_allclose(table["cumulative_rate"], [0.5, 0.2, 0.0, 0.25, 0.0, 0.0])
    np.testing.assert_allclose(table["impact_ratio"], [1.0, 0.4, 0.0, 1.0, 0.0, np.nan])
    assert list(table["four_fifths"]) == [False, True, True, False, True, False]
    np.testing.assert_allclose(table["dpd"], [0.5] * 6)
    assert set(table["test"]) == {"permutation_within_pool"}
    assert (table["n_permutations"] == 99).all()


def test_fisher_without_pools_and_two_groups_matches_scipy():
    frame = _two_group_stage(30, 18, 25, 7)
    table = stage_table(frame, ["screen"], "race")
    expected = stats.fisher_exact([[18, 12], [7, 18]]).pvalue
    assert set(table["test"]) == {"fisher_exact"}
    assert (table["n_permutations"] == 0).all()
    np.testing.assert_allclose(table["p_value"], expected, rtol=1e-12)
    # A third group, or a pool, rules Fisher's 2 x 2 test out.
    third = pd.concat(
        [frame, frame.head(3).assign(candidate=["x1", "x2", "x3"], race="C")], ignore_index=True
    )
    assert set(stage_table(third, ["screen"], "race")["test"]) == {"permutation"}
    pooled = frame.assign(cluster=[f"p{i // 5}" for i in range(len(frame))])
    assert set(stage_table(pooled, ["screen"], "race")["test"]) == {"permutation_within_pool"}
    # A pool of one is a candidate judged alone: one evaluation id per candidate is no pool.
    alone = stage_table(frame.assign(cluster=frame["candidate"]), ["screen"], "race")
    assert set(alone["test"]) == {"fisher_exact"}
    np.testing.assert_allclose(alone["p_value"], expected, rtol=1e-12)


def test_holm_across_stages_matches_statsmodels():
    # Four unpooled two-group stages (independent candidates per stage, for simplicity): each
    # stage's p-value is Fisher's, adjusted over the four stages.
    counts = [(30, 18, 25, 7), (40, 20, 40, 19), (20, 15, 20, 5), (50, 10, 50, 18)]
    frames = []
    for s, (n_a, k_a, n_b, k_b) in enumerate(counts):
        part = _two_group_stage(n_a, k_a, n_b, k_b)
        frames.append(part.assign(stage=f"s{s}", candidate=part["candidate"] + f"-{s}"))
    stages = [f"s{s}" for s in range(4)]
    frame = pd.concat(frames, ignore_index=True)
    for adjust, theirs in (("holm", "holm"), ("bh", "fdr_bh")):
        table = stage_table(frame, stages, "race", adjust=adjust)
        per_stage = table.groupby("stage", sort=False)[["p_value", "p_adjusted"]].first()
        fisher = [stats.fisher_exact([[a, n - a], [b, m - b]]).pvalue for n, a, m, b in counts]
        np.testing.assert_allclose(per_stage["p_value"], fisher, rtol=1e-12)
        np.testing.assert_allclose(
            per_stage["p_adjusted"], multipletests(fisher, method=theirs)[1], rtol=1e-12
        )


def test_permutation_without_pools_agrees_with_fisher_and_exact_enumeration():
    n_a, k_a, n_b, k_b = 60, 21, 40, 8
    frame = _two_group_stage(n_a, k_a, n_b, k_b)
    n_perm = 20_000
    table = stage_table(frame, ["screen"], "race", method="permutation", n_permutations=n_perm)
    p_perm = float(table["p_value"].iloc[0])
    assert set(table["test"]) == {"permutation"}
    fisher = stats.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]]).pvalue
    assert abs(p_perm - fisher) < 0.02
    # Exact: group A's count among the 29 advancing is hypergeometric; |rate difference| >= obs.
    total, picks = n_a + n_b, k_a + k_b
    support = np.arange(max(0, picks - n_b), min(picks, n_a) + 1)
    diff = np.abs(support / n_a - (picks - support) / n_b)
    observed = abs(k_a / n_a - k_b / n_b)
    exact = stats.hypergeom.pmf(support, total, n_a, picks)[diff >= observed - 1e-12].sum()
    assert abs(p_perm - exact) < 4 * np.sqrt(exact * (1 - exact) / n_perm) + 1 / n_perm


def _pools(labels: list[str], picks: list[list[int]]) -> list[tuple[str, list[str], list[bool]]]:
    """Pools of ``labels``, the i-th advancing the positions ``picks[i]``."""
    return [
        (f"k{len(labels)}-{i}", labels, [j in chosen for j in range(len(labels))])
        for i, chosen in enumerate(picks)
    ]


_FEW_GROUPS = [
    # Three groups. 50 pools of A, B, C with 1 advancing and 50 of A, A, B, C with 2: two kinds
    # of 50 pools, each drawn whole (a multinomial over its outcomes). A pool larger than the
    # sampler's size limit (70, 1 advances: the multivariate hypergeometric) and four
    # candidates judged alone (1 advances: the selection sampler).
    *_pools(["A", "B", "C"], [[0]] * 19 + [[1]] * 17 + [[2]] * 14),
    *_pools(["A", "A", "B", "C"], [[0, 1]] * 12 + [[0, 2]] * 20 + [[2, 3]] * 18),
    ("p3", ["A"] * 30 + ["B"] * 25 + ["C"] * 15, [False] * 60 + [True] + [False] * 9),
    (None, ["B", "C", "A", "A"], [False, True, False, False]),
]
_TWELVE = [chr(ord("A") + i) for i in range(12)]
_MANY_GROUPS = [
    # Twelve groups: a pool of one of each with 6 advancing has 2**12 > 512 bounded outcomes
    # (drawn by the selection sampler); so has a pool of 70 with 1 advancing, larger than the
    # sampler's limit (drawn from the multivariate hypergeometric); a lone pool of 2 of A and
    # 2 of B with 1 advancing is cheaper drawn by the sampler than by kind.
    ("q1", _TWELVE, [True, False] * 6),
    ("q2", (_TWELVE * 6)[:70], [True] + [False] * 69),
    ("q3", ["A", "A", "B", "B"], [False, False, False, True]),
]


def _exact_within_block_p(blocks: list, entered: dict[str, int], observed: float) -> float:
    """P(DPD >= observed) when every block advances a uniformly random subset of its observed
    size: each block's group counts enumerated, then convolved over the blocks."""
    groups = sorted(entered)
    dist = {(0,) * len(groups): 1}
    for _, labels, advanced in blocks:
        block = Counter()
        for subset in itertools.combinations(range(len(labels)), sum(advanced)):
            picked = Counter(labels[j] for j in subset)
            block[tuple(picked[g] for g in groups)] += 1
        combined = Counter()
        for counts, ways in dist.items():
            for more, n in block.items():
                combined[tuple(a + b for a, b in zip(counts, more, strict=True))] += ways * n
        dist = combined
    hits = sum(
        ways
        for counts, ways in dist.items()
        if _dpd(dict(zip(groups, counts, strict=True)), entered) >= observed - 1e-12
    )
    return hits / sum(dist.values())


@pytest.mark.parametrize(
    ("blocks", "by_kind"),
    [(_FEW_GROUPS, True), (_MANY_GROUPS, False)],
    ids=["by-kind", "one-by-one"],
)
def test_within_pool_permutation_matches_enumerated_distribution(blocks, by_kind, monkeypatch):
    rows, i = [], 0
    for cluster, labels, advanced in blocks:
        for label, adv in zip(labels, advanced, strict=True):
            rows.append((f"c{i}", "screen", label, adv, cluster))
            i += 1
    frame = _frame(rows)
    entered = frame["race"].value_counts().to_dict()
    advanced = frame.loc[frame["advanced"], "race"].value_counts().to_dict()
    observed = _dpd(dict.fromkeys(entered, 0) | advanced, entered)
    exact = _exact_within_block_p(blocks, entered, observed)
    # Which routes drew the pools: the design must exercise the ones it claims.
    kinds: list[np.ndarray] = []
    walked: list[int] = []
    by_kind_route, walk_route = pipeline_stats._by_kind, pipeline_stats._sample_small_blocks

    def spy_kind(composition, *args):
        kinds.append(np.unique(composition, axis=0, return_counts=True)[1])
        return by_kind_route(composition, *args)

    def spy_walk(g, block, chosen, *args):
        walked.append(len(chosen))
        return walk_route(g, block, chosen, *args)

    monkeypatch.setattr(pipeline_stats, "_by_kind", spy_kind)
    monkeypatch.setattr(pipeline_stats, "_sample_small_blocks", spy_walk)
    n_perm = 20_000
    table = stage_table(frame, ["screen"], "race", n_permutations=n_perm, seed=3)
    p = float(table["p_value"].iloc[0])
    assert walked
    if by_kind:
        assert sorted(kinds[0].tolist()) == [50, 50]
    else:
        assert not kinds
    assert 0.05 < exact < 0.95
    assert abs(p - exact) < 4 * np.sqrt(exact * (1 - exact) / n_perm)


def test_within_pool_test_keeps_pools_fixed():
    # Group A is read in pools of 4 with 2 advancing, group B in pools of 8 with 1 advancing:
    # rates 0.5 and 0.125, but no pool mixes groups, so no relabelling within pools changes
    # anything and p = 1. Ignoring the pools would call this a strong disparity.
    rows = []
    for p in range(10):
        rows += [(f"a{p}-{j}", "screen", "A", j < 2, f"a{p}") for j in range(4)]
        rows += [(f"b{p}-{j}", "screen", "B", j < 1, f"b{p}") for j in range(8)]
    frame = _frame(rows)
    pooled = stage_table(frame, ["screen"], "race", n_permutations=500)
    assert pooled["p_value"].iloc[0] == 1.0
    unpooled = stage_table(frame.drop(columns="cluster"), ["screen"], "race", method="permutation")
    assert unpooled["p_value"].iloc[0] < 0.01


def test_stage_table_seeded_and_validates_input():
    rng = np.random.default_rng(0)
    frame = _pipeline(rng, 400, [("screen", 8, 3)], {"A": 0.0, "B": 0.0, "C": 0.0, "D": 0.0})
    first = stage_table(frame, ["screen"], "race", n_permutations=199, seed=5)
    again = stage_table(frame, ["screen"], "race", n_permutations=199, seed=5)
    pd.testing.assert_frame_equal(first, again)
    with pytest.raises(ValueError, match="not in `stages`"):
        stage_table(frame, ["interview"], "race")
    with pytest.raises(ValueError, match="several rows"):
        stage_table(pd.concat([frame, frame.head(1)]), ["screen"], "race")
    # The same candidate at two stages is fine; under another group at the second, refused.
    second = frame.assign(stage="offer")
    fine = stage_table(pd.concat([frame, second]), ["screen", "offer"], "race")
    assert fine["entered"].sum() == 2 * len(frame)
    moved = second.assign(race=np.where(second.index == 7, "Z", second["race"]))
    with pytest.raises(ValueError, match="changes `race` between stages"):
        stage_table(pd.concat([frame, moved]), ["screen", "offer"], "race")
    with pytest.raises(ValueError, match="missing values"):
        stage_table(
            frame.assign(advanced=np.where(frame.index == 0, None, True)), ["screen"], "race"
        )


def _pair_stage(
    rng: np.random.Generator,
    n_pairs: int,
    quality_sd: float,
    groups: np.ndarray,
    position: float = 0.4,
) -> pd.DataFrame:
    """A pair stage as the pipeline kind builds it: pair ``i`` shows authors ``a{i}-0`` and
    ``a{i}-1`` (groups ``groups[i]``) in both orders, one row per showing; the reader picks
    the first shown with probability logistic(quality difference + ``position``). Each
    author's quality is drawn once, so its two showings agree more than chance."""
    quality = rng.normal(0.0, quality_sd, size=(n_pairs, 2))
    pair = np.arange(n_pairs)
    pick_first = {
        order: rng.random(n_pairs)
        < 1 / (1 + np.exp(-(quality[pair, order[0]] - quality[pair, order[1]] + position)))
        for order in ((0, 1), (1, 0))
    }
    frames = []
    for order, first in pick_first.items():
        for slot, side in enumerate(order):
            author = np.char.add(np.char.add("a", pair.astype(str)), f"-{side}")
            frames.append(
                pd.DataFrame(
                    {
                        "candidate": np.char.add(author, f"@{order}"),
                        "stage": "screen",
                        "race": groups[pair, side],
                        "advanced": first if slot == 0 else ~first,
                        "cluster": np.char.add("p", pair.astype(str)),
                        "author": author,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def test_concordant_pair_test_matches_enumerated_swaps():
    # Ten pairs of an A and a B author, each shown in both orders: 4 pairs picked A in both
    # orders, 1 picked B in both, 5 split 1-1. Under "whole authors swap groups within their
    # pair" the split pairs never move and each concordant pair goes to A or B with
    # probability 1/2: the sign test on 4 of 5, two-sided p = 12/32 = 0.375.
    groups = np.array([["A", "B"]] * 10)
    frame = _pair_stage(np.random.default_rng(0), 10, 0.0, groups)
    wins = [(True, True)] * 4 + [(False, False)] + [(True, False)] * 5  # (ab, ba): A picked?
    a_first = frame["candidate"].str.endswith("@(0, 1)")
    a_row = frame["race"] == "A"
    pair = frame["cluster"].str[1:].astype(int).to_numpy()
    won = np.array([wins[i][0 if f else 1] for i, f in zip(pair, a_first, strict=True)])
    frame["advanced"] = np.where(a_row, won, ~won)
    exact = 2 * stats.binom.cdf(1, 5, 0.5)
    assert exact == pytest.approx(0.375)
    n_perm = 20_000
    table = stage_table(frame, ["screen"], "race", n_permutations=n_perm, seed=1, pairs=["screen"])
    assert set(table["test"]) == {"concordant_pairs"}
    assert table["dpd"].iloc[0] == pytest.approx((4 * 2 + 5 - (1 * 2 + 5)) / 20)
    assert abs(table["p_value"].iloc[0] - exact) < 4 * np.sqrt(exact * (1 - exact) / n_perm)
    # Shuffling labels among each pair's four showings, as before, counts each showing as a
    # unit and gives less than half that p (about 0.17).
    shuffled = stage_table(frame, ["screen"], "race", n_permutations=n_perm, seed=1)
    assert shuffled["p_value"].iloc[0] < exact / 2


def test_concordant_pair_test_ignores_split_pairs_and_needs_authors():
    # Every pair split 1-1 (the position decides): each group is picked in half of its
    # showings and no swap changes anything, so p = 1.
    groups = np.array([["A", "B"]] * 8)
    frame = _pair_stage(np.random.default_rng(2), 8, 0.0, groups)
    # The first shown is picked: author -0 in the order (0, 1), author -1 in (1, 0).
    frame["advanced"] = frame["candidate"].str.endswith("@(0, 1)") == frame["author"].str.endswith(
        "-0"
    )
    table = stage_table(frame, ["screen"], "race", n_permutations=200, pairs=["screen"])
    assert table["p_value"].iloc[0] == 1.0
    with pytest.raises(ValueError, match="needs `author`"):
        stage_table(frame.drop(columns="author"), ["screen"], "race", pairs=["screen"])
    with pytest.raises(ValueError, match="exactly two authors"):
        stage_table(frame.assign(cluster="one"), ["screen"], "race", pairs=["screen"])


# --------------------------------------------------------------------------- compounding


@pytest.mark.parametrize("seed", range(4))
def test_product_of_stage_ratios_is_end_to_end_ratio(seed):
    rng = np.random.default_rng(seed)
    effect = {"A": 0.3, "B": 0.0, "C": -0.2, "D": -0.5}
    stages = [("screen", 8, 3), ("interview", 6, 2), ("hire", 4, 1)]
    frame = _pipeline(rng, 2400, stages, effect)
    names = [s for s, _, _ in stages]
    out = compounding(frame, names, "race").set_index("value")
    # By hand, from the raw rows.
    first = frame[frame["stage"] == names[0]].groupby("race").size()
    hired = frame[(frame["stage"] == names[-1]) & frame["advanced"]].groupby("race").size()
    e2e = (hired.reindex(first.index, fill_value=0) / first).astype(float)
    reference = e2e.idxmax()
    np.testing.assert_allclose(out["end_to_end_rate"], e2e, rtol=1e-12)
    assert out["reference"].sum() == 1 and out.loc[reference, "reference"]
    np.testing.assert_allclose(out["end_to_end_ratio"], e2e / e2e[reference], rtol=1e-12)
    np.testing.assert_allclose(out["product"], e2e / e2e[reference], rtol=1e-12)
    stage_rates = frame.groupby(["stage", "race"])["advanced"].mean()
    for name in names:
        ratios = stage_rates[name] / stage_rates[name][reference]
        np.testing.assert_allclose(out[f"ratio_{name}"], ratios, rtol=1e-12)
    assert out["identity_holds"].all() and out["nested"].all()


def test_identity_fails_when_entrants_are_not_the_advanced():
    rows = [
        ("a1", "s1", "A", True, None),
        ("a2", "s1", "A", True, None),
        ("a3", "s1", "A", False, None),
        ("a4", "s1", "A", False, None),
        ("b1", "s1", "B", True, None),
        ("b2", "s1", "B", True, None),
        ("b3", "s1", "B", False, None),
        ("b4", "s1", "B", False, None),
        ("a1", "s2", "A", True, None),
        ("a2", "s2", "A", False, None),
        ("a3", "s2", "A", False, None),  # a3 did not advance at s1 but enters s2
        ("b1", "s2", "B", True, None),
        ("b2", "s2", "B", False, None),
    ]
    out = compounding(_frame(rows), ["s1", "s2"], "race").set_index("value")
    # Both end to end at 1/4 (reference A, the first of the tie); B's stage-2 ratio is
    # (1/2) / (1/3) = 1.5, so the product 1.5 is not the end-to-end ratio 1.
    assert out.loc["A", "reference"]
    assert out.loc["B", "end_to_end_ratio"] == pytest.approx(1.0)
    assert out.loc["B", "product"] == pytest.approx(1.5)
    assert not out.loc["B", "identity_holds"]
    assert not out["nested"].any()


def test_compounding_survives_zero_rates():
    rows = [
        ("a1", "s1", "A", True, None),
        ("a2", "s1", "A", False, None),
        ("b1", "s1", "B", False, None),
        ("b2", "s1", "B", False, None),
        ("a1", "s2", "A", True, None),
    ]
    out = compounding(_frame(rows), ["s1", "s2"], "race").set_index("value")
    assert out.loc["B", "ratio_s1"] == 0.0 and np.isnan(out.loc["B", "ratio_s2"])
    assert out.loc["B", "product"] == 0.0 and out.loc["B", "end_to_end_ratio"] == 0.0
    assert out["identity_holds"].all()
    nobody = _frame([(r[0], r[1], r[2], False, None) for r in rows[:4]])
    out = compounding(nobody, ["s1", "s2"], "race")
    assert out["end_to_end_ratio"].isna().all() and out["identity_holds"].all()


# --------------------------------------------------------------------------- positions


def _readings(rng: np.random.Generator, n_eval: int, size: int, k: int, first_bias: float = 0):
    """Evaluations showing ``size`` documents of groups A/B in random order; the reader picks
    ``k`` at random, or (with ``first_bias``) always includes position 1 with that probability."""
    rows = []
    for e in range(n_eval):
        groups = rng.choice(["A", "B"], size=size)
        if rng.random() < first_bias:
            picked = {0, *rng.choice(np.arange(1, size), size=k - 1, replace=False)}
        else:
            picked = set(rng.choice(size, size=k, replace=False))
        rows += [(f"e{e}-{size}-{k}", j + 1, size, k, j in picked, groups[j]) for j in range(size)]
    return pd.DataFrame(rows, columns=["evaluation", "position", "size", "k", "chosen", "race"])


def test_position_table_and_choice_rates_by_hand():
    rows = [
        ("e1", 1, 3, 1, True, "A"),
        ("e1", 2, 3, 1, False, "B"),
        ("e1", 3, 3, 1, False, "B"),
        ("e2", 1, 3, 1, True, "B"),
        ("e2", 2, 3, 1, False, "A"),
        ("e2", 3, 3, 1, False, "A"),
        ("e3", 1, 2, 1, False, "A"),
        ("e3", 2, 2, 1, True, "B"),
    ]
    readings = pd.DataFrame(rows, columns=["evaluation", "position", "size", "k", "chosen", "race"])
    table = position_table(readings)
    assert list(zip(table["size"], table["k"], table["position"], strict=True)) == [
        (2, 1, 1),
        (2, 1, 2),
        (3, 1, 1),
        (3, 1, 2),
        (3, 1, 3),
    ]
    assert list(table["n"]) == [1, 1, 2, 2, 2]
    assert list(table["chosen"]) == [0, 1, 2, 0, 0]
    np.testing.assert_allclose(table["rate"], [0, 1, 1, 0, 0])
    np.testing.assert_allclose(table["chance"], [0.5, 0.5, 1 / 3, 1 / 3, 1 / 3])
    rates = choice_rates(readings, "race").set_index("value")
    assert list(rates["shown"]) == [4, 4] and list(rates["chosen"]) == [1, 2]
    # A shown at (size 3) x3 and (size 2) x1: mean chance (1/3 * 3 + 1/2) / 4.
    np.testing.assert_allclose(rates["chance"], [(1 + 0.5) / 4, (2 / 3 + 0.5 + 1 / 3) / 4])
    np.testing.assert_allclose(rates["ratio_to_chance"], rates["rate"] / rates["chance"])
    with pytest.raises(ValueError, match="more than one"):
        position_table(readings.assign(size=[3, 3, 3, 3, 3, 4, 2, 2]))


def test_first_position_test_matches_scipy_binomtest():
    rng = np.random.default_rng(4)
    readings = pd.concat(
        [_readings(rng, 120, 8, 3, first_bias=0.3), _readings(rng, 80, 4, 1)], ignore_index=True
    )
    # One evaluation loses its position-1 row: excluded from the test, and counted.
    readings = readings.drop(index=readings.index[readings["evaluation"].eq("e5-8-3")][0])
    out = first_position_test(readings).set_index(["size", "k"])
    for (size, k), n_eval in (((4, 1), 80), ((8, 3), 119)):
        first = readings[(readings["position"] == 1) & (readings["size"] == size)]
        hits = int(first["chosen"].sum())
        row = out.loc[(size, k)]
        assert row["n_evaluations"] == n_eval and row["first_chosen"] == hits
        assert row["chance"] == pytest.approx(k / size)
        assert row["p_value"] == pytest.approx(stats.binomtest(hits, n_eval, k / size).pvalue)
    assert list(out["n_excluded"]) == [0, 1]
    np.testing.assert_allclose(out["p_adjusted"], multipletests(out["p_value"], method="holm")[1])
    assert out.loc[(8, 3), "p_value"] < 0.01  # the biased reader is caught


@pytest.mark.parametrize("n", [1, 2, 3, 10, 37, 1000, 12_500])
@pytest.mark.parametrize("chance", [1 / 8, 1 / 3, 3 / 8, 0.5, 2 / 3, 0.9, 1.0, 1e-3])
def test_binomial_p_is_scipys_binomtest(n: int, chance: float):
    """The first-position test's p-value without importing scipy.stats: counts in both tails,
    at the mode and at the ends, against scipy's two-sided exact test."""
    hits = sorted({0, 1, n // 3, int(n * chance), int(n * chance) + 1, n // 2, n - 1, n})
    for k in (h for h in hits if 0 <= h <= n):
        expected = stats.binomtest(k, n, chance).pvalue
        assert pipeline_stats.binomial_p(k, n, chance) == pytest.approx(
            expected, rel=1e-9, abs=1e-300
        ), (k, n, chance)


# --------------------------------------------------------------------------- counterfactual


def _paired(both: int, only_a: int, only_b: int, neither: int, a="Emily", b="Lakisha"):
    """Paired readings with the given 2 x 2 counts (document id -> outcome under a and b)."""
    cells = [(True, True)] * both + [(True, False)] * only_a
    cells += [(False, True)] * only_b + [(False, False)] * neither
    rows = []
    for d, (x, y) in enumerate(cells):
        rows += [(f"d{d}", a, x), (f"d{d}", b, y)]
    return pd.DataFrame(rows, columns=["document", "variant", "outcome"])


@pytest.mark.parametrize(
    "counts",
    [(40, 12, 3, 45), (10, 0, 0, 5), (5, 7, 7, 1), (0, 1, 0, 0), (300, 41, 60, 120), (2, 0, 9, 3)],
)
def test_counterfactual_matches_statsmodels_mcnemar(counts):
    both, only_a, only_b, neither = counts
    result = counterfactual_test(_paired(*counts))
    expected = mcnemar(np.array([[both, only_a], [only_b, neither]]), exact=True).pvalue
    assert result["p_value"] == pytest.approx(expected, rel=1e-12)
    n = sum(counts)
    assert (result["a"], result["b"]) == ("Emily", "Lakisha")
    assert result["n_pairs"] == n and result["excluded"] == 0
    assert (result["both"], result["only_a"], result["only_b"], result["neither"]) == counts
    assert result["flip_rate"] == pytest.approx((only_a + only_b) / n)
    assert result["rate_a"] == pytest.approx((both + only_a) / n)
    assert result["difference"] == pytest.approx((only_a - only_b) / n)


def test_counterfactual_counts_unpaired_documents():
    paired = _paired(20, 6, 1, 13)
    extra = pd.DataFrame(
        [
            ("x1", "Emily", True),  # never read as Lakisha
            ("x2", "Lakisha", False),  # never read as Emily
            ("x3", "Emily", True),
            ("x3", "Lakisha", None),  # an invalid answer: no reading
        ],
        columns=["document", "variant", "outcome"],
    )
    result = counterfactual_test(pd.concat([paired, extra], ignore_index=True))
    assert result["n_pairs"] == 40 and result["excluded"] == 3
    swapped = counterfactual_test(paired, a="Lakisha", b="Emily")
    assert (swapped["only_a"], swapped["only_b"]) == (1, 6)
    with pytest.raises(ValueError, match="several readings"):
        counterfactual_test(pd.concat([paired, paired.head(1)]))


def test_counterfactual_table_every_pair_holm_adjusted():
    rng = np.random.default_rng(9)
    rates = {"Emily": 0.6, "Greg": 0.55, "Lakisha": 0.4}
    rows = [
        (f"d{d}", name, bool(rng.random() < rate))
        for d in range(150)
        for name, rate in rates.items()
    ]
    paired = pd.DataFrame(rows, columns=["document", "variant", "outcome"])
    paired = paired.drop(index=[0, 4, 8])  # three documents lose one reading each
    table = counterfactual_table(paired, "variant")
    assert list(zip(table["a"], table["b"], strict=True)) == [
        ("Emily", "Greg"),
        ("Emily", "Lakisha"),
        ("Greg", "Lakisha"),
    ]
    assert list(table["excluded"]) == [2, 2, 2] and list(table["n_pairs"]) == [148, 148, 148]
    for _, row in table.iterrows():
        single = counterfactual_test(paired, a=row["a"], b=row["b"])
        assert row["p_value"] == single["p_value"] and row["only_a"] == single["only_a"]
    np.testing.assert_allclose(
        table["p_adjusted"], multipletests(table["p_value"], method="holm")[1], rtol=1e-12
    )
    with pytest.raises(ValueError, match="3 variants"):
        counterfactual_test(paired)


# --------------------------------------------------------------------------- figure


def test_plot_funnel_one_line_per_group(tmp_path):
    rng = np.random.default_rng(2)
    effect = {"Asian": 0.1, "Black": -0.4, "Hispanic": -0.1, "White": 0.3}
    frame = _pipeline(rng, 1600, [("screen", 8, 3), ("shortlist", 3, 1)], effect)
    table = stage_table(frame, ["screen", "shortlist"], "race", n_permutations=99)
    fig = plot_funnel(table, "race")
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == list(effect)
    for line, value in zip(ax.lines, effect, strict=True):
        expected = table.loc[table["value"] == value, "cumulative_rate"].to_numpy()
        np.testing.assert_allclose(line.get_ydata(), [1.0, *expected])
    labels = [text.get_text() for text in ax.texts]
    assert len(labels) == 4 and all("%" in label for label in labels)
    save_figure(fig, tmp_path / "funnel.png", dpi=120)
    assert mpimg.imread(tmp_path / "funnel.png").shape[:2] == (576, 900)
    assert len(plot_funnel(table, "race", log_scale=True).axes[0].lines) == 4
    with pytest.raises(ValueError, match="no rows for group"):
        plot_funnel(table, "gender")
    # A group without applicants has no 100 % to start from.
    empty = table.copy()
    black = empty["value"] == "Black"
    empty.loc[black, ["entered", "advanced"]] = 0
    empty.loc[black, "cumulative_rate"] = np.nan
    lines = {line.get_label(): line for line in plot_funnel(empty, "race").axes[0].lines}
    assert np.isnan(lines["Black"].get_ydata()).all()
    assert lines["White"].get_ydata()[0] == 1.0


# --------------------------------------------------------------------------- calibration


def _rejection_rate(p_values: list[float], alpha: float = 0.05) -> float:
    return float(np.mean(np.asarray(p_values) <= alpha))


@pytest.mark.slow
def test_within_pool_permutation_test_is_calibrated():
    # 100 pools of 8 drawn from a population with four groups of unequal size; the top 3 of
    # each pool by a score with a pool-level random effect and no group effect advance. The
    # 199-permutation test rejects at most 10/200 = 5 % for a continuous statistic (ties in
    # the DPD only make it conservative). 500 studies put the rate's sd at 0.0097, so the
    # [0.03, 0.07] band is about 2 sd either side.
    rng = np.random.default_rng(20240601)
    groups = np.array(["A", "B", "C", "D"])
    n_pools, pool, k = 100, 8, 3
    cluster = np.repeat([f"p{i}" for i in range(n_pools)], pool)
    candidate = [f"c{i}" for i in range(n_pools * pool)]
    p_values = []
    for study in range(500):
        race = rng.choice(groups, size=n_pools * pool, p=[0.4, 0.3, 0.2, 0.1])
        score = np.repeat(rng.normal(size=n_pools), pool) + rng.normal(size=n_pools * pool)
        # Rank within each pool: top k of every consecutive block of 8.
        rank = np.argsort(np.argsort(-score.reshape(n_pools, pool), axis=1), axis=1).ravel()
        frame = pd.DataFrame(
            {
                "candidate": candidate,
                "stage": "screen",
                "race": race,
                "advanced": rank < k,
                "cluster": cluster,
            }
        )
        table = stage_table(frame, ["screen"], "race", n_permutations=199, seed=study)
        p_values.append(float(table["p_value"].iloc[0]))
    assert 0.03 <= _rejection_rate(p_values) <= 0.07


@pytest.mark.slow
@pytest.mark.parametrize("differ", [True, False], ids=["groups-the-pairs-differ-in", "other-axis"])
def test_concordant_pair_test_is_calibrated_under_applicant_quality(differ):
    # 40 pairs shown in both orders, applicant quality sd 2 on the logit (both showings of an
    # author share it), a position effect and no group effect. The groups are the axis the
    # pairs differ in (one A and one B each) or another axis drawn independently (three
    # values; a pair may share one). 500 studies, 199 swaps each: [0.03, 0.07] is about
    # 2 sd either side of 0.05. The shuffle of labels among a pair's four showings rejects
    # 16-30 % here, as it did end to end.
    rng = np.random.default_rng(20261126)
    p_values, shuffled = [], []
    for study in range(500):
        if differ:
            groups = np.array([["A", "B"]] * 40)
        else:
            groups = rng.choice(np.array(["x", "y", "z"]), size=(40, 2))
        frame = _pair_stage(rng, 40, 2.0, groups)
        table = stage_table(
            frame, ["screen"], "race", n_permutations=199, seed=study, pairs=["screen"]
        )
        p_values.append(float(table["p_value"].iloc[0]))
        if study < 200:
            old = stage_table(frame, ["screen"], "race", n_permutations=199, seed=study)
            shuffled.append(float(old["p_value"].iloc[0]))
    assert 0.03 <= _rejection_rate(p_values) <= 0.07
    assert _rejection_rate(shuffled) > 0.10


@pytest.mark.slow
def test_mcnemar_exact_is_calibrated():
    # Each document has its own acceptance propensity (Beta(2, 2)); both readings are
    # independent draws from it, the name having no effect. A document is discordant with
    # probability 2 E[p (1 - p)] = 0.4. The exact test is conservative: its size given D
    # discordant pairs is about 0.035 at D = 100 and 0.04 at D = 200. With 800 documents
    # (D about 320) the expected size is 0.044 (computed by summing the exact size over the
    # binomial distribution of D); 1000 studies put the estimate's sd at 0.0065.
    rng = np.random.default_rng(7)
    n_docs, p_values = 800, []
    documents = np.repeat([f"d{i}" for i in range(n_docs)], 2)
    variants = np.tile(["Emily", "Lakisha"], n_docs)
    for _ in range(1000):
        propensity = np.repeat(rng.beta(2, 2, size=n_docs), 2)
        outcome = rng.random(2 * n_docs) < propensity
        frame = pd.DataFrame({"document": documents, "variant": variants, "outcome": outcome})
        p_values.append(counterfactual_test(frame)["p_value"])
    assert 0.03 <= _rejection_rate(p_values) <= 0.07


@pytest.mark.slow
def test_first_position_test_is_calibrated():
    # 300 evaluations of 8 documents picking 3 at random: the exact binomial test of position 1
    # against 3/8 has size 0.049 at n = 300 (smaller n is more conservative: 0.038 at 100).
    rng = np.random.default_rng(11)
    n_eval, size, k = 300, 8, 3
    evaluation = np.repeat(np.arange(n_eval), size)
    position = np.tile(np.arange(1, size + 1), n_eval)
    p_values = []
    for _ in range(1000):
        keys = rng.random((n_eval, size))
        chosen = (np.argsort(np.argsort(keys, axis=1), axis=1) < k).ravel()
        frame = pd.DataFrame(
            {"evaluation": evaluation, "position": position, "size": size, "k": k}
        ).assign(chosen=chosen)
        p_values.append(float(first_position_test(frame)["p_value"].iloc[0]))
    assert 0.03 <= _rejection_rate(p_values) <= 0.07


@pytest.mark.slow
def test_permutation_test_scales_to_large_pipelines():
    # 100,000 candidates in pools of 8, 2,000 permutations: seconds, not minutes (the bound is
    # generous for slow machines; a per-permutation sort would take far longer).
    rng = np.random.default_rng(0)
    n = 100_000
    frame = pd.DataFrame(
        {
            "candidate": np.arange(n).astype(str),
            "stage": "screen",
            "race": rng.choice(["A", "B", "C", "D"], size=n),
            "advanced": (np.arange(n) % 8) < 3,
            "cluster": (np.arange(n) // 8).astype(str),
        }
    )
    start = time.perf_counter()
    table = stage_table(frame, ["screen"], "race", n_permutations=2000)
    assert time.perf_counter() - start < 20
    assert table["test"].iloc[0] == "permutation_within_pool"


def test_compounding_reports_a_stage_without_any_valid_answer():
    # Every evaluation of stage s2 failed: nobody entered it. The end-to-end rate is not 0
    # (nobody was read, not nobody hired), so the decomposition is undefined, and says why.
    rows = [
        ("a1", "s1", "A", True, None),
        ("a2", "s1", "A", False, None),
        ("b1", "s1", "B", True, None),
        ("b2", "s1", "B", False, None),
    ]
    out = compounding(_frame(rows), ["s1", "s2"], "race").set_index("value")
    assert list(out["entered_s1"]) == [2, 2] and list(out["entered_s2"]) == [0, 0]
    assert out["end_to_end_rate"].isna().all() and out["product"].isna().all()
    assert not out["identity_holds"].any()
    assert (out["undefined"] == "no valid answer at stage `s2` (0 entered)").all()
    # A first stage nobody entered made the end-to-end rate infinite (1 hired / 0 entered).
    late = _frame([("a1", "s2", "A", True, None), ("b1", "s2", "B", False, None)])
    out = compounding(late, ["s1", "s2"], "race").set_index("value")
    assert out["end_to_end_rate"].isna().all()
    assert (out["undefined"] == "no valid answer at stage `s1` (0 entered)").all()
    defined = compounding(_frame(rows), ["s1"], "race")
    assert (defined["undefined"] == "").all() and defined["identity_holds"].all()


def test_compounding_with_no_valid_answer_anywhere_keeps_every_group():
    nothing = _frame([])
    out = compounding(nothing, ["s1", "s2"], "race", values=["A", "B"])
    assert list(out["value"]) == ["A", "B"]
    assert (out[["entered_s1", "entered_s2"]] == 0).all().all()
    # s2 was never offered anyone: the reason is the first stage, where reading broke down.
    assert (out["undefined"] == "no valid answer at stage `s1` (0 entered)").all()
    table = stage_table(nothing, ["s1", "s2"], "race", values=["A", "B"])
    assert len(table) == 4 and (table["entered"] == 0).all() and table["rate"].isna().all()
    with pytest.raises(ValueError, match="no group values"):
        compounding(nothing, ["s1"], "race")


def test_stage_and_compounding_tables_are_the_two_tables() -> None:
    rng = np.random.default_rng(4)
    rows = []
    for pool in range(60):
        members = [(f"c{pool}_{i}", rng.choice(["a", "b", "c"])) for i in range(6)]
        picked = set(rng.choice(6, size=2, replace=False).tolist())
        for i, (who, group) in enumerate(members):
            rows.append((who, "screen", group, i in picked, f"p{pool}"))
            if i in picked:
                rows.append((who, "offer", group, bool(rng.random() < 0.5), f"o{pool}"))
    candidates = pd.DataFrame(rows, columns=["candidate", "stage", "g", "advanced", "cluster"])
    options = {"n_permutations": 300, "seed": 3, "adjust": "bh", "values": ["a", "b", "c", "d"]}
    table, compound = pipeline_stats.stage_and_compounding_tables(
        candidates, ["screen", "offer"], "g", **options
    )
    pd.testing.assert_frame_equal(
        table, pipeline_stats.stage_table(candidates, ["screen", "offer"], "g", **options)
    )
    pd.testing.assert_frame_equal(
        compound,
        pipeline_stats.compounding(candidates, ["screen", "offer"], "g", values=options["values"]),
    )
    assert compound["nested"].all()
    # A candidate who reaches the offer without being picked at the screen breaks the nesting.
    joined = pd.concat(
        [candidates, pd.DataFrame([("late", "offer", "a", True, "o0")], columns=candidates.columns)]
    )
    assert not pipeline_stats.compounding(joined, ["screen", "offer"], "g")["nested"].any()


def test_readings_checked_once_give_what_each_function_checks_itself() -> None:
    rng = np.random.default_rng(9)
    rows = []
    for e in range(80):
        size, k = (4, 1) if e % 2 else (3, 2)
        picked = set(rng.choice(size, size=k, replace=False).tolist())
        for pos in range(1, size + 1):
            rows.append((f"e{e}", pos, size, k, pos - 1 in picked, rng.choice(["x", "y"])))
    readings = pd.DataFrame(rows, columns=[*pipeline_stats.READING_COLUMNS, "g"])
    checked = pipeline_stats.CheckedReadings.of(readings, ["g"])
    pd.testing.assert_frame_equal(
        pipeline_stats.position_table(checked), pipeline_stats.position_table(readings)
    )
    pd.testing.assert_frame_equal(
        pipeline_stats.first_position_test(checked), pipeline_stats.first_position_test(readings)
    )
    pd.testing.assert_frame_equal(
        pipeline_stats.choice_rates(checked, "g"), pipeline_stats.choice_rates(readings, "g")
    )
    with pytest.raises(ValueError, match=r"missing column\(s\) \['h'\]"):
        pipeline_stats.choice_rates(checked, "h")  # a group not kept when checked
    with pytest.raises(ValueError, match="several rows for one position"):
        pipeline_stats.CheckedReadings.of(pd.concat([readings, readings.iloc[:1]]))
