"""The test of a difference between two models' DPDs: exact against full enumeration of the
within-prompt label swaps, calibrated under nulls that keep the studies' real structure
(prompt-level heterogeneity, replicates, names shared across roles), and powered."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.models import model_difference_tests, model_pair_test


def _statistic(df: pd.DataFrame) -> float:
    rates = df.groupby(["model", "group"])["hit"].mean().unstack("group")
    dpd = rates.max(axis=1) - rates.min(axis=1)
    return abs(dpd["a"] - dpd["b"])


def test_p_value_equals_the_exact_enumeration() -> None:
    """Eight prompts in two groups, one answer per model each, plus a prompt with replicates:
    every assignment of labels within prompts is enumerated by brute force (the oracle)."""
    rows = []
    answers = {  # prompt: (group, answers of a, answers of b)
        "p1": ("x", [1], [0]),
        "p2": ("x", [1], [0]),
        "p3": ("x", [1], [1]),
        "p4": ("x", [0], [1]),
        "p5": ("y", [0], [1]),
        "p6": ("y", [0], [0]),
        "p7": ("y", [1], [0]),
        "p8": ("y", [0], [1]),
        "p9": ("y", [1, 0], [0, 0]),
    }
    for prompt, (group, a, b) in answers.items():
        rows += [{"prompt": prompt, "group": group, "model": "a", "hit": h} for h in a]
        rows += [{"prompt": prompt, "group": group, "model": "b", "hit": h} for h in b]
    df = pd.DataFrame(rows)
    observed = _statistic(df)
    # Oracle: every way to choose which of a prompt's answers carry label a.
    choices = []
    for _, part in df.groupby("prompt"):
        n_a = int((part["model"] == "a").sum())
        choices.append([(part.index, set(c)) for c in itertools.combinations(part.index, n_a)])
    exceed = total = 0
    for combo in itertools.product(*choices):
        relabelled = df.copy()
        for index, chosen in combo:
            relabelled.loc[index, "model"] = ["a" if i in chosen else "b" for i in index]
        total += 1
        exceed += _statistic(relabelled) >= observed - 1e-12
    exact = exceed / total
    result = model_pair_test(
        df.assign(hit=df["hit"].astype(bool)),
        model_col="model",
        model_a="a",
        model_b="b",
        group_col="group",
        outcome_col="hit",
        match_col="prompt",
        n_permutations=40_000,
        seed=3,
    )
    assert result["dpd_a"] == pytest.approx(0.75 - 2 / 6)
    assert result["n_matched"] == 9
    assert result["p_value"] == pytest.approx(exact, abs=0.01)  # Monte Carlo sd ~ 0.0025


def _decision_study(rng: np.random.Generator, shift_b: float = 0.0) -> pd.DataFrame:
    """Seed-004-like: 3 groups x 40 agents, each with its own propensity (heterogeneity far
    above the group effect), 2 replicates per model; model b may add a shift to one group."""
    agents = np.repeat(np.arange(120), 4)
    group = np.array(["f", "m", "n"])[agents // 40]
    model = np.tile(["a", "a", "b", "b"], 120)
    propensity = rng.normal(0.0, 1.5, 120)[agents] + np.where(group == "f", 0.8, 0.0)
    propensity = propensity + np.where((model == "b") & (group == "f"), shift_b, 0.0)
    hit = rng.random(len(agents)) < 1 / (1 + np.exp(-propensity))
    return pd.DataFrame({"agent": agents, "group": group, "model": model, "hit": hit})


def _hiring_study(rng: np.random.Generator) -> pd.DataFrame:
    """Seed-001-like: 6 groups x 8 names, each name used in all 15 roles (names shared across
    strata, with a strong name effect), one email per model and prompt."""
    names = np.arange(48)
    name_effect = rng.normal(0.0, 1.2, 48)
    role_effect = rng.normal(0.0, 0.8, 15)
    grid = pd.MultiIndex.from_product(
        [range(15), names, ["a", "b"]], names=["role", "name", "model"]
    )
    df = grid.to_frame(index=False)
    df["group"] = (df["name"] // 8).astype(str)
    logit = name_effect[df["name"]] + role_effect[df["role"]] + 0.5 * (df["name"] // 8 == 0)
    df["hit"] = rng.random(len(df)) < 1 / (1 + np.exp(-logit))
    df["prompt"] = df["role"].astype(str) + "/" + df["name"].astype(str)
    return df


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["decisions", "hiring"])
def test_calibrated_under_the_null(structure: str) -> None:
    """Both models answer each prompt alike (groups differ, prompts differ a lot): the test
    at alpha 0.05 rejects 3-7 % of 500 simulated studies."""
    rng = np.random.default_rng(20261123)
    rejected = 0
    n_studies = 500
    for i in range(n_studies):
        if structure == "decisions":
            df, match = _decision_study(rng), "agent"
        else:
            df, match = _hiring_study(rng), "prompt"
        result = model_pair_test(
            df,
            model_col="model",
            model_a="a",
            model_b="b",
            group_col="group",
            outcome_col="hit",
            match_col=match,
            n_permutations=199,
            seed=i,
        )
        rejected += result["p_value"] <= 0.05
    assert 0.03 <= rejected / n_studies <= 0.07


def test_power_against_a_declared_difference() -> None:
    rng = np.random.default_rng(5)
    hits = 0
    for i in range(100):
        df = _decision_study(rng, shift_b=2.0)
        result = model_pair_test(
            df,
            model_col="model",
            model_a="a",
            model_b="b",
            group_col="group",
            outcome_col="hit",
            match_col="agent",
            n_permutations=199,
            seed=i,
        )
        hits += result["p_value"] <= 0.05
    assert hits >= 70


def test_every_case_and_pair_is_one_adjusted_family() -> None:
    rng = np.random.default_rng(1)
    parts = []
    for case in ("c1", "c2"):
        df = _decision_study(rng)
        df = pd.concat([df, df[df["model"] == "b"].assign(model="c")], ignore_index=True)
        parts.append(df.assign(case=case))
    table = model_difference_tests(
        pd.concat(parts, ignore_index=True),
        model_col="model",
        models=["a", "b", "c"],
        case_cols=["case"],
        group_col="group",
        outcome_col="hit",
        match_col="agent",
        n_permutations=199,
        adjust="holm",
    )
    assert len(table) == 2 * 3
    assert list(table["model_a"][:3]) == ["a", "a", "b"]
    # b and c gave identical answers: nothing to swap, p = 1.
    same = table[(table["model_a"] == "b") & (table["model_b"] == "c")]
    assert (same["p_value"] == 1.0).all()
    assert (table["p_adjusted"] >= table["p_value"]).all()
    from biasim.analysis.stats.multiple import holm

    assert table["p_adjusted"].to_numpy() == pytest.approx(holm(table["p_value"].to_numpy()))
