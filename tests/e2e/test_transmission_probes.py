"""Seed 000 appendix A.4.1: the paper's probe prompts read Experiment 5's letters, one free-text
stage each; the analysis keeps every answer and compares their terms by the writer's gender
with the letter as the unit; a probe with output fields is refused at validate."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.study.load import load_study
from tests.paths import SHARED

STUDY = builtin_path("bias_transmission_probes")
BIASIM = [sys.executable, "-m", "biasim"]
SEED = SHARED / "seeds" / "000_f0400aa19949a666.txt"


def _probe_prompts() -> dict[str, str]:
    stages = load_study(str(STUDY)).config.stages
    return {s.name: s.prompt.split("{{")[0].strip() for s in stages if s.name.startswith("probe_")}


def test_the_probe_stages_are_the_papers_single_letter_prompts() -> None:
    prompts = _probe_prompts()
    assert len(prompts) == 14 and all(p.startswith("Here is a") for p in prompts.values())
    if not SEED.is_file():
        pytest.skip(f"seed text absent: {SEED}")
    text = " ".join(SEED.read_text(encoding="utf-8").split())
    appendix = text[text.index("A.4.1. USING LLM BTA OUTPUT") :]
    for name, prompt in prompts.items():
        # The seed text interleaves line numbers: compare word by word, numbers dropped.
        words = re.sub(r"\b\d{4}\b", "", appendix)
        assert " ".join(prompt.split()) in " ".join(words.split()), name


def test_a_synthetic_probe_run_keeps_every_answer_and_tests_terms_by_letter(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [*BIASIM, "run", str(STUDY), "--backend", "synthetic", "--agents", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = pd.read_csv(out / "tables" / "probes_probe_answers.csv")
    assert len(answers) == 14 * 60 and answers.groupby("stage").size().eq(60).all()
    assert set(answers["gender"]) == {"female", "male"}
    terms = pd.read_csv(out / "tables" / "probes_probe_terms.csv")
    assert set(terms["unit"]) == {"letter"} and not terms["significant"].any()
    assert set(terms["units_group"]) == {30}  # 30 women's letters, one per job
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    assert len(summary["probes"]) == 14 and summary["probe_terms"] == []
    assert "terms differ by writer (unit: letter)" in " ".join(done.stdout.split())


def test_a_probe_with_output_fields_is_refused_at_validate(tmp_path: Path) -> None:
    study = tmp_path / "bad.yaml"
    study.write_text(
        f"extends: {STUDY}\n"
        "name: bad_probes\n"
        "stages:\n"
        "  - name: probe_three_words\n"
        "    output: {words: {type: string}}\n"
    )
    done = subprocess.run(
        [*BIASIM, "validate", str(study)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "`probe_three_words` has output fields: a probe is free text" in " ".join(
        done.stderr.split()
    ) + " ".join(done.stdout.split())
