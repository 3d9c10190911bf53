"""letter_evaluation's relative hires (seed 000, Exp. 3-4): the share's test has a pair's
readings (both orders, every reader) as one unit, states that unit and the pairs that enter,
and power reads the same; under a null where letters differ in quality (sd 3 on the logit) it
rejects 3-7 % at 0.05, where the binomial on answers rejected 8 % (both orders) and 30 %
(3 readers x 2 orders)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.studies.bias_transmission.association import consistent_pair_test
from biasim.simulator.common.results import summary_of
from biasim.simulator.kinds.base import Section
from biasim.simulator.kinds.letter_evaluation import (
    LetterEvaluationKind,
    LetterEvaluationResult,
    LetterEvaluationSpec,
    _relative,
)

SPEC = LetterEvaluationSpec(
    kind="letter_evaluation",
    name="letters",
    by="experiment",
    relative={"stage": "relative", "field": "hire"},
    cluster="job_title",
    compared={"exp4": {"share_of": "female", "reference": "female"}},
    pair=["letters"],
)
CTX = SimpleNamespace(name="letters", study=SimpleNamespace(seed=0))


def _readings(
    rng: np.random.Generator, *, jobs: int, pairs: int, readers: int, sd: float
) -> pd.DataFrame:
    """Relative-stage rows under no name effect: per job ``pairs`` letter pairs whose quality
    differs (the woman's minus the man's, normal with ``sd`` on the logit), each shown in both
    orders to ``readers`` readers who favour Applicant 1 (+0.4 on the logit)."""
    n = jobs * pairs
    quality = np.repeat(rng.normal(0, sd, size=n), 2 * readers)
    woman_first = np.tile(np.repeat([True, False], readers), n)
    logit = quality + np.where(woman_first, 0.4, -0.4)
    woman_hired = rng.random(quality.size) < 1 / (1 + np.exp(-logit))
    hire = np.where(woman_hired == woman_first, "1", "2")
    pair = np.repeat(np.arange(n), 2 * readers)
    return pd.DataFrame(
        {
            "stage": "relative",
            "valid": True,
            "hire": hire,
            "experiment": "exp4",
            "job_title": (pair // pairs).astype(str),
            "letters": (pair % pairs).astype(str),
            "first_is": np.where(woman_first, "female", "male"),
            "second_is": np.where(woman_first, "male", "female"),
        }
    )


def _summary(rows: pd.DataFrame) -> dict:
    result = LetterEvaluationResult(alpha=SPEC.alpha, by=SPEC.by, cluster=SPEC.cluster)
    _relative(rows, SPEC, CTX, Section(summary={}), result)
    return summary_of(result)


def test_the_test_states_pairs_and_power_reads_them() -> None:
    rows = _readings(np.random.default_rng(1), jobs=4, pairs=5, readers=3, sd=3.0)
    summary = _summary(rows)
    row = summary["relative"][0]
    assert (row["unit"], row["pairs"], row["n"]) == ("pair", 20, 120)
    assert 0 < row["n_units"] <= 20  # the pairs that lean, never the 120 answers
    tested = LetterEvaluationKind().power_tests(summary)["exp4: female hired (vs 0.5)"]
    assert (tested.unit, tested.n_units, tested.p) == ("pair", row["n_units"], row["p_value"])
    jobs = pd.DataFrame(summary["relative_by_job"])
    assert (jobs["unit"] == "pair").all() and jobs["pairs"].sum() == 20
    assert (jobs["n_units"] <= jobs["pairs"]).all()


def test_readings_of_one_pair_count_once() -> None:
    # One pair, 3 readers per order, the woman hired every time: 6 answers, 1 unit, p = 1.
    rows = _readings(np.random.default_rng(2), jobs=1, pairs=1, readers=3, sd=0.0)
    rows["hire"] = np.where(rows["first_is"] == "female", "1", "2")
    row = _summary(rows)["relative"][0]
    assert (row["share"], row["n"], row["n_units"]) == (1.0, 6, 1)
    assert row["p_value"] == pytest.approx(1.0)  # a binomial on 6 answers gives 0.031


def _picks(rows: pd.DataFrame) -> pd.DataFrame:
    """The readings as the pair test reads them: the pair, the hired letter's group and where
    it was shown."""
    first = rows["hire"] == "1"
    return pd.DataFrame(
        {
            "experiment": rows["experiment"],
            "pair": rows["job_title"] + "/" + rows["letters"],
            "value": np.where(first, rows["first_is"], rows["second_is"]),
            "position": np.where(first, 1, 2),
        }
    )


@pytest.mark.parametrize("readers", [1, 3])
def test_hire_share_test_is_calibrated_when_letters_differ(readers: int) -> None:
    """400 null data sets of 30 jobs x 2 pairs, quality sd 3, a position effect; both orders
    shown by 1 or 3 readers each: the test rejects 3-7 % at 0.05 (the binomial on answers
    rejected 8 % and 30 %)."""
    rng = np.random.default_rng(20261129 + readers)
    reps = 400
    rejected = sum(
        consistent_pair_test(
            _picks(_readings(rng, jobs=30, pairs=2, readers=readers, sd=3.0)),
            ["experiment"],
            "female",
        )["sign_p"].iloc[0]
        < 0.05
        for _ in range(reps)
    )
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps
