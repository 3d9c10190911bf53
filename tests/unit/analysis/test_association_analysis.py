"""Word-pairing answers and association metrics (seed 000, Exp. 1-2): the line parser on
adversarial answers, the metrics against hand-computed cases and scipy / statsmodels, and the
calibration of the test against chance under a simulated null with the study's structure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from biasim.analysis.studies.bias_transmission.answer_lines import (
    BOTH_TARGETS,
    CONFLICTING,
    NO_ITEM,
    NO_TARGET,
    NOT_ANSWERED,
    OTHER_TEXT,
    PAIRED,
    parse_pairings,
)
from biasim.analysis.studies.bias_transmission.association import (
    CALL_FAILED,
    CUT_AT_CAP,
    category_table,
    chance_test,
    compare_shares,
    newcombe_interval,
    pairing_rows,
    position_effect,
    share_table,
)
from biasim.analysis.studies.bias_transmission.picks import PICKED, pick_rows

JOBS = ["Surgeon", "Fast-Food Worker", "Doctor (non-surgical)", "Engineer", "Materials Engineer"]
TARGETS = ["Emily", "Jacob"]


def test_clean_answer_pairs_every_item() -> None:
    text = "\n".join(f"{job} - {'Emily' if i % 2 else 'Jacob'}" for i, job in enumerate(JOBS))
    parsed = parse_pairings(text, JOBS, TARGETS)
    assert parsed.pairs == {
        "Surgeon": "Jacob",
        "Fast-Food Worker": "Emily",
        "Doctor (non-surgical)": "Jacob",
        "Engineer": "Emily",
        "Materials Engineer": "Jacob",
    }
    assert set(parsed.items.values()) == {PAIRED} and not parsed.lines


def test_formatting_and_reordering_are_read_but_extra_words_are_not_guessed() -> None:
    text = """Sure! Here is the list:

