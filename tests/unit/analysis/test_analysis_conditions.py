"""The test of whether the disparity differs between persona conditions (``analysis.conditions``):
exact against full enumeration, in agreement with the model-difference test's independent
(hypergeometric) implementation, calibrated under a null keeping an ablation's structure."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.conditions import condition_difference_test, condition_difference_tests
from biasim.analysis.stats.models import model_pair_test

CONDITIONS = ["attribute", "name", "generated"]


def _tiny() -> pd.DataFrame:
    """Two groups of three agents, each answering once under each condition."""
    hits = {
        ("a", 0): (1, 0, 1),
        ("a", 1): (1, 1, 1),
        ("a", 2): (0, 0, 1),
        ("b", 0): (0, 1, 0),
        ("b", 1): (1, 0, 0),
        ("b", 2): (0, 1, 0),
    }
    rows = [
        {"group": g, "agent": f"{g}{i}", "condition": c, "hit": bool(h)}
        for (g, i), answers in hits.items()
        for c, h in zip(CONDITIONS, answers, strict=True)
    ]
    return pd.DataFrame(rows)


def _spread(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Range of the DPDs over conditions; ``k`` is ``(..., C, G)``, ``n`` is ``(C, G)``."""
    rate = k / n
    dpd = rate.max(axis=-1) - rate.min(axis=-1)
    return dpd.max(axis=-1) - dpd.min(axis=-1)


def _exact_p(frame: pd.DataFrame, conditions: list[str]) -> float:
    """Share of all within-agent relabellings at least as extreme (identity included), by
    enumerating every ordering of every agent's condition labels."""
    groups = sorted(frame["group"].unique())
    n = np.array(
        [
            [((frame["condition"] == c) & (frame["group"] == g)).sum() for g in groups]
            for c in conditions
        ]
    )
    per_agent = []
    for _, part in frame.groupby("agent", sort=True):
        g = groups.index(part["group"].iloc[0])
        hits = part["hit"].to_numpy(dtype=int)
        labels = [conditions.index(c) for c in part["condition"]]
        # Each ordering of the agent's labels as a (C, G) table of its positives.
        options = []
        for order in itertools.permutations(labels):
            table = np.zeros((len(conditions), len(groups)))
            for label, h in zip(order, hits, strict=True):
                table[label, g] += h
            options.append(table)
        per_agent.append(np.array(options))
    k = np.zeros((1, len(conditions), len(groups)))
    for options in per_agent:  # every combination of every agent's orderings
        k = (k[:, None] + options[None]).reshape(-1, len(conditions), len(groups))
    identity = sum(options[0] for options in per_agent)
    observed = _spread(identity, n)
    return float(np.mean(_spread(k, n) >= observed - 1e-12))


@pytest.mark.parametrize("conditions", [CONDITIONS, ["attribute", "generated"]])
def test_p_value_matches_full_enumeration(conditions: list[str]) -> None:
    frame = _tiny()
    frame = frame[frame["condition"].isin(conditions)]
    exact = _exact_p(frame, conditions)
    b = 20_000
    test = condition_difference_test(
        frame,
        condition_col="condition",
        conditions=conditions,
        group_col="group",
        outcome_col="hit",
        match_col="agent",
        n_permutations=b,
        seed=3,
    )
    groups = sorted(frame["group"].unique())
    rates = frame.groupby(["condition", "group"])["hit"].mean().unstack().loc[conditions, groups]
    dpd = rates.max(axis=1) - rates.min(axis=1)
    assert test["spread"] == pytest.approx(dpd.max() - dpd.min())
    assert test["n_matched"] == 6
    # Monte Carlo p = (1 + b*) / (B + 1): within 4 standard errors of the exact p.
    se = np.sqrt(exact * (1 - exact) / b)
    assert abs(test["p_value"] - exact) < 4 * se + 1 / b
    assert 0.02 < exact < 0.98  # the data make a non-trivial test


def test_two_conditions_agree_with_the_model_difference_test() -> None:
    rng = np.random.default_rng(11)
    rows = []
    for g, shift in (("a", 0.0), ("b", 0.8), ("c", -0.4)):
        for i in range(15):
            effect = rng.normal(0, 1)
            for c in ("name", "generated"):
                for r in range(2):
                    lift = 0.9 if (c == "generated" and g == "b") else 0.0
                    p = 1 / (1 + np.exp(-(shift + effect + lift)))
                    rows.append(
                        {"group": g, "agent": f"{g}{i}/r{r}", "cond": c, "hit": rng.random() < p}
                    )
    frame = pd.DataFrame(rows)
    ours = condition_difference_test(
        frame,
        condition_col="cond",
        conditions=["name", "generated"],
        group_col="group",
        outcome_col="hit",
        match_col="agent",
        n_permutations=20_000,
        seed=1,
    )
    theirs = model_pair_test(
        frame,
        model_col="cond",
        model_a="name",
        model_b="generated",
        group_col="group",
        outcome_col="hit",
        match_col="agent",
        n_permutations=20_000,
        seed=2,
    )
    assert ours["spread"] == pytest.approx(abs(theirs["difference"]))
    assert abs(ours["p_value"] - theirs["p_value"]) < 0.02


