"""Calibration of the DiscrimEval model as a logprobs run feeds it: persona instances nested
in two groups answer every decision scenario once, each with its own log-odds shift (sd 1.0),
scenario intercepts and group slopes vary (sd 0.5 and 0.3, mean slope 0), no group effect.

The scenario-only model (Tamkin et al.'s, whose every answer is a different person) rejected
this null in 32 % of 100 studies: the instances' shifts correlate their answers across
scenarios. With the instance's own random intercept crossed with the scenario's effects (what
``discrim_eval_effects`` fits when instances recur), 300 null studies reject 3-7 % at 0.05
(Monte Carlo error of a 5 % rate: 1.3 points). The unit of exchangeability is the persona
instance, nested in its group.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import unit_models

pytestmark = pytest.mark.slow
ALPHA = 0.05


def recurring_null(
    rng: np.random.Generator, scenarios: int = 8, per_group: int = 10, instance_sd: float = 1.0
) -> pd.DataFrame:
    intercept = rng.normal(0.0, 0.5, scenarios)
    slope = rng.normal(0.0, 0.3, scenarios)
    shift = rng.normal(0.0, instance_sd, 2 * per_group)
    rows = []
    for s in range(scenarios):
        for unit in range(2 * per_group):
            g = unit // per_group
            y = intercept[s] + slope[s] * g + shift[unit] + rng.normal()
            rows.append((f"s{s}", "AB"[g], f"u{unit}", y))
    return pd.DataFrame(rows, columns=["scenario", "group", "instance", "log_odds"])


def test_the_model_with_recurring_instances_holds_its_level() -> None:
    rng = np.random.default_rng(2)
    rejected, runs = 0, 300
    for _ in range(runs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (row,) = unit_models.discrim_eval_effects(
                recurring_null(rng), "group", "log_odds", "scenario", "instance"
            ).to_dict("records")
        assert "per instance" in row["model"]
        rejected += bool(row["p_value"] < ALPHA)
    assert 0.03 <= rejected / runs <= 0.07
