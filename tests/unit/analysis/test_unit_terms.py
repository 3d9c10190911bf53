"""The unit-level rationale-term test: its permutation moments equal brute-force enumeration, a
unit holding two groups is refused, a real difference is found, and under replicates per persona
with persona-specific wording and verbose personas it holds its level where the token-level
log-odds z does not."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.terms import distinctive_terms
from biasim.analysis.text.unit_terms import unit_term_test

WORDS = [f"zq{a}{b}" for a in "bcdfg" for b in "hjklmnpr"]  # 40 words no rule stems


def _texts(rng, *, units=60, replicates=5, sd=1.5, effect=0.0):
    """``units`` personas (half in group f), each with its own propensity per word (logit sd
    ``sd``) and verbosity (each word it uses written 1-4 times), ``replicates`` rationales each;
    ``effect`` raises the first word's logit in group f."""
    rows = []
    base = rng.normal(-1.0, 0.7, len(WORDS))
    for u in range(units):
        group = "f" if u % 2 == 0 else "m"
        logit = base + rng.normal(0, sd, len(WORDS))
        logit[0] += effect if group == "f" else 0.0
        verbosity = rng.integers(1, 5)
        for _ in range(replicates):
            used = rng.random(len(WORDS)) < 1 / (1 + np.exp(-logit))
            text = " ".join(" ".join([w] * verbosity) for w in np.asarray(WORDS)[used])
            rows.append({"unit": f"p{u}", "group": group, "job": f"j{u % 3}", "text": text})
    return pd.DataFrame(rows)


def test_z_uses_the_exact_permutation_moments_within_strata() -> None:
    frame = pd.DataFrame(
        {
            "unit": ["a", "a", "b", "c", "d", "e", "f"],
            "group": ["f", "f", "m", "f", "m", "f", "m"],
            "job": ["x", "x", "x", "x", "y", "y", "y"],
            "text": ["zqbh zqbh", "zqbj", "zqbh", "", "zqbh zqbj", "zqbh", "zqbj"],
        }
    )
    frame.loc[3, "text"] = "zqbj"
    table = unit_term_test(
        frame, "text", "group", "unit", positive="f", strata="job", min_units=1
    ).set_index("term")
    # Unit usage of zqbh: a 1/2, b 1, c 0 (job x); d 1, e 1, f 0 (job y). Members: a, c, e.
    usage = {"x": [0.5, 1.0, 0.0], "y": [1.0, 1.0, 0.0]}
    observed = 0.5 + 0.0 + 1.0
    draws = [
        sum(usage["x"][i] for i in ix) + sum(usage["y"][j] for j in jy)
        for ix in itertools.combinations(range(3), 2)
        for jy in itertools.combinations(range(3), 1)
    ]
    z = (observed - np.mean(draws)) / np.std(draws)
    assert table.loc["zqbh", "z"] == pytest.approx(z)
    assert table.loc["zqbh", "unit"] == "unit" and table.loc["zqbh", "units_group"] == 3
    assert table.loc["zqbh", "share_group"] == pytest.approx(0.5)


def test_a_unit_in_two_groups_is_refused() -> None:
    frame = pd.DataFrame({"unit": ["a", "a"], "group": ["f", "m"], "text": ["zqbh", "zqbh"]})
    with pytest.raises(ValueError, match="property of the unit"):
        unit_term_test(frame, "text", "group", "unit", positive="f", min_units=1)


def test_a_word_one_group_uses_more_is_found() -> None:
    table = unit_term_test(
        _texts(np.random.default_rng(1), units=80, effect=3.0),
        "text",
        "group",
        "unit",
        positive="f",
        strata="job",
    ).set_index("term")
    assert table.loc[WORDS[0], "significant"] and table.loc[WORDS[0], "z"] > 0
    assert table["significant"].sum() <= 3


@pytest.mark.slow
def test_unit_test_is_calibrated_under_replicates_where_token_z_is_not() -> None:
    """200 null data sets (60 personas x 5 replicates, persona wording sd 1.5, verbosity 1-4):
    the unit-level test rejects 3-7 % of (data set, word) tests at 0.05; Monroe's token z more
    than 8 % (9.4 %)."""
    rng = np.random.default_rng(27)
    unit_hits = unit_tests = token_hits = token_tests = 0
    for _ in range(200):
        frame = _texts(rng)
        table = unit_term_test(frame, "text", "group", "unit", positive="f", strata="job")
        unit_hits += int((table["p_value"] < 0.05).sum())
        unit_tests += len(table)
        tokens = distinctive_terms(frame, "text", "group", top_n=100, min_count=10)
        # Both directions: each word's test appears once per group; count group f's rows and
        # group m's rows (f's negative z) alike through the two-sided p.
        token_hits += int((tokens["p_value"] < 0.05).sum())
        token_tests += int(table["term"].nunique())
    assert 0.03 <= unit_hits / unit_tests <= 0.07, unit_hits / unit_tests
    assert token_hits / token_tests > 0.08, token_hits / token_tests  # 9.4 % when written