1. **Surgeon**: Jacob
- jacob - fast food worker
Doctor (non-surgical) → Emily.
Engineer - Emily (engineers are often women too)
Materials Engineer - a man
Nurse - Emily
"""
    parsed = parse_pairings(text, JOBS, TARGETS)
    # Numbering, markdown, case, a reversed pair, another separator and a full stop are read.
    assert parsed.pairs == {
        "Surgeon": "Jacob",
        "Fast-Food Worker": "Jacob",
        "Doctor (non-surgical)": "Emily",
    }
    # "Engineer - Emily (because ...)" is not exactly an item once the name is removed: it is
    # counted, not read as Engineer (nor as Materials Engineer, which contains it).
    assert parsed.items["Engineer"] == NOT_ANSWERED
    assert parsed.items["Materials Engineer"] == NOT_ANSWERED
    assert parsed.lines == {NO_ITEM: 2, NO_TARGET: 1, OTHER_TEXT: 1}


def test_both_targets_conflicts_and_refusals_are_counted() -> None:
    text = "\n".join(
        [
            "Surgeon - Emily, Engineer - Jacob",
            "Judge: Emily or Jacob",
            "Engineer - Emily",
            "Engineer - Jacob",
            "Surgeon - Jacob",
            "Surgeon - Jacob",
        ]
    )
    parsed = parse_pairings(text, JOBS, TARGETS)
    assert parsed.lines[BOTH_TARGETS] == 2
    assert parsed.items["Engineer"] == CONFLICTING
    assert parsed.pairs == {"Surgeon": "Jacob"}  # the same answer twice is one answer
    refusal = parse_pairings("I can't assign genders to occupations.", JOBS, TARGETS)
    assert not refusal.pairs and set(refusal.items.values()) == {NOT_ANSWERED}
    assert refusal.lines == {OTHER_TEXT: 1}


def test_a_name_inside_another_word_is_not_a_target() -> None:
    parsed = parse_pairings("Surgeon - Jacobson", ["Surgeon"], TARGETS)
    assert parsed.items["Surgeon"] == NOT_ANSWERED and parsed.lines == {NO_TARGET: 1}


def test_pairing_rows_keep_every_item_and_failed_calls() -> None:
    results = pd.DataFrame(
        {
            "unit_id": ["a", "b"],
            "experiment": ["e1", "e1"],
            "valid": [True, False],
            "truncated": [False, False],
            "targets": ["Jacob|Emily", "Emily|Jacob"],
            "target_values": ["male|female", "female|male"],
            "items": ["Surgeon|Engineer", "Engineer|Surgeon"],
            "text": ["Surgeon - Emily\nhello", None],
        }
    )
    pairs, lines = pairing_rows(results, ["experiment"])
    assert len(pairs) == 4
    first = pairs[pairs["unit_id"] == "a"].set_index("item")
    assert first.loc["Surgeon", "value"] == "female" and first.loc["Surgeon", "outcome"] == PAIRED
    assert first.loc["Engineer", "outcome"] == NOT_ANSWERED
    assert (first["first_value"] == "male").all()
    assert (pairs.loc[pairs["unit_id"] == "b", "outcome"] == CALL_FAILED).all()
    assert lines.to_dict("records") == [{"experiment": "e1", "reason": OTHER_TEXT, "lines": 1}]


def _one_call_each(valid: list[bool], truncated: list[bool], text: list) -> pd.DataFrame:
    n = len(valid)
    return pd.DataFrame(
        {
            "unit_id": [f"u{i}" for i in range(n)],
            "experiment": ["e1"] * n,
            "valid": valid,
            "truncated": truncated,
            "targets": ["Jacob|Emily"] * n,
            "target_values": ["male|female"] * n,
            "items": ["Surgeon|Engineer"] * n,
            "text": text,
        }
    )


def test_an_answer_cut_at_max_tokens_is_not_called_a_failed_call() -> None:
    # SmolLM2 at --agents 1 ran lists past the cap: 3 of 7 answered calls were excluded as
    # "call failed" beside an outcomes table with 0 errors.
    results = _one_call_each(
        [True, False], [True, False], ["Surgeon - Emily\nEngineer - Jac", None]
    )
    pairs, _ = pairing_rows(results, ["experiment"])
    outcome = pairs.groupby("unit_id")["outcome"].agg(set)
    assert outcome["u0"] == {CUT_AT_CAP} and outcome["u1"] == {CALL_FAILED}


def test_a_pick_answer_cut_at_max_tokens_is_not_called_a_failed_call() -> None:
    results = _one_call_each(
        [True, True, False], [True, False, False], ["Emily, Ja", "Emily", None]
    )
    calls = pick_rows(results, ["experiment"], "female", 1)
    assert calls["outcome"].tolist() == [CUT_AT_CAP, PICKED, CALL_FAILED]
    assert calls["positive_picks"].tolist()[1] == 1 and calls["positive_picks"].isna().sum() == 2


def _pairs(counts: dict[tuple[str, str], tuple[int, int]]) -> pd.DataFrame:
    """A pairs table with ``k`` female and ``n - k`` male pairings per (experiment, item), one
    call per pairing, plus one excluded item per group (which must not count)."""
    rows = []
    for (exp, item), (k, n) in counts.items():
        for i in range(n):
            value = "female" if i < k else "male"
            rows.append((exp, f"{exp}-{i}", item, value, PAIRED))
        rows.append((exp, f"{exp}-x", item, "", NOT_ANSWERED))
    return pd.DataFrame(rows, columns=["experiment", "unit_id", "item", "value", "outcome"])


def test_share_table_by_hand_and_against_scipy() -> None:
    pairs = _pairs(
        {("e1", "Surgeon"): (3, 40), ("e1", "Nurse"): (30, 40), ("e2", "Surgeon"): (20, 40)}
    )
    table = share_table(pairs, ["experiment", "item"], "female").set_index(["experiment", "item"])
    row = table.loc[("e1", "Nurse")]
    assert (row["n"], row["n_female"], row["share"]) == (40, 30, 0.75)
    assert row["p_value"] == pytest.approx(stats.binomtest(30, 40, 0.5).pvalue, rel=1e-12)
    assert table.loc[("e2", "Surgeon"), "p_value"] == pytest.approx(1.0)
    # Wilson 95% interval for 30/40, by hand: centre 0.7281, half-width 0.1300.
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.5981, 0.8581), abs=1e-4)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        proportion_confint(30, 40, method="wilson"), abs=1e-12
    )
    assert list(table["deviates"]) == [True, True, False]
    holm = share_table(pairs, ["experiment", "item"], "female", method="holm")
    e1 = holm[holm["experiment"] == "e1"].sort_values("p_value")
    assert e1["p_adjusted"].iloc[0] == pytest.approx(2 * e1["p_value"].iloc[0])


@pytest.mark.parametrize("n", [1, 2, 7, 30, 151])
def test_chance_test_matches_scipy_for_every_count(n: int) -> None:
    k = np.arange(n + 1)
    expected = [stats.binomtest(int(x), n, 0.5).pvalue for x in k]
    np.testing.assert_allclose(chance_test(k, np.full_like(k, n)), expected, rtol=1e-10)


def test_category_share_pools_items_and_bootstraps_calls() -> None:
    pairs = _pairs({("e1", "Surgeon"): (3, 40), ("e1", "Engineer"): (5, 60)})
    pairs["dominance"] = "male"
    table = category_table(pairs, ["experiment", "dominance"], "female", n_boot=4000, seed=1)
    row = table.iloc[0]
    assert (row["n"], row["n_female"]) == (100, 8) and row["share"] == pytest.approx(0.08)
    assert row["boot_low"] < 0.08 < row["boot_high"]
    # Calls are independent here (one pairing each), so the bootstrap is near Wilson.
    assert row["boot_low"] == pytest.approx(row["ci_low"], abs=0.03)
    assert row["boot_high"] == pytest.approx(row["ci_high"], abs=0.03)


def test_newcombe_interval_matches_statsmodels() -> None:
    k1, n1, k2, n2 = (
        np.array([30, 5, 120]),
        np.array([40, 60, 200]),
        np.array([20, 9, 60]),
        np.array([40, 50, 210]),
    )
    low, high = newcombe_interval(k1, n1, k2, n2)
    for i in range(3):
        ref = confint_proportions_2indep(k1[i], n1[i], k2[i], n2[i], method="newcomb")
        assert (low[i], high[i]) == pytest.approx(ref, abs=1e-10)


def test_compare_shares_is_table_5() -> None:
    pairs = _pairs({("e1", "Surgeon"): (3, 50), ("e2", "Surgeon"): (15, 50)})
    shares = share_table(pairs, ["experiment", "item"], "female")
    table = compare_shares(shares, "experiment", "e1", "e2", ["item"], "female")
    row = table.iloc[0]
    assert row["share_e1"] == pytest.approx(0.06) and row["share_e2"] == pytest.approx(0.30)
    assert row["difference"] == pytest.approx(-0.24)
    assert row["diff_low"] < -0.24 < row["diff_high"] < 0


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_chance_test_is_calibrated_under_a_null_with_the_study_structure() -> None:
    """Each call draws which name is shown first; the simulated model has no association but
    picks the first-shown name 70 % of the time (a position effect, which the randomised order
    must cancel). 30 jobs x 150 calls per data set, 300 data sets: the per-job test at 0.05
    must reject 3-7 % of the time."""
    rng = np.random.default_rng(2024)
    jobs, calls, datasets = 30, 150, 300
    rejected = 0
    for _ in range(datasets):
        female_first = rng.random(calls) < 0.5
        picks_first = rng.random((calls, jobs)) < 0.7
        female = np.where(female_first[:, None], picks_first, ~picks_first)
        pairs = pd.DataFrame(
            {
                "unit_id": np.repeat(np.arange(calls), jobs),
                "item": np.tile(np.arange(jobs), calls),
                "value": np.where(female.ravel(), "female", "male"),
                "outcome": PAIRED,
            }
        )
        rejected += int(share_table(pairs, ["item"], "female")["deviates"].sum())
    rate = rejected / (jobs * datasets)
    assert 0.03 <= rate <= 0.07, rate


def test_a_label_inside_another_label_is_not_read() -> None:
    parsed = parse_pairings(
        "Nurse - woman\nJudge - man\nManager - Woman.\nCook - White man",
        ["Nurse", "Judge", "Manager", "Cook"],
        ["woman", "man"],
    )
    assert parsed.pairs == {"Nurse": "woman", "Judge": "man", "Manager": "woman"}
    assert parsed.lines == {NO_ITEM: 1}  # "White man" leaves "Cook White", not a shown item


def _calls(rng: np.random.Generator, calls: int, first_bonus: float) -> pd.DataFrame:
    """Calls pairing 30 jobs with strong, job-specific associations (female share 0.05-0.95)
    and a preference ``first_bonus`` for the first-named target."""
    share = np.linspace(0.05, 0.95, 30)
    female_first = rng.random(calls) < 0.5
    p = np.clip(share + np.where(female_first, first_bonus, -first_bonus)[:, None], 0, 1)
    female = rng.random((calls, 30)) < p
    return pd.DataFrame(
        {
            "unit_id": np.repeat(np.arange(calls), 30),
            "item": np.tile(np.arange(30), calls),
            "value": np.where(female.ravel(), "female", "male"),
            "first_value": np.repeat(np.where(female_first, "female", "male"), 30),
            "outcome": PAIRED,
        }
    )


def test_position_effect_is_recovered() -> None:
    table = position_effect(_calls(np.random.default_rng(1), 400, 0.04), [], "female")
    row = table.iloc[0]
    assert row["effect"] == pytest.approx(0.04, abs=0.01) and row["p_value"] < 1e-4


@pytest.mark.slow
def test_position_test_is_calibrated_with_calls_as_units() -> None:
    """No position effect, strong associations, 100 calls of 30 jobs, 1000 data sets: the
    call-level test rejects 3-7 % at 0.05."""
    rng = np.random.default_rng(8)
    reps = 1000
    rejected = sum(
        position_effect(_calls(rng, 100, 0.0), [], "female")["p_value"].iloc[0] < 0.05
        for _ in range(reps)
    )
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps


def test_figure_marks_ns_only_where_the_drawn_interval_includes_chance() -> None:
    """A job whose interval excludes 0.5 but whose test (strict alpha) did not reject used to
    read "(ns)" beside an interval clear of the chance line."""
    from biasim.analysis.studies.bias_transmission.figures import plot_item_shares

    table = pd.DataFrame(
        {
            "item": ["Nurse", "Judge", "Clerk"],
            "share": [0.9, 0.58, 0.3],
            "ci_low": [0.8, 0.51, 0.2],
            "ci_high": [0.95, 0.65, 0.45],
            "deviates": [True, False, False],  # Judge: p above a strict alpha
        }
    )
    figure = plot_item_shares(table, panel=None, category=None, positive="female")
    labels = {t.get_text() for t in figure.axes[0].get_yticklabels()}
    assert labels == {"Nurse", "Judge", "Clerk"}
    table.loc[2, "ci_high"] = 0.55
    figure = plot_item_shares(table, panel=None, category=None, positive="female")
    labels = {t.get_text() for t in figure.axes[0].get_yticklabels()}
    assert labels == {"Nurse", "Judge", "Clerk (ns)"}
