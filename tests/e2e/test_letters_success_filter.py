"""Seed 002's generation success filter as the authors apply it: their rule (the word
" recommend " with a space each side) on CBG letters, none on the 120 CLG letters, and the
appendix's wording ("recommend" anywhere) selectable; the built-in studies' defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from biasim.analysis.text.letter_text import (
    EMPTY,
    NOT_RECOMMENDING,
    NOT_RECOMMENDING_AUTHORS,
    generation_failure,
)
from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.kinds.letters import LettersSpec
from biasim.simulator.study.load import load_study
from biasim.simulator.tools.texts import TextsOptions, load_texts
from tests.paths import SHARED

REF = SHARED / "reference" / "biases-llm-reference-letters"
CLG = REF / "generated_letters" / "chatgpt" / "clg" / "clg_letters.csv"
CBG = REF / "generated_letters" / "chatgpt" / "cbg"
needs_reference = pytest.mark.skipif(not CLG.exists(), reason="Wan et al. data absent")


@pytest.mark.parametrize(
    ("text", "authors", "recommend"),
    [
        ("I recommend her without reservation.", None, None),
        ("I highly recommended her.", NOT_RECOMMENDING_AUTHORS, None),
        ("Recommend: yes.", NOT_RECOMMENDING_AUTHORS, None),
        ("Here is a short poem about the sea.", NOT_RECOMMENDING_AUTHORS, NOT_RECOMMENDING),
        ("   ", EMPTY, EMPTY),
    ],
)
def test_rules_by_hand(text: str, authors: str | None, recommend: str | None) -> None:
    assert generation_failure(text, "authors") == authors
    assert generation_failure(text, "recommend") == recommend
    assert generation_failure(text, "none") == (EMPTY if not text.strip() else None)


@needs_reference
def test_released_letters_under_each_rule() -> None:
    cbg = pd.concat(pd.read_csv(p) for p in sorted(CBG.glob("*.csv")))["chatgpt_gen"]
    cbg = cbg.fillna("").astype(str)
    assert len(cbg) == 1912
    assert sum(generation_failure(t, "authors") is not None for t in cbg) == 87
    assert sum(generation_failure(t, "recommend") is not None for t in cbg) == 2
    clg = pd.read_csv(CLG)["chatgpt_gen"].astype(str)
    assert sum(generation_failure(t, "none") is not None for t in clg) == 0
    assert sum(generation_failure(t, "recommend") is not None for t in clg) == 5


def _options(rule: str) -> TextsOptions:
    return TextsOptions(
        "chatgpt_gen", "gender", None, None, None, None, rule, False, None, None, 99, 0
    )


@needs_reference
def test_analyze_texts_keeps_all_clg_letters_by_default() -> None:
    frame, groups, _ = load_texts(CLG, _options("none"))
    assert len(frame) == 120 and set(groups) == {"female", "male"}
    frame, _, _ = load_texts(CLG, _options("recommend"))
    assert len(frame) == 115


def test_built_in_studies_filter_as_the_authors() -> None:
    clg = load_study(builtin_path("wan2023_letters")).config.analyses[0]
    cbg = load_study(builtin_path("wan2023_letters_cbg")).config.analyses[0]
    assert clg.success_filter == "none"
    assert cbg.success_filter == "authors" and cbg.salient_threshold == 10
    # study files written when the filter was a yes / no keep their meaning
    base = {"kind": "letters", "stage": "s", "group": "g", "compare": ["a", "b"]}
    assert LettersSpec(**base, success_filter=True).success_filter == "recommend"
    assert LettersSpec(**base, success_filter=False).success_filter == "none"


def test_an_unknown_rule_is_refused(tmp_path: Path, cli) -> None:
    path = tmp_path / "t.csv"
    pd.DataFrame({"t": ["I recommend him.", "I recommend her."], "g": ["m", "f"]}).to_csv(path)
    args = ["analyze", "--texts", str(path), "--text-col", "t", "--group-col", "g"]
    result = cli.invoke(app, [*args, "--success-filter", "strict"])
    assert result.exit_code == 2 and "--success-filter" in result.output


def test_a_run_whose_letters_were_all_excluded_prints_zero_kept() -> None:
    # SmolLM2 at --agents 1 kept no CBG letter: the header read "letters kept: ;".
    from rich.console import Console

    from biasim.simulator.kinds.letters import LettersKind

    summary = {
        "name": "letters",
        "groups": ["female", "male"],
        "letters": {},
        "scored_now": 0,
        "note": "no letter was kept (see the exclusions): nothing to analyse",
        "exclusions": [{"model_label": "m", "excluded": "no ' recommend '", "letters": 20}],
    }
    console = Console(record=True, width=200)
    LettersKind().print(summary, console)
    text = console.export_text()
    assert "letters kept: 0;" in text and "nothing to analyse" in text
    assert "letters: letters kept and excluded" in text
    assert re.search(r"│ m\s+│ no ' recommend '\s+│\s+20 │", text), text


def test_style_units_that_differ_by_dimension_are_named_per_dimension() -> None:
    # wan2023_letters on SmolLM2 printed "unit: letter, 113, 82 units" for three dimensions.
    from biasim.simulator.kinds.letters import _unit_lines

    rows = [
        {"dimension": d, "n_female": f, "n_male": m}
        for d, f, m in (("positive", 56, 57), ("formal", 56, 57), ("agentic", 45, 37))
    ]
    (line,) = _unit_lines({"groups": ["male", "female"], "style": rows}, "style")
    assert "unit: letter, positive 113, formal 113, agentic 82 units" in line
    (line,) = _unit_lines({"groups": ["male", "female"], "style": rows[:2]}, "style")
    assert "unit: letter, 113 units" in line
