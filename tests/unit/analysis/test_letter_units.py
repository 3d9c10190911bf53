"""Letters whose writers repeat (issue 27): the lexicon and style tests relabel writers, not
letters. Checked against exact enumeration of unit relabellings, against the paired handling
(a crossed unit holding one letter per group is a pair), and calibrated under a null where 5
writers per gender each write 12 letters with their own habits."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.clusters import CROSSED, NESTED, unit_layout
from biasim.analysis.text.letter_style import style_tests
from biasim.analysis.text.lexicon import lexicon_odds_ratios, smoothed_odds_ratio

WRITERS, LETTERS, TOKENS = 5, 12, 40


def _letters(rng: np.random.Generator, writers: int = WRITERS, letters: int = LETTERS):
    """Letters of ``writers`` writers per gender, ``letters`` each, no gender effect: each
    writer has its own rate of the stem `lead` (logit sd 1) and its own mean share (sd 0.15)."""
    rows = []
    for gender in ("m", "f"):
        for w in range(writers):
            rate = 1 / (1 + np.exp(-rng.normal(np.log(0.1 / 0.9), 1.0)))
            mean_share = rng.normal(0.5, 0.15)
            for _ in range(letters):
                k = rng.binomial(TOKENS, rate)
                rows.append(
                    {
                        "text": " ".join(["leads"] * k + ["word"] * (TOKENS - k)),
                        "gender": gender,
                        "writer": f"{gender}{w}",
                        "share": float(np.clip(mean_share + rng.normal(0, 0.1), 0, 1)),
                    }
                )
    return pd.DataFrame(rows)


def _exact_unit_p(frame: pd.DataFrame, statistic) -> float:
    """Share of every relabelling of whole writers (3 per gender kept) at least as extreme."""
    writers = sorted(frame["writer"].unique())
    observed = statistic(frame)
    draws = []
    for chosen in combinations(writers, len(writers) // 2):
        relabelled = frame.assign(gender=np.where(frame["writer"].isin(chosen), "m", "f"))
        draws.append(statistic(relabelled))
    return float(np.mean(np.asarray(draws) >= observed - 1e-12))


def test_units_relabelled_whole_as_exact_enumeration() -> None:
    frame = _letters(np.random.default_rng(4), writers=3, letters=4)

    def abs_log_or(f: pd.DataFrame) -> float:
        hits = f["text"].str.count("leads").groupby(f["gender"]).sum()
        tokens = f.groupby("gender").size() * TOKENS
        ratio = smoothed_odds_ratio(hits["m"], tokens["m"], hits["f"], tokens["f"])
        return abs(float(np.log(ratio)))

    def mean_gap(f: pd.DataFrame) -> float:
        means = f.groupby("gender")["share"].mean()
        return float(means["m"] - means["f"])

    row = lexicon_odds_ratios(
        frame,
        "text",
        "gender",
        {"lead": ["lead"]},
        ("m", "f"),
        n_permutations=20_000,
        unit_col="writer",
    ).iloc[0]
    assert (row["unit"], row["n_units"]) == ("writer", 6)
    assert row["p_permutation"] == pytest.approx(_exact_unit_p(frame, abs_log_or), abs=0.01)
    # 20 labellings, the observed one and its mirror: no p below 0.1 is reachable.
    assert row["unit_min_p"] == pytest.approx(2 / 20)
    out = style_tests(
        frame, "share", "gender", ("m", "f"), unit_col="writer", n_permutations=20_000
    )
    assert (out["unit"], out["n_units"]) == ("writer", 6)
    assert out["p_unit"] == pytest.approx(_exact_unit_p(frame, mean_gap), abs=0.01)
    assert out["unit_min_p"] == pytest.approx(1 / 20)


def test_a_crossed_unit_of_two_letters_is_a_pair() -> None:
    frame = _letters(np.random.default_rng(5), writers=6, letters=1)
    frame["pair"] = np.tile(np.arange(6), 2)
    lexicon = {"lead": ["lead"]}
    paired = lexicon_odds_ratios(frame, "text", "gender", lexicon, ("m", "f"), "pair", 999)
    by_unit = lexicon_odds_ratios(
        frame, "text", "gender", lexicon, ("m", "f"), n_permutations=999, unit_col="pair"
    )
    assert unit_layout((frame["gender"] == "f").to_numpy(), frame["pair"]).layout == CROSSED
    cols = ["odds_ratio", "ci_low", "ci_high", "p_permutation", "n_units"]
    pd.testing.assert_frame_equal(paired[cols], by_unit[cols])
    assert paired["unit"].iloc[0] == by_unit["unit"].iloc[0] == "pair"


def test_units_that_mix_layouts_or_come_with_pairs_are_refused() -> None:
    code = np.array([0, 1, 0, 0])
    assert unit_layout(code, None).layout == NESTED
    with pytest.raises(ValueError, match="1 of 2 units hold documents of both groups"):
        unit_layout(code, np.array(["a", "a", "b", "b"]))
    frame = _letters(np.random.default_rng(6), writers=2, letters=1).assign(pair=[0, 1, 0, 1])
    with pytest.raises(ValueError, match="the pair is the unit"):
        lexicon_odds_ratios(
            frame, "text", "gender", {"l": ["lead"]}, ("m", "f"), "pair", 99, unit_col="writer"
        )


@pytest.mark.slow
def test_writer_nested_null_is_calibrated_by_units_not_by_letters() -> None:
    """500 null studies of 5 writers x 12 letters per gender: relabelling writers rejects
    3-7 % at alpha 0.05; relabelling letters (the tests without a unit) far more."""
    rng = np.random.default_rng(27)
    studies = 500
    lexicon = {"lead": ["lead"]}
    reject = {"lexicon unit": 0, "lexicon letter": 0, "style unit": 0, "style Student": 0}
    for i in range(studies):
        frame = _letters(rng)
        by_unit = lexicon_odds_ratios(
            frame,
            "text",
            "gender",
            lexicon,
            ("m", "f"),
            n_permutations=199,
            n_bootstrap=100,
            seed=i,
            unit_col="writer",
        ).iloc[0]
        by_letter = lexicon_odds_ratios(
            frame,
            "text",
            "gender",
            lexicon,
            ("m", "f"),
            n_permutations=199,
            n_bootstrap=100,
            seed=i,
        ).iloc[0]
        style = style_tests(
            frame, "share", "gender", ("m", "f"), unit_col="writer", n_permutations=199, seed=i
        )
        reject["lexicon unit"] += by_unit["p_permutation"] <= 0.05
        reject["lexicon letter"] += by_letter["p_permutation"] <= 0.05
        # The style tests are one-sided (first > second), as the paper's.
        reject["style unit"] += style["p_unit"] <= 0.05
        reject["style Student"] += style["p_student"] <= 0.05
    rates = {k: v / studies for k, v in reject.items()}
    assert 0.03 <= rates["lexicon unit"] <= 0.07, rates
    assert 0.03 <= rates["style unit"] <= 0.07, rates
    assert rates["lexicon letter"] > 0.15 and rates["style Student"] > 0.15, rates
