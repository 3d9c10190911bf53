"""Prompts read "as an Engineer", not "as a Engineer" (the seed-000 generation prompt)."""

from __future__ import annotations

import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.study.templating import render, with_article


@pytest.mark.parametrize(
    ("noun", "expected"),
    [
        ("Engineer", "an Engineer"),
        ("Hairdresser", "a Hairdresser"),
        ("Orderly", "an Orderly"),
        ("Auto Mechanic", "an Auto Mechanic"),
        ("University Lecturer", "a University Lecturer"),
        ("hour-long shift worker", "an hour-long shift worker"),
    ],
)
def test_article_by_first_sound(noun: str, expected: str) -> None:
    assert with_article(noun) == expected


def test_pipeline_generation_prompt_reads_an_engineer() -> None:
    text = builtin_path("bias_transmission_pipeline").read_text()
    assert "as a {{ job }}" not in text and "{{ job | with_article }}" in text
    assert render("as {{ job | with_article }}.", {"job": "Engineer"}) == "as an Engineer."