def _ablation_study(rng: np.random.Generator, lift: float = 0.0, per: int = 20) -> pd.DataFrame:
    """One simulated ablation: 3 groups x ``per`` agents, each with its own propensity (sd 1.5 on
    the log-odds) kept in both scenarios (strata), both replicates and every condition, a true
    group disparity the same under every condition; ``lift`` adds one under `generated`."""
    groups = np.repeat([0.0, 0.6, -0.6], per)
    agent = rng.normal(0, 1.5, size=groups.size)
    scenario = np.array([0.0, 0.5])
    cond = np.arange(3)
    rep = np.arange(2)
    g, s, c, _ = np.meshgrid(np.arange(groups.size), np.arange(2), cond, rep, indexing="ij")
    logit = groups[g] + agent[g] + scenario[s] + lift * (c == 2) * (g < per)
    hit = rng.random(logit.shape) < 1 / (1 + np.exp(-logit))
    return pd.DataFrame(
        {
            "group": (g.ravel() // per).astype(str),
            "scenario": s.ravel(),
            # An agent's replicates in a case are one prompt: its answers are relabelled together.
            "agent": [f"{a}/{b}" for a, b in zip(g.ravel(), s.ravel(), strict=True)],
            "condition": np.array(CONDITIONS)[c.ravel()],
            "hit": hit.ravel(),
        }
    )


@pytest.mark.slow
def test_calibrated_under_a_null_with_agent_effects_replicates_and_strata() -> None:
    """500 simulated ablations of 50 agents per group in which the condition changes
    nothing: every comparison rejects 3-7 % at alpha 0.05 (tested in the first scenario; the
    agents, with their own propensities, also answer in the second)."""
    rng = np.random.default_rng(2025)
    n_studies = 500
    rejected: dict[str, int] = {}
    for study in range(n_studies):
        table = condition_difference_tests(
            _ablation_study(rng, per=50).query("scenario == 0"),
            condition_col="condition",
            conditions=CONDITIONS,
            case_cols=["scenario"],
            group_col="group",
            outcome_col="hit",
            match_col="agent",
            n_permutations=199,
            seed=study,
        )
        for compared, p in zip(table["compared"], table["p_value"], strict=True):
            rejected[compared] = rejected.get(compared, 0) + int(p <= 0.05)
    rates = {k: v / n_studies for k, v in rejected.items()}
    assert set(rates) == {
        "attribute vs name vs generated",
        "attribute vs name",
        "attribute vs generated",
        "name vs generated",
    }
    for compared, rate in rates.items():
        assert 0.03 <= rate <= 0.07, (compared, rate)


def test_detects_a_disparity_that_only_the_generated_persona_has() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    for study in range(40):
        table = condition_difference_tests(
            _ablation_study(rng, lift=2.5),
            condition_col="condition",
            conditions=CONDITIONS,
            case_cols=["scenario"],
            group_col="group",
            outcome_col="hit",
            match_col="agent",
            n_permutations=199,
            seed=study,
        )
        omnibus = table[table["compared"] == "attribute vs name vs generated"]
        hits += int((omnibus["p_value"] < 0.05).any())
        # The family is the whole table: adjusted p-values are never below the raw ones.
        assert (table["p_adjusted"] >= table["p_value"] - 1e-12).all()
    assert hits >= 28


def test_a_condition_with_one_group_has_no_test() -> None:
    frame = _tiny()
    frame = frame[~((frame["condition"] == "name") & (frame["group"] == "b"))]
    test = condition_difference_test(
        frame,
        condition_col="condition",
        conditions=CONDITIONS,
        group_col="group",
        outcome_col="hit",
        match_col="agent",
    )
    assert np.isnan(test["p_value"])
    assert np.isnan(test["dpd_name"])


def test_a_case_without_answers_under_the_compared_conditions_has_no_test() -> None:
    frame = _tiny()
    test = condition_difference_test(
        frame[frame["condition"] == "attribute"],
        condition_col="condition",
        conditions=["name", "generated"],
        group_col="group",
        outcome_col="hit",
        match_col="agent",
    )
    assert test["n"] == 0 and test["n_matched"] == 0
    assert np.isnan(test["p_value"]) and np.isnan(test["spread"])
