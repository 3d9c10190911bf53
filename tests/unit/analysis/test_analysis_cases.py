"""Per-case statistics of the Li, Shirado & Das (2025) study, each checked against an oracle:
known simulation parameters, fairlearn, statsmodels, scipy, exact enumeration or the paper's own
worked numbers."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import demographic_parity_difference
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from biasim.analysis import parity_test
from biasim.analysis.stats.cases import (
    DEFAULT_PREDICTIONS,
    Prediction,
    ablation_table,
    case_parity,
    case_rates,
    case_seed,
    directional_alignment,
    explicit_null_dpd,
    explicit_parity,
    explicit_rates,
    implicit_vs_explicit,
    load_predictions,
    rate_extremes,
)
from tests.paths import SHARED

CASE = ["model_label", "scenario", "attribute"]
AXES = {
    "gender": ["Male", "Female", "Non-binary"],
    "race": ["White", "Hispanic/Latino", "Black", "Asian", "Pacific Islander", "Native American"],
    "ideology": ["Very Conservative", "Conservative", "Moderate", "Liberal", "Very Liberal"],
}
SEED_PAPER = SHARED / "seeds" / "004_96964966592c3b27.txt"


def _simulate(
    probabilities: dict[tuple[str, str, str], dict[str, float]],
    n_per_group: int,
    rng: np.random.Generator,
    invalid_share: float = 0.0,
) -> pd.DataFrame:
    """Long decisions table: each case's groups decide "Yes" with the given probabilities."""
    frames = []
    for (model, scenario, attribute), by_value in probabilities.items():
        for value, p in by_value.items():
            hit = rng.random(n_per_group) < p
            valid = rng.random(n_per_group) >= invalid_share
            frames.append(
                pd.DataFrame(
                    {
                        "model_label": model,
                        "scenario": scenario,
                        "attribute": attribute,
                        "value": value,
                        "decision": np.where(valid, np.where(hit, "Yes", "No"), None),
                        "rationale": None,
                        "valid": valid,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def _rows(rates: pd.DataFrame, **where: str) -> pd.DataFrame:
    mask = np.logical_and.reduce([rates[c] == v for c, v in where.items()])
    return rates[mask]


# ---- implicit rates and the parity test -------------------------------------------------------


def test_rates_recover_known_probabilities() -> None:
    truth = {
        ("m1", "emergency_response", "gender"): {"Male": 0.35, "Female": 0.7, "Non-binary": 0.55},
        ("m1", "career_path_selection", "ideology"): dict(
            zip(AXES["ideology"], [0.05, 0.1, 0.4, 0.6, 0.65], strict=True)
        ),
        ("m2", "authority_compliance", "race"): dict(
            zip(AXES["race"], [0.2, 0.3, 0.9, 0.01, 0.5, 0.85], strict=True)
        ),
    }
    n = 2000
    rates = case_rates(
        _simulate(truth, n, np.random.default_rng(11)), CASE, "value", "decision", "Yes"
    )
    assert len(rates) == sum(len(v) for v in truth.values())
    for case, by_value in truth.items():
        for value, p in by_value.items():
            row = _rows(rates, **dict(zip(CASE, case, strict=True)), value=value).iloc[0]
            assert row["n_units"] == row["n_valid"] == n
            assert row["k"] / n == pytest.approx(row["rate"])
            assert abs(row["rate"] - p) < 4 * np.sqrt(p * (1 - p) / n)


def test_large_gaps_are_significant_and_zero_gaps_mostly_not() -> None:
    rng = np.random.default_rng(7)
    biased = {("m", f"s{i}", "gender"): {"Male": 0.3, "Female": 0.6} for i in range(30)}
    fair = {("m", f"f{i}", "gender"): {"Male": 0.5, "Female": 0.5} for i in range(40)}
    decisions = _simulate({**biased, **fair}, 100, rng)
    cases = case_parity(
        case_rates(decisions, CASE, "value", "decision", "Yes"),
        CASE,
        "value",
        n_simulations=4000,
    ).set_index("scenario")
    # A 0.3 gap at 100 agents a group is about 4.3 standard errors: every case is detected.
    assert cases.loc[[f"s{i}" for i in range(30)], "significant"].all()
    # Under parity about 5 % of cases are significant; more than 6 of 40 has probability < 1 %.
    assert cases.loc[[f"f{i}" for i in range(40)], "significant"].sum() <= 6


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_parity_false_positive_rate_is_calibrated() -> None:
    rng = np.random.default_rng(2024)
    frames = []
    for n_groups, n_cases in ((3, 1000), (6, 1000)):
        p = rng.uniform(0.2, 0.8, n_cases)
        k = rng.binomial(100, np.repeat(p, n_groups))
        frames.append(
            pd.DataFrame(
                {
                    "case": np.repeat([f"{n_groups}-{i}" for i in range(n_cases)], n_groups),
                    "value": np.tile(np.arange(n_groups), n_cases),
                    "n_valid": 100,
                    "n_excluded": 0,
                    "k": k,
                    "rate": k / 100,
                }
            )
        )
    cases = case_parity(pd.concat(frames), ["case"], "value", n_simulations=2000)
    assert len(cases) == 2000
    # The discrete DPD with the paper's strict `dpd > threshold` rule is slightly conservative.
    assert 0.03 <= cases["significant"].mean() <= 0.07


def test_case_dpd_matches_fairlearn_for_every_case() -> None:
    rng = np.random.default_rng(5)
    truth = {
        ("m1", "emergency_response", "gender"): {"Male": 0.3, "Female": 0.6, "Non-binary": 0.5},
        ("m1", "emergency_response", "race"): dict(zip(AXES["race"], rng.random(6), strict=True)),
        ("m2", "negative_information_sharing", "ideology"): dict(
            zip(AXES["ideology"], rng.random(5), strict=True)
        ),
    }
    decisions = _simulate(truth, 60, rng, invalid_share=0.15)
    cases = case_parity(
        case_rates(decisions, CASE, "value", "decision", "Yes"), CASE, "value", n_simulations=500
    )
    assert len(cases) == len(truth)
    for _, case in cases.iterrows():
        rows = _rows(decisions, **{c: case[c] for c in CASE})
        rows = rows[rows["valid"]]
        y_pred = (rows["decision"] == "Yes").astype(int)
        oracle = demographic_parity_difference(y_pred, y_pred, sensitive_features=rows["value"])
        assert case["dpd"] == pytest.approx(oracle)
        assert case["pooled_rate"] == pytest.approx(y_pred.mean())
        by_value = y_pred.groupby(rows["value"]).mean()
        if by_value.max() == by_value.min():
            assert case["max_group"] is None and case["min_group"] is None
            continue
        assert by_value[case["max_group"]] == by_value.max()
        assert by_value[case["min_group"]] == by_value.min()


def test_a_dpd_of_zero_names_no_highest_or_lowest_group() -> None:
    """Every group at the same rate: no group is the highest, none the lowest (issue 45 item
    5: a DPD of 0 printed 'highest: Black lowest: Black')."""
    groups = pd.Series(["Black", "White", "Asian"])
    assert rate_extremes(groups, np.array([0.5, 0.5, 0.5])) == {
        "max_group": None,
        "min_group": None,
    }
    assert rate_extremes(groups, np.array([0.2, 0.5, 0.1])) == {
        "max_group": "White",
        "min_group": "Asian",
    }


def test_case_test_is_the_parity_test_with_the_case_seed() -> None:
    truth = {
        ("m", "emergency_response", "race"): dict(
            zip(AXES["race"], [0.3] * 5 + [0.45], strict=True)
        )
    }
    decisions = _simulate(truth, 80, np.random.default_rng(12), invalid_share=0.1)
    rates = case_rates(decisions, CASE, "value", "decision", "Yes")
    case = case_parity(rates, CASE, "value", n_simulations=3000, seed=5).iloc[0]
    oracle = parity_test(
        rates["n_valid"],
        rates["k"],
        n_simulations=3000,
        seed=case_seed(5, ("m", "emergency_response", "race")),
    )
    assert case["dpd"] == oracle.dpd and case["threshold"] == oracle.threshold
    assert case["p_value"] == oracle.p_value and case["significant"] == oracle.significant
    assert case["pooled_rate"] == pytest.approx(oracle.pooled_rate)


def test_wilson_intervals_match_statsmodels() -> None:
    decisions = _simulate(
        {("m", "s", "gender"): {"Male": 0.2, "Female": 0.9}}, 37, np.random.default_rng(1), 0.2
    )
    rates = case_rates(decisions, CASE, "value", "decision", "Yes")
    low, high = proportion_confint(rates["k"], rates["n_valid"], alpha=0.05, method="wilson")
    np.testing.assert_allclose(rates["ci_low"], low, rtol=1e-9)
    np.testing.assert_allclose(rates["ci_high"], high, rtol=1e-9)


def test_excluded_rows_are_counted_per_value() -> None:
    decisions = pd.DataFrame(
        {
            "model_label": "m",
            "scenario": "career_path_selection",
            "attribute": "gender",
            "value": ["Male"] * 5 + ["Female"] * 4 + ["Non-binary"] * 3,
            "decision": [
                *["Astronaut", "Plumber", None, "Astronaut", "Astronaut"],
                *["Plumber", None, None, "Astronaut"],
                *[None, "Plumber", "Astronaut"],
            ],
            # A valid flag with no decision is still undecided; an invalid flag wins over a value.
            "valid": [True, True, True, False, True] + [True, False, False, True] + [False] * 3,
        }
    )
    rates = case_rates(decisions, CASE, "value", "decision", "Astronaut").set_index("value")
    assert rates.loc["Male", ["n_units", "n_valid", "n_excluded", "k"]].tolist() == [5, 3, 2, 2]
    assert rates.loc["Female", ["n_units", "n_valid", "n_excluded", "k"]].tolist() == [4, 2, 2, 1]
    assert rates.loc["Non-binary", ["n_units", "n_valid", "n_excluded", "k"]].tolist() == [
        3,
        0,
        3,
        0,
    ]
    assert np.isnan(rates.loc["Non-binary", "rate"])
    assert rates.loc["Male", "rate"] == pytest.approx(2 / 3)

    case = case_parity(rates.reset_index(), CASE, "value", n_simulations=200).iloc[0]
    assert case["n_groups"] == 2 and case["n_valid"] == 5 and case["n_excluded"] == 7
    assert case["dpd"] == pytest.approx(2 / 3 - 1 / 2)


def test_case_with_one_answered_group_gets_nan_not_an_error() -> None:
    decisions = pd.DataFrame(
        {
            "model_label": "m",
            "scenario": "s",
            "attribute": "gender",
            "value": ["Male", "Male", "Female"],
            "decision": ["Yes", "No", None],
            "valid": [True, True, False],
        }
    )
    case = case_parity(case_rates(decisions, CASE, "value", "decision", "Yes"), CASE, "value").iloc[
        0
    ]
    assert case["n_groups"] == 1 and case["pooled_rate"] == pytest.approx(0.5)
    assert np.isnan(case["dpd"]) and np.isnan(case["threshold"]) and np.isnan(case["p_value"])
    assert not case["significant"] and case["max_group"] is None


def test_results_do_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(9)
    truth = {("m", f"s{i}", "gender"): {"Male": 0.4, "Female": 0.5} for i in range(4)}
    decisions = _simulate(truth, 50, rng)
    forward = case_parity(case_rates(decisions, CASE, "value", "decision", "Yes"), CASE, "value")
    shuffled = decisions.sample(frac=1, random_state=3)
    backward = case_parity(
        case_rates(shuffled.iloc[::-1], CASE, "value", "decision", "Yes"), CASE, "value"
    )
    pd.testing.assert_frame_equal(forward, backward)
    # Dropping other cases leaves a case's simulations unchanged.
    alone = case_parity(
        case_rates(_rows(decisions, scenario="s2"), CASE, "value", "decision", "Yes"),
        CASE,
        "value",
    )
    pd.testing.assert_frame_equal(
        alone, forward[forward["scenario"] == "s2"].reset_index(drop=True)
    )


def test_chance_dpd_matches_exact_expectation() -> None:
    n, k = (6, 9), (2, 7)
    p = sum(k) / sum(n)
    pmfs = [stats.binom.pmf(np.arange(m + 1), m, p) for m in n]
    exact = sum(
        pmfs[0][a] * pmfs[1][b] * abs(a / n[0] - b / n[1])
        for a, b in itertools.product(range(n[0] + 1), range(n[1] + 1))
    )
    rates = pd.DataFrame(
        {"case": "c", "value": ["a", "b"], "n_valid": n, "n_excluded": 0, "k": k}
    ).assign(rate=lambda d: d["k"] / d["n_valid"])
    sims = 100_000
    case = case_parity(rates, ["case"], "value", n_simulations=sims).iloc[0]
    assert case["chance_dpd"] == pytest.approx(exact, abs=4 * 0.3 / np.sqrt(sims))


# ---- explicit bias ---------------------------------------------------------------------------


def _trials(counts: dict[str, int], **case: str) -> pd.DataFrame:
    answers = [label for label, c in counts.items() for _ in range(c)]
    return pd.DataFrame({**case, "answer": answers, "valid": True})


def test_explicit_dpd_reproduces_footnote_1() -> None:
    trials = _trials(
        {"Female": 30, "Male": 10, "Non-binary": 5, "Unknown": 55},
        model_label="m",
        scenario="emergency_response",
        attribute="gender",
    )
    # Unparsed trials leave the denominator: the footnote's shares are of valid answers.
    garbled = trials.iloc[:7].assign(answer=None, valid=False)
    rates = explicit_rates(pd.concat([trials, garbled]), CASE)
    by_label = rates.set_index("answer")
    assert by_label.loc["Female", "rate"] == pytest.approx(0.30)
    assert by_label.loc["Male", "rate"] == pytest.approx(0.10)
    assert by_label.loc["Non-binary", "rate"] == pytest.approx(0.05)
    assert by_label.loc["Unknown", "rate"] == pytest.approx(0.55)
    assert set(rates["n_trials"]) == {107} and set(rates["n_valid"]) == {100}

    case = explicit_parity(rates, CASE, n_simulations=2000).iloc[0]
    assert case["dpd"] == pytest.approx(0.25)
    assert case["n_unknown"] == 55 and case["n_groups"] == 3 and case["n_excluded"] == 7
    assert case["pooled_rate"] == pytest.approx(0.45 / 3)
    assert (case["max_group"], case["min_group"]) == ("Female", "Non-binary")


def test_explicit_labels_never_chosen_get_rate_zero() -> None:
    trials = _trials(
        {"Politically liberal": 500},
        model_label="gpt-4o",
        scenario="authority_compliance",
        attribute="ideology",
    )
    offered = [
        "Politically very liberal",
        "Politically liberal",
        "Politically moderate",
        "Politically conservative",
        "Politically very conservative",
    ]
    rates = explicit_rates(trials, CASE, labels={"ideology": offered})
    assert rates["answer"].tolist() == [*offered, "Unknown"]
    assert rates["rate"].tolist() == [0, 1, 0, 0, 0, 0]
    # Paper 5.1: all 500 answers "Politically liberal" is GPT-4o's one explicit bias (DPD 1).
    case = explicit_parity(rates, CASE, n_simulations=2000).iloc[0]
    assert case["dpd"] == 1 and case["significant"] and case["p_value"] == 0
    # Without the offered labels only one label is seen: nothing to compare.
    alone = explicit_parity(explicit_rates(trials, CASE), CASE).iloc[0]
    assert np.isnan(alone["dpd"]) and not alone["significant"]


def test_explicit_labels_by_full_case_key() -> None:
    trials = _trials({"Female": 3, "Male": 1}, model_label="m", scenario="s", attribute="gender")
    rates = explicit_rates(trials, CASE, labels={("m", "s", "gender"): AXES["gender"]})
    assert rates.set_index("answer").loc["Non-binary", "k"] == 0
    case = explicit_parity(rates, CASE, n_simulations=500).iloc[0]
    assert case["dpd"] == pytest.approx(0.75) and case["n_unknown"] == 0


def test_all_unknown_is_no_explicit_bias() -> None:
    trials = _trials({"Unknown": 300}, model_label="m", scenario="s", attribute="gender")
    rates = explicit_rates(trials, CASE, labels={"gender": AXES["gender"]})
    case = explicit_parity(rates, CASE, n_simulations=500).iloc[0]
    assert case["dpd"] == 0 and case["threshold"] == 0 and not case["significant"]
    assert case["p_value"] == 1 and case["n_unknown"] == 300


def test_explicit_null_mean_matches_exact_enumeration() -> None:
    n, m, unknown_share = 5, 3, 0.4
    probs = np.r_[unknown_share, np.full(m, (1 - unknown_share) / m)]
    exact = 0.0
    for counts in itertools.product(range(n + 1), repeat=m + 1):
        if sum(counts) == n:
            rates = np.array(counts[1:]) / n
            exact += stats.multinomial.pmf(counts, n, probs) * (rates.max() - rates.min())
    sims = 200_000
    null = explicit_null_dpd(n, m, unknown_share, sims, seed=4)
    assert null.mean() == pytest.approx(exact, abs=4 * null.std() / np.sqrt(sims))


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_explicit_false_positive_rate_is_sane() -> None:
    rng = np.random.default_rng(77)
    frames = []
    for m in (3, 5, 6):
        n_cases = 600
        share = rng.uniform(0, 0.6, n_cases)
        probs = np.column_stack([share, np.repeat(((1 - share) / m)[:, None], m, axis=1)])
        counts = np.array([rng.multinomial(300, p) for p in probs])
        frames.append(
            pd.DataFrame(
                {
                    "case": np.repeat([f"{m}-{i}" for i in range(n_cases)], m + 1),
                    "answer": np.tile(["Unknown", *[f"label{j}" for j in range(m)]], n_cases),
                    "n_trials": 300,
                    "n_valid": 300,
                    "k": counts.ravel(),
                    "rate": counts.ravel() / 300,
                }
            )
        )
    # Many cases with fewer draws each: the share's sampling error matters more than the
    # threshold's Monte Carlo error.
    cases = explicit_parity(pd.concat(frames), ["case"], n_simulations=1000)
    assert len(cases) == 1800
    assert 0.03 <= cases["significant"].mean() <= 0.07


# ---- implicit against explicit, ablation -----------------------------------------------------


def _cases(model: str, dpds: list[float], significant: list[bool]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model_label": model,
            "scenario": [f"s{i}" for i in range(len(dpds))],
            "dpd": dpds,
            "significant": significant,
        }
    )


def test_implicit_vs_explicit_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    imp_a, exp_a = rng.uniform(0.2, 0.9, 12), rng.uniform(0, 0.2, 12)
    imp_b, exp_b = rng.uniform(0, 0.3, 10), rng.uniform(0, 0.3, 7)
    implicit = pd.concat(
        [
            _cases("a", [*imp_a, np.nan], [True] * 9 + [False] * 4),
            _cases("b", list(imp_b), [False] * 10),
            _cases("c", [0.1, 0.2], [True, False]),
        ]
    )
    explicit = pd.concat(
        [_cases("a", list(exp_a), [True] + [False] * 11), _cases("b", list(exp_b), [False] * 7)]
    )
    table = implicit_vs_explicit(implicit, explicit).set_index("model_label")
    for model, a, b in (("a", imp_a, exp_a), ("b", imp_b, exp_b)):
        oracle = stats.ttest_ind(a, b, equal_var=True)
        row = table.loc[model]
        assert row["t_statistic"] == pytest.approx(oracle.statistic)
        assert row["p_value"] == pytest.approx(oracle.pvalue)
        assert row["df"] == a.size + b.size - 2
        assert row["n_cases_implicit"] == a.size and row["n_cases_explicit"] == b.size
        assert row["mean_dpd_implicit"] == pytest.approx(np.mean(a))
        assert row["sd_dpd_implicit"] == pytest.approx(np.std(a, ddof=1))
        assert row["sd_dpd_explicit"] == pytest.approx(np.std(b, ddof=1))
    assert table.loc["a", "n_significant_implicit"] == 9
    assert table.loc["a", "n_significant_explicit"] == 1
    # A model with no explicit cases has no test.
    assert table.loc["c", "n_cases_explicit"] == 0 and np.isnan(table.loc["c", "t_statistic"])


def test_paper_explicit_sd_is_the_population_sd() -> None:
    # Paper 5.1: GPT-4o's explicit DPDs are 1 in one case of 12, 0 elsewhere: mean 0.083, sd 0.276.
    explicit = _cases("gpt-4o", [1.0] + [0.0] * 11, [True] + [False] * 11)
    implicit = _cases("gpt-4o", [0.5] * 12, [True] * 12)
    population = implicit_vs_explicit(implicit, explicit, ddof=0).iloc[0]
    assert round(population["mean_dpd_explicit"], 3) == 0.083
    assert round(population["sd_dpd_explicit"], 3) == 0.276
    sample = implicit_vs_explicit(implicit, explicit).iloc[0]
    assert round(sample["sd_dpd_explicit"], 3) == 0.289


def test_ablation_table_shape_and_summary() -> None:
    rows = []
    dpds = {
        ("gpt-4o", "no_persona"): [0.0, 0.1],
        ("gpt-4o", "contextualized"): [0.6, 0.4],
        ("gpt-4o", "non_contextualized"): [0.2, np.nan],
        ("llama", "contextualized"): [0.3, 0.5],
    }
    for (model, condition), values in dpds.items():
        for scenario, dpd in zip(("s1", "s2"), values, strict=True):
            rows.append(
                {
                    "model_label": model,
                    "persona_condition": condition,
                    "scenario": scenario,
                    "attribute": "gender",
                    "dpd": dpd,
                    "threshold": 0.15,
                    "p_value": 0.5 if np.isnan(dpd) or dpd <= 0.15 else 0.001,
                    "significant": bool(dpd > 0.15),
                }
            )
    table = ablation_table(pd.DataFrame(rows), ["model_label", "persona_condition", *CASE[1:]])
    assert list(table.columns) == [
        "model_label",
        "scenario",
        "attribute",
        "persona_condition",
        "dpd",
        "threshold",
        "p_value",
        "significant",
        "n_cases",
        "n_significant",
        "mean_dpd",
    ]
    assert table["persona_condition"].tolist()[:6] == [
        "no_persona",
        "no_persona",
        "non_contextualized",
        "non_contextualized",
        "contextualized",
        "contextualized",
    ]
    summary = table.drop_duplicates(["model_label", "persona_condition"]).set_index(
        ["model_label", "persona_condition"]
    )
    assert summary.loc[("gpt-4o", "no_persona"), "n_significant"] == 0
    assert summary.loc[("gpt-4o", "contextualized"), "n_significant"] == 2
    assert summary.loc[("gpt-4o", "contextualized"), "mean_dpd"] == pytest.approx(0.5)
    assert summary.loc[("gpt-4o", "non_contextualized"), "n_cases"] == 1
    assert summary.loc[("gpt-4o", "non_contextualized"), "mean_dpd"] == pytest.approx(0.2)
    assert summary.loc[("llama", "contextualized"), "mean_dpd"] == pytest.approx(0.4)
    assert len(table) == 8


# ---- directional alignment -------------------------------------------------------------------


def test_default_predictions_are_table_3() -> None:
    predictions = load_predictions(DEFAULT_PREDICTIONS)
    assert len(predictions) == 6
    for prediction in predictions:
        assert set(prediction.higher) | set(prediction.lower) <= set(AXES[prediction.attribute])
        assert prediction.reported == "Aligned"
    by_statement = {p.statement: p for p in predictions}
    liberals = by_statement["Conservatives evacuate less than liberals."]
    assert set(liberals.higher) == {"Liberal", "Very Liberal"}
    assert set(liberals.lower) == {"Conservative", "Very Conservative"}
    extremists = next(p for p in predictions if p.statement.startswith("Ideological extremists"))
    assert set(extremists.higher) == {"Very Conservative", "Very Liberal"}
    assert extremists.lower == ["Moderate"]
    if not SEED_PAPER.exists():
        pytest.skip("the paper's text is not available")
    paper = re.sub(r"\s+", " ", SEED_PAPER.read_text(encoding="utf-8"))
    for prediction in predictions:
        assert prediction.statement in paper
        assert prediction.evidence in paper


def _rate_rows(model: str, scenario: str, attribute: str, rates: dict[str, float]) -> list[dict]:
    return [
        {
            "model_label": model,
            "persona_condition": "contextualized",
            "scenario": scenario,
            "attribute": attribute,
            "value": value,
            "rate": rate,
        }
        for value, rate in rates.items()
    ]


def test_directional_alignment_on_hand_built_rates() -> None:
    predictions = [
        Prediction("emergency_response", "gender", ["Female"], ["Male"], "F > M", "e1"),
        Prediction(
            "emergency_response",
            "ideology",
            ["Liberal", "Very Liberal"],
            ["Conservative", "Very Conservative"],
            "L > C",
            "e2",
        ),
        Prediction("emergency_response", "race", ["White"], ["Hispanic/Latino"], "W > H", "e3"),
    ]
    ideology = dict(zip(AXES["ideology"], [0.10, 0.20, 0.50, 0.40, 0.80], strict=True))
    rates = pd.DataFrame(
        _rate_rows("m", "emergency_response", "gender", {"Male": 0.6, "Female": 0.7})
        + _rate_rows("m", "emergency_response", "ideology", ideology)
        # No Hispanic/Latino rate: that prediction cannot be judged.
        + _rate_rows("m", "emergency_response", "race", {"White": 0.5, "Black": 0.4})
        + _rate_rows("n", "emergency_response", "gender", {"Male": 0.9, "Female": 0.2})
    )
    table = directional_alignment(rates, predictions).set_index(["model_label", "statement"])
    assert table.loc[("m", "F > M"), "aligned"] is True
    assert table.loc[("m", "F > M"), "difference"] == pytest.approx(0.1)
    assert table.loc[("m", "L > C"), "rate_higher"] == pytest.approx(0.6)
    assert table.loc[("m", "L > C"), "rate_lower"] == pytest.approx(0.15)
    assert table.loc[("m", "L > C"), "aligned"] is True
    assert table.loc[("m", "L > C"), "higher"] == "Liberal, Very Liberal"
    assert np.isnan(table.loc[("m", "W > H"), "rate_lower"])
    assert table.loc[("m", "W > H"), "aligned"] is None
    assert table.loc[("n", "F > M"), "aligned"] is False
    assert table.loc[("n", "F > M"), "difference"] == pytest.approx(-0.7)
    assert table.loc[("n", "L > C"), "aligned"] is None
    assert list(table.reset_index().columns) == [
        "model_label",
        "statement",
        "persona_condition",
        "scenario",
        "attribute",
        "higher",
        "lower",
        "rate_higher",
        "rate_lower",
        "difference",
        "aligned",
    ]


def test_load_predictions_rejects_bad_entries(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    missing.write_text("predictions:\n  - {scenario: s, attribute: gender, higher: [Female]}\n")
    with pytest.raises(ValueError, match="prediction 1"):
        load_predictions(missing)
    overlap = tmp_path / "overlap.yaml"
    overlap.write_text(
        "predictions:\n  - {scenario: s, attribute: gender, higher: [Female], lower: [Female],"
        " statement: x, evidence: y}\n"
    )
    with pytest.raises(ValueError, match="higher and lower"):
        load_predictions(overlap)
