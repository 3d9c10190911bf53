"""Justification shift (issue 47): which sets count as agreeing, a shift detected among them,
and calibration under a writer whose decisions and rationales ignore the swap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.counterfactual import CounterfactualColumns
from biasim.analysis.text.justification import (
    agreeing_sets,
    decision_flips,
    justification_shift,
)
from biasim.analysis.text.scorers import create_scorer
from tests.optional import requires

COLS = CounterfactualColumns(writer="writer", text="rationale")
WARM = ["a wonderful, brilliant candidate", "kind and helpful", "an outstanding record"]
PLAIN = ["has the listed degree", "worked in sales", "lives near the office"]
COLD = ["weak and careless answers", "a poor record", "late to the interview"]


def test_a_set_agrees_when_all_its_responses_reach_one_decision():
    df = pd.DataFrame(
        {
            "pair_id": [1, 1, 2, 2, 3, 3, 4],
            "swap_value": ["a", "b", "a", "b", "a", "b", "a"],
            "writer": "w",
            "rationale": "x",
            "hire": ["yes", "yes", "yes", "no", "no", None, "yes"],
        }
    )
    agree = agreeing_sets(df, COLS, "hire")
    # Set 3 has a missing decision; set 4 has no swap, so it is no counterfactual set.
    assert agree.to_dict() == {1: True, 2: False, 3: False}
    with pytest.raises(ValueError, match="missing decision column `verdict`"):
        agreeing_sets(df, COLS, "verdict")


def simulated_decisions(
    rng: np.random.Generator, sets: int = 40, replicates: int = 2, shift: float = 0.0
) -> pd.DataFrame:
    """Hire / reject decisions with a set-level hire rate, and rationales of two phrases drawn
    by the decision and the writer's tone; with ``shift`` > 0, hired b applicants' rationales
    draw warm phrases more often (the decision itself ignores the swap)."""
    tone = rng.normal(0, 1, 4)
    rows = []
    for s in range(sets):
        rate = rng.beta(1, 1) ** 0.3
        for value in ("a", "b"):
            for _ in range(replicates):
                hired = bool(rng.random() < rate)
                lean = tone[s % 4] + (1 if hired else -1) + (shift if value == "b" else 0)
                w = np.exp([lean, 0.0, -lean])
                pools = rng.choice(3, size=2, p=w / w.sum())
                phrases = [rng.choice((WARM, PLAIN, COLD)[k]) for k in pools]
                text = f"Hire: {hired}. The applicant is {phrases[0]}, and {phrases[1]}."
                rows.append(
                    {
                        "pair_id": s,
                        "swap_value": value,
                        "writer": f"w{s % 4}",
                        "rationale": text,
                        "hire": hired,
                    }
                )
    return pd.DataFrame(rows)


@requires("vaderSentiment", "rouge_score", "nltk")
def test_rationales_of_agreeing_sets_that_warm_under_the_swap_are_flagged_by_set():
    df = simulated_decisions(np.random.default_rng(0), sets=60, shift=2.0)
    shift = justification_shift(df, COLS, "hire", {"vader": create_scorer("vader")}, None, 499)
    assert shift.n_sets == 60 and 0 < shift.n_agreeing < 60
    assert sum(shift.decisions.values()) == shift.n_agreeing
    metrics = shift.tables.metrics.set_index(["metric", "statistic"])
    assert metrics.loc[("vader_value", "mean"), "p_value"] < 0.01
    assert metrics.loc[("vader_value", "mean"), "n_units"] == shift.n_agreeing
    kept = set(shift.tables.scores["pair_id"])
    agree = agreeing_sets(df, COLS, "hire")
    assert kept == set(agree.index[agree.to_numpy(dtype=bool)])


@pytest.mark.slow
@requires("vaderSentiment", "rouge_score", "nltk")
def test_justification_tests_reject_3_to_7_percent_when_the_swap_changes_nothing():
    rng = np.random.default_rng(47)
    vader = {"vader": create_scorer("vader")}
    # q50, q90 and the weak parity of few distinct phrases tie often: before their ties were
    # broken at random they rejected 1-2.5 %.
    wanted = [
        ("vader_value", "strict_parity"),
        ("vader_value", "mean"),
        ("vader_value", "q50"),
        ("vader_value", "q90"),
        ("vader_label", "weak_parity"),
        ("rouge_l", "within_minus_across"),
    ]
    rejected = dict.fromkeys(wanted, 0)
    n = 200
    for i in range(n):
        shift = justification_shift(simulated_decisions(rng), COLS, "hire", vader, None, 199, i)
        metrics = shift.tables.metrics.set_index(["metric", "statistic"])
        for key in wanted:
            rejected[key] += metrics.loc[key, "p_value"] < 0.05
    rates = {k: v / n for k, v in rejected.items()}
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates


def test_the_flip_rate_counts_sets_whose_decisions_differ_and_leaves_out_missing_ones():
    df = pd.DataFrame(
        {
            "pair_id": [1, 1, 2, 2, 3, 3, 4, 4, 5],
            "swap_value": ["a", "b", "a", "b", "a", "b", "a", "b", "a"],
            "writer": "w",
            "rationale": "x",
            "hire": ["yes", "yes", "yes", "no", "no", None, "no", "yes", "yes"],
        }
    )
    flips = decision_flips(df, COLS, "hire", n_permutations=99)
    # Sets 1, 2, 4 have both values and every decision; 2 and 4 flip; 3 misses one; 5 has no swap.
    assert (flips.n_sets, flips.n_flipped, flips.n_missing) == (3, 2, 1)
    assert flips.rate == pytest.approx(2 / 3) and flips.ci_low < 2 / 3 < flips.ci_high
    # a: yes, yes, no; b: yes, no, yes: the same distribution, distance 0.
    assert flips.distance == pytest.approx(0.0) and flips.p_value is not None
    assert "pair_id" in flips.note


def test_a_swap_that_moves_decisions_is_flagged_by_set():
    rng = np.random.default_rng(5)
    df = simulated_decisions(rng, sets=60, replicates=1)
    b = df["swap_value"] == "b"
    df.loc[b, "hire"] = df.loc[b, "hire"] & (rng.random(b.sum()) < 0.4)
    flips = decision_flips(df, COLS, "hire", n_permutations=499)
    assert flips.p_value < 0.01 and flips.n_flipped > 10


@pytest.mark.slow
def test_the_flip_test_rejects_3_to_7_percent_when_decisions_ignore_the_swap():
    """200 data sets of 40 sets x 2 values x 2 replicates, hire decisions at a set-level rate
    that the swap does not move: binary decisions tie often (a rate counting ties as extreme
    would be conservative)."""
    rng = np.random.default_rng(11)
    n, rejected = 200, 0
    for i in range(n):
        flips = decision_flips(simulated_decisions(rng), COLS, "hire", n_permutations=199, seed=i)
        rejected += flips.p_value < 0.05
    print("flip test rejection rate at alpha 0.05:", rejected / n)
    assert 0.03 <= rejected / n <= 0.07
