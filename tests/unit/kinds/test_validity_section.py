"""The validity test of the pipeline, picks, association and letter_evaluation kinds
(``simulator.kinds.sections.validity``): counts by hand, the unit named, and calibration where
failures cluster (a failed pool excludes all its applicants; a failed call all its items)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.kinds.sections.validity import validity_records


def test_counts_rates_and_the_unit_by_hand():
    rows = pd.DataFrame(
        {
            "stage": ["screen"] * 6 + ["offer"] * 2,
            "candidate": ["a", "b", "c", "d", "e", "f", "a", "d"],
            "gender": ["f", "f", "f", "m", "m", "m", "f", "m"],
        }
    )
    ok = np.array([True, True, False, True, False, False, True, True])
    table = validity_records(
        rows, strata=["stage"], group="gender", ok=ok, unit_col="candidate", unit="applicant"
    )
    screen = table[table["stage"] == "screen"].set_index("value")
    assert screen.loc["f", "n_valid"] == 2 and screen.loc["f", "n_rows"] == 3
    assert screen.loc["m", "n_valid"] == 1 and screen.loc["m", "n_rows"] == 3
    assert screen["validity_gap"].iloc[0] == pytest.approx(1 / 3)
    assert screen["validity_test"].iloc[0] == (
        "permutation of applicant labels, unit: applicant, 6 units"
    )
    offer = table[table["stage"] == "offer"]
    assert (offer["validity_rate"] == 1.0).all() and offer["validity_gap"].iloc[0] == 0
    alone = validity_records(rows, strata=[], group="gender", ok=ok, unit_col=None, unit="answer")
    assert alone["validity_test"].iloc[0] == "binomial null, unit: answer, 8 answers"


@pytest.mark.slow
def test_applicant_labels_hold_their_level_when_whole_pools_fail():
    # 500 null studies: 400 applicants (240 f, 160 m) in random pools of 8; a pool fails whole
    # with probability 0.3 (the reader's call failed), whatever its members' groups. The
    # applicant labels permuted within the stage reject 3-7 % at alpha 0.05 (the exact
    # permutation test's size here is 4.3 %: the gap is discrete; with 80 f and 80 m it is
    # 3.3 %); 500 studies put the rate's sd at 0.01.
    rng = np.random.default_rng(20261126)
    p_values = []
    for study in range(500):
        gender = rng.permutation(np.repeat(["f", "m"], [240, 160]))
        pool_ok = rng.random(50) > 0.3
        rows = pd.DataFrame({"candidate": np.arange(400).astype(str), "gender": gender})
        table = validity_records(
            rows, strata=[], group="gender", ok=np.repeat(pool_ok, 8),
            unit_col="candidate", unit="applicant", n_permutations=199, seed=study,
        )  # fmt: skip
        p_values.append(float(table["validity_p_value"].iloc[0]))
    rate = float(np.mean(np.asarray(p_values) <= 0.05))  # p = (1 + b) / 200: 10 of 200
    assert 0.03 <= rate <= 0.07
