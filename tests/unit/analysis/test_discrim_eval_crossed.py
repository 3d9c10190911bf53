"""The DiscrimEval model with persona instances recurring across scenarios: it recovers a known
group effect, names the instance term, and refuses a fit too large for its dense design."""

from __future__ import annotations

import numpy as np
import pytest

from biasim.analysis.stats import unit_models
from tests.unit.analysis.test_discrim_eval_calibration import recurring_null


def test_the_crossed_model_recovers_a_known_group_effect() -> None:
    data = recurring_null(np.random.default_rng(5), scenarios=10, per_group=30)
    data.loc[data["group"] == "B", "log_odds"] += 0.8
    (row,) = unit_models.discrim_eval_effects(
        data, "group", "log_odds", "scenario", "instance"
    ).to_dict("records")
    assert "per instance" in row["model"] and row["converged"]
    assert row["ci_low"] < 0.8 < row["ci_high"] and row["p_value"] < 0.05
    assert row["n_units"] == 10 and row["unit"] == "scenario"


def test_a_fit_beyond_the_dense_design_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(unit_models, "MAX_CROSSED_CELLS", 100)
    data = recurring_null(np.random.default_rng(0))
    (row,) = unit_models.discrim_eval_effects(
        data, "group", "log_odds", "scenario", "instance"
    ).to_dict("records")
    assert np.isnan(row["estimate"]) and "beyond the dense fit" in row["note"]
