"""The counterfactual_text kind (issue 47 items 2-3): its metrics come from the analysis
functions, its tests name the set as their unit, and under a swap-invariant writer each test it
hands to `biasim power` rejects 3-7 % of simulated result tables shaped like the stage's."""

from __future__ import annotations

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
    stems give small integer counts: their quantile and parity tests tie so often that they
    reject less than 5 %, conservative, as docs/analysis/counterfactual_text.md says.) About a
    minute of CPU."""
    from biasim.analysis.text import similarity
    from biasim.simulator.kinds.letters import ScorerChoice

    # Memoized: the Porter stemmer of ROUGE-L and BLEU's tokenizer are the loop's cost.
    for measure in ("rouge_l", "bleu"):
        monkeypatch.setitem(
            similarity.PAIR_MEASURES, measure, cache(similarity.PAIR_MEASURES[measure])
        )
    study, spec = _kind_and_spec()
    spec = spec.model_copy(
        update={"n_permutations": 199, "scorers": {"sentiment": ScorerChoice(scorer="vader")}}
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
    # relabellings tie so often that it rejects below 5 % (conservative; 2.5 % here). Every
    # other test's level holds.
    weak = {n for n in rates if "weak_parity" in n}
    assert all(0.03 <= r <= 0.07 for n, r in rates.items() if n not in weak), rates
    assert all(r <= 0.07 for n, r in rates.items() if n in weak), rates
