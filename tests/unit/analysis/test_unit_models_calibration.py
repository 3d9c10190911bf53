"""Calibration of the model-based estimates under a null that keeps the design's structure:
names nested in two groups (name propensity sd 1 on the logit), crossed with items (templates
or scenarios, sd 0.5), several answers per name and item, no group effect.

* GEE, cluster-robust on the name (bias-reduced CR2 sandwich, Student's t with
  Bell-McCaffrey Satterthwaite df): 500 null studies, rejection 3-7 %; measured 4.6 % (4.0 %
  with the usual CR1 sandwich on the fewer units less one; Monte Carlo error of a 5 % rate:
  1.0 point).
* GEE with few names (12, 6 a group) answering unequally often (1-5 times an item): 400 null
  studies, rejection 3-7 %; measured 4.0 % (Monte Carlo error 1.1 points; 4.9 % of 3000 with
  another seed, 4.7 % of 2000 with 8 names, 4.55 % of 2000 with 20, in a scratch study).
  Before CR2: on the normal scale 8.25 % (10-13 % of 1000 with 8-12 names), with CR1 on
  Student's t with the fewer units of the two groups less one as df 2.25 % (conservative).
* Mixed logistic (Laplace, crossed name and item intercepts): its 95 % interval excluded the
  true null in 12 % of 100 null studies with 20 names per group (Monte Carlo error 3 points),
  so the model prints no p-value; this test keeps that rate from growing (<= 15 %).
* DiscrimEval mixed model under its own design (every answer a different person; scenario
  intercepts and group slopes vary, sd 0.5 and 0.3, their mean slope is 0): 100 nulls of 30
  scenarios, rejection 1-10 %.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import unit_models

pytestmark = pytest.mark.slow
ALPHA = 0.05


def null_study(rng: np.random.Generator, names: int = 60, items: int = 4, reps: int = 2):
    group = np.repeat(["A", "B"], names // 2)
    name_effect = rng.normal(0.0, 1.0, names)
    item_effect = rng.normal(0.0, 0.5, items)
    u, i, _ = np.meshgrid(np.arange(names), np.arange(items), np.arange(reps), indexing="ij")
    u, i = u.ravel(), i.ravel()
    logit = name_effect[u] + item_effect[i]
    return pd.DataFrame(
        {
            "group": group[u],
            "name": u,
            "item": i,
            "hit": rng.random(u.size) < 1 / (1 + np.exp(-logit)),
            "score": logit + rng.normal(0.0, 1.0, u.size),
        }
    )


def _rejected(fit, rng, n_studies: int, design=null_study, **sizes) -> float:
    rejected = 0
    for _ in range(n_studies):
        table = fit(design(rng, **sizes))
        assert table["converged"].all() or table["note"].str.len().gt(0).all()
        rejected += bool((table["p_value"] < ALPHA).any())
    return rejected / n_studies


def test_gee_holds_its_level_with_names_crossed_with_items() -> None:
    rate = _rejected(
        lambda d: unit_models.gee_odds_ratios(d, "group", "hit", "name", "item"),
        np.random.default_rng(5),
        500,
    )
    # CR2 with Satterthwaite df: 4.6 % measured (CR1 on min(units) - 1 df: 4.0 %).
    assert 0.03 <= rate <= 0.07, rate


def few_unequal_names(rng: np.random.Generator, names: int = 12, items: int = 4) -> pd.DataFrame:
    """``null_study``'s design with few names, each answering 1-5 times an item."""
    table = null_study(rng, names=names, items=items, reps=5)
    keep = rng.integers(1, 6, names)[table["name"]]
    return table[table.groupby(["name", "item"]).cumcount() < keep]


def test_gee_holds_its_level_with_few_names_answering_unequally() -> None:
    rate = _rejected(
        lambda d: unit_models.gee_odds_ratios(d, "group", "hit", "name", "item"),
        np.random.default_rng(12),
        400,
        design=few_unequal_names,
    )
    # CR2 with Satterthwaite df: 4.0 % measured (CR1 on min(units) - 1 df: 2.25 %).
    assert 0.03 <= rate <= 0.07, rate


def test_mixed_model_interval_excludes_a_true_null_no_more_than_measured() -> None:
    rng = np.random.default_rng(6)
    excluded = 0
    for _ in range(100):
        (row,) = unit_models.mixed_odds_ratios(
            null_study(rng, names=40), "group", "hit", "name", "item"
        ).to_dict("records")
        assert np.isnan(row["p_value"])
        excluded += not row["ci_low"] <= 0.0 <= row["ci_high"]
    assert excluded / 100 <= 0.15


def discrim_eval_null(rng: np.random.Generator, scenarios: int = 30, per_cell: int = 20):
    """Each row a different person: scenario intercepts and group slopes vary, mean slope 0."""
    intercept = rng.normal(0.0, 0.5, scenarios)
    slope = rng.normal(0.0, 0.3, scenarios)
    s, g, _ = np.meshgrid(np.arange(scenarios), np.arange(2), np.arange(per_cell), indexing="ij")
    s, g = s.ravel(), g.ravel()
    score = intercept[s] + slope[s] * g + rng.normal(0.0, 1.0, s.size)
    return pd.DataFrame({"scenario": s, "group": np.array(["A", "B"])[g], "score": score})


def test_discrim_eval_model_holds_its_level() -> None:
    rng = np.random.default_rng(7)
    rejected = 0
    for _ in range(100):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = unit_models.discrim_eval_effects(
                discrim_eval_null(rng), "group", "score", "scenario"
            )
        rejected += bool(table["p_value"].iloc[0] < ALPHA)
    assert 0.01 <= rejected / 100 <= 0.10
