"""The condition-difference test of `demographic_parity` (a persona ablation) relabels the
conditions within the kind's own unit (``units.design_units``): with ``unit: name``, within
whole names shared by several personas; it states that unit, refuses a name in two groups, and
rejects 3-7 % under a null where names are shared and differ."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from biasim.simulator.kinds.sections.conditions import condition_differences

CTX = SimpleNamespace(
    name="dp", study=SimpleNamespace(seed=0, design=SimpleNamespace(factors={"cond": ["a", "b"]}))
)


def _tests(rows: pd.DataFrame, n_permutations: int = 999) -> tuple:
    """The tests (None when refused), the levels and why they were refused."""
    return condition_differences(
        CTX, rows, condition="cond", unit_col="persona_name", whole_units=True,
        case_cols=["model_label", "attribute"], n_permutations=n_permutations,
        adjust="holm", alpha=0.05,
    )  # fmt: skip


def _rows(value, name, index, cond, hit) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model_label": "m",
            "attribute": "gender",
            "value": value,
            "persona_name": name,
            "agent_index": index,
            "cond": cond,
            "_hit": hit,
        }
    )


def test_labels_move_within_names_not_within_agents() -> None:
    # Each name is drawn for two personas: one answered under `a`, the other under `b`. No
    # persona is matched across the conditions, but every name is: relabelling within names
    # moves the women's hits between conditions (p small); within personas nothing moves.
    names = [f"f{j}" for j in range(10)] + [f"m{j}" for j in range(10)]
    value = np.repeat(["female", "male"], 20)
    rows = _rows(
        value,
        np.repeat(names, 2),
        np.tile([0, 1], 20),
        np.tile(["a", "b"], 20),
        np.where(value == "female", np.tile([True, False], 20), False),
    )
    table = _tests(rows)[0].iloc[0]
    assert (table["unit"], table["n_units"], table["spread"]) == ("persona_name", 20, 1.0)
    assert table["p_value"] < 0.01


def test_a_name_in_two_groups_is_refused_with_the_reason() -> None:
    rows = _rows(["female", "male"] * 2, ["x", "x", "y", "y"], [0, 1, 0, 1], ["a", "b"] * 2, True)
    tests, _, refused = _tests(rows)
    assert tests is None
    assert "persona_name answers in more than one group" in refused


def _null(rng: np.random.Generator) -> pd.DataFrame:
    """No condition effect, a group effect (+1.5 on the logit for women) the same under both
    conditions: 40 names per group, each drawn for 2 personas; a name's own propensity (sd 1)
    plus a persona's (sd 1); every persona answers twice under each condition."""
    names, per, reps = 80, 2, 2
    women = np.arange(names) < names // 2
    name_logit = rng.normal(0, 1, names) + np.where(women, 1.5, 0.0)
    persona_logit = np.repeat(name_logit, per) + rng.normal(0, 1, names * per)
    logit = np.repeat(persona_logit, 2 * reps)
    hit = rng.random(logit.size) < 1 / (1 + np.exp(-logit))
    name = np.repeat(np.arange(names), 2 * per * reps)
    return _rows(
        np.where(women[name], "female", "male"),
        name.astype(str),
        np.repeat(np.arange(names * per), 2 * reps),
        np.tile(np.repeat(["a", "b"], reps), names * per),
        hit,
    )


def test_calibrated_under_a_null_with_shared_names() -> None:
    """400 null studies: relabelling whole names rejects 3-7 % at 0.05 (shuffling the answers
    within names, whose personas differ, is conservative; with no group effect at all the DPD's
    absolute value caps the spread and ties make any relabelling conservative)."""
    rng = np.random.default_rng(20261129)
    reps = 400
    rejected = sum(
        _tests(_null(rng), n_permutations=199)[0]["p_value"].iloc[0] <= 0.05 for _ in range(reps)
    )
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps
