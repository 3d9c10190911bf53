"""The DiscrimEval-style model in a run answered with log-probabilities: each answer's log-odds
of the targeted decision, random effects per decision scenario (and per persona instance, which
answers every scenario), in the decisions tables, the summary and the report."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare

STUDY = """\
name: discrim_eval
description: one decision in several scenarios, read from probabilities
roles:
  decider:
    backend: synthetic
    max_tokens: 16
    synthetic:
      decision:
        by: gender
        probabilities:
          male: {Evacuate: 0.4, Stay: 0.6}
        default: {Evacuate: 0.7, Stay: 0.3}
        unit: persona
        unit_sd: 0.3
personas:
  axes:
    gender: [male, female]
  description: "a {{ gender }} person"
stages:
  - name: decide
    role: decider
    answer: logprobs
    prompt: "You are {{ persona.description }}. In the {{ scenario }} case, Evacuate or Stay?"
    output:
      decision: {type: choice, choices: [Evacuate, Stay]}
design:
  agents_per_value: 12
  factors:
    scenario: {flood: {}, fire: {}, storm: {}, quake: {}}
analyses:
  - kind: demographic_parity
    stage: decide
    field: decision
    target: Evacuate
    by: gender
    n_permutations: 200
{cases}"""


def _run(tmp_path: Path, cases: str) -> tuple[object, Path]:
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("{cases}", cases), encoding="utf-8")
    out = tmp_path / "run"
    return execute(prepare(RunOptions(study=str(path), out=out))), out


def test_the_model_estimates_the_declared_log_odds_difference_per_scenario(tmp_path: Path) -> None:
    outcome, out = _run(tmp_path, "    cases: [scenario]\n")
    table = pd.read_csv(out / "tables" / "analysis1_discrim_eval.csv")
    (row,) = table.to_dict("records")
    # female is the reference: male's declared log-odds are logit(0.4) - logit(0.7) lower.
    declared = math.log(0.4 / 0.6) - math.log(0.7 / 0.3)
    assert row["group"] == "male" and row["reference"] == "female"
    assert row["ci_low"] <= declared <= row["ci_high"]
    assert row["estimate"] == pytest.approx(declared, abs=0.3)
    assert row["n_units"] == 4 and row["scenario_columns"] == "scenario" and row["converged"]
    assert row["p_value"] < 0.05
    # Each persona instance answers all four scenarios: its own intercept is in the model.
    assert "per persona instance" in row["model"]
    (summary_row,) = outcome.summary["analyses"][0]["expected"]["discrim_eval"]
    assert summary_row["estimate"] == pytest.approx(row["estimate"])
    assert "DiscrimEval mixed model" in (out / "report.html").read_text()


def test_one_scenario_is_not_fitted_and_says_why(tmp_path: Path) -> None:
    outcome, _ = _run(tmp_path, "")
    (row,) = outcome.summary["analyses"][0]["expected"]["discrim_eval"]
    assert row["estimate"] is None and "one decision scenario" in row["note"]
