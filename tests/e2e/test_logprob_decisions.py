"""Decision probabilities from log-probabilities (``answer: logprobs``): read from the first
token of the decision's value, refused at validate when they cannot be, stored per call and
analysed as expected decisions with a calibrated unit-level permutation test."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.expected import expected_parity_test
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.llm.logprobs import first_token_clash, option_probabilities, value_start
from biasim.simulator.study.load import load_study
from tests.loopback_llm_server import LoopbackLLMServer

STUDY = """\
name: logprob_decisions
description: decisions with probabilities
roles:
  decider:
    backend: {backend}
    model: {model}
    max_tokens: 24
    max_concurrency: 4
    options: {options}
    synthetic:
      decision:
        by: gender
        probabilities:
          male: {{Evacuate: 0.4, Stay: 0.6}}
        default: {{Evacuate: 0.7, Stay: 0.3}}
personas:
  axes:
    gender: [male, female]
  description: "a {{{{ gender }}}} person"
stages:
  - name: decide
    role: decider
    answer: logprobs
    prompt: "You are {{{{ persona.description }}}}. A flood is coming. Evacuate or Stay?"
    output:
      decision: {{type: choice, choices: {choices}}}
design:
  agents_per_value: {agents}
  replicates: {replicates}
analyses:
  - kind: demographic_parity
    stage: decide
    field: decision
    target: Evacuate
    by: gender
    n_permutations: 200
"""


def _write(
    tmp_path: Path,
    *,
    backend: str = "synthetic",
    model: str = "m",
    options: dict[str, Any] | None = None,
    choices: str = "[Evacuate, Stay]",
    agents: int = 3,
    replicates: int = 1,
    extra: str = "",
) -> Path:
    path = tmp_path / "s.yaml"
    text = STUDY.format(
        backend=backend,
        model=model,
        options=json.dumps(options or {}),
        choices=choices,
        agents=agents,
        replicates=replicates,
    )
    path.write_text(text + extra, encoding="utf-8")
    return path


def test_probabilities_come_from_the_token_where_the_value_begins() -> None:
    text = '{"decision": "Evacuate"}'
    tokens = [
        ('{"decision": ', {}),
        ('"Ev', {'"Ev': math.log(0.6), '"St': math.log(0.3), '"X': math.log(0.1)}),
        ('acuate"}', {}),
    ]
    probs = option_probabilities(text, tokens, "decision", ["Evacuate", "Stay"])
    assert probs == pytest.approx({"Evacuate": 2 / 3, "Stay": 1 / 3})
    # A plain answer: the value begins after the leading space its first token carries.
    plain = option_probabilities(
        " Stay",
        [(" Stay", {" Stay": -0.1, " Evac": -2.0, "Stay": -5.0})],
        "decision",
        ["Evacuate", "Stay"],
    )
    assert plain["Stay"] == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.0)))
    assert option_probabilities("Stay", [("Stay", {"Hm": -0.1})], "d", ["Evacuate", "Stay"]) is None


def test_options_sharing_a_first_token_are_told_apart_or_refused() -> None:
    assert first_token_clash(["Evacuate", "Stay"], None) is None
    assert "first letter" in first_token_clash(["Stay", "Stop"], None)
    split = {"Stay": ["St", "ay"], "Stop": ["St", "op"], "Go": ["Go"]}
    assert "first token `st`" in first_token_clash(["Stay", "Stop"], split.__getitem__)
    assert first_token_clash(["Stay", "Go"], split.__getitem__) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "ollama"}, "returns no log-probabilities"),
        ({"backend": "openai", "model": "house-model", "choices": "[Stay, Stop]"}, "first letter"),
        ({}, None),
    ],
)
def test_validate_refuses_what_cannot_be_read(
    tmp_path: Path, kwargs: dict[str, Any], message: str | None
) -> None:
    if kwargs.get("backend") == "openai":
        kwargs["options"] = {"base_url": "http://127.0.0.1:9/v1"}
    path = _write(tmp_path, **kwargs)
    if message is None:
        load_study(str(path))
        return
    with pytest.raises(InputError) as caught:
        load_study(str(path))
    assert message in str(caught.value) and "stages[0].answer" in str(caught.value)


def test_two_choice_fields_are_refused_naming_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path)
    text = path.read_text().replace(
        "      decision: {type: choice, choices: [Evacuate, Stay]}",
        "      decision: {type: choice, choices: [Evacuate, Stay]}\n"
        "      other: {type: choice, choices: [A, B]}",
    )
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_study(str(path))
    assert "exactly one `choice` field" in str(caught.value)
    assert f"{path}:" in str(caught.value)


def test_the_synthetic_backend_declares_its_probabilities_and_the_kind_analyses_them(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    outcome = execute(prepare(RunOptions(study=str(_write(tmp_path, agents=5)), out=out)))
    probs = outcome.results["probabilities"].map(json.loads)
    male = outcome.results["gender"] == "male"
    assert probs[male].map(lambda p: p["Evacuate"]).tolist() == pytest.approx([0.4] * 5)
    assert probs[~male].map(lambda p: p["Evacuate"]).tolist() == pytest.approx([0.7] * 5)
    expected = pd.read_csv(out / "tables" / "analysis1_expected.csv")
    by = expected.set_index("value")["mean_probability"]
    assert by["male"] == pytest.approx(0.4) and by["female"] == pytest.approx(0.7)
    (case,) = outcome.summary["analyses"][0]["expected"]["cases"]
    assert case["dpd"] == pytest.approx(0.3) and case["n_units"] == 10
    assert "DPD of expected decisions" in (out / "report.html").read_text()
    # Stored per call: a resume answers from the store with the same probabilities.
    again = execute(prepare(RunOptions(resume=out)))
    assert again.summary["calls"]["new"] == 0


class LogprobServer(LoopbackLLMServer):
    """The loopback server, returning log-probabilities as OpenAI's chat API does."""

    def _openai_completion(self, body: Any, content: str, seq: int) -> dict[str, Any]:
        out = super()._openai_completion(body, content, seq)
        if body.get("logprobs"):
            start = value_start(content, "decision")
            pieces = [content[:start], content[start : start + 2], content[start + 2 :]]
            tops = [{}, {pieces[1]: math.log(0.8), "Zz": math.log(0.2)}, {}]
            tops[1]["St" if pieces[1] != "St" else "Ev"] = math.log(0.2)
            out["choices"][0]["logprobs"] = {
                "content": [
                    {
                        "token": p,
                        "logprob": -0.1,
                        "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()],
                    }
                    for p, top in zip(pieces, tops, strict=True)
                ]
            }
        return out


def test_the_openai_backend_reads_a_servers_logprobs(tmp_path: Path) -> None:
    with LogprobServer() as server:
        options = {"base_url": server.openai_base_url}
        path = _write(tmp_path, backend="openai", model="house-model", options=options)
        outcome = execute(prepare(RunOptions(study=str(path), out=tmp_path / "run")))
        asked = [r.body for r in server.requests]
    assert all(b["logprobs"] is True and b["top_logprobs"] == 20 for b in asked)
    results = outcome.results
    for decision, raw in zip(results["decision"], results["probabilities"], strict=True):
        probs = json.loads(raw)
        assert probs[decision] == pytest.approx(0.8)
        assert sum(probs.values()) == pytest.approx(1.0)


def test_the_expected_decision_test_is_calibrated_with_units_and_replicates() -> None:
    """Null: two groups of 20 persona instances, 3 replicates each, every instance with its own
    propensity (log-odds sd 1) and replicate noise: 3-7 % rejections at alpha 0.05."""
    rng = np.random.default_rng(32)
    sims, rejected = 600, 0
    group = np.repeat([0, 1], 20)
    for i in range(sims):
        base = rng.normal(0.0, 1.0, size=40)
        probs = 1 / (1 + np.exp(-(base[:, None] + rng.normal(0, 0.3, size=(40, 3)))))
        test = expected_parity_test(
            np.full(40, 3), probs.sum(axis=1), group, n_permutations=199, seed=i
        )
        rejected += test.p_value < 0.05
    assert 0.03 <= rejected / sims <= 0.07


def test_the_expected_decision_test_finds_a_real_difference() -> None:
    rng = np.random.default_rng(5)
    base = rng.normal(0.0, 0.5, size=40) + np.repeat([0.0, 1.0], 20)
    probs = 1 / (1 + np.exp(-base))
    test = expected_parity_test(np.ones(40), probs, np.repeat([0, 1], 20), n_permutations=499)
    assert test.p_value < 0.01 and test.units == 40


JUDGE_STUDY = """\
name: judged_emails
description: hiring emails labelled by a judge answering with log-probabilities
roles:
  writer:
    backend: synthetic
    synthetic:
      text:
        default: {"Dear applicant, we are pleased to offer you the role.": 1.0}
  judge:
    backend: synthetic
    synthetic:
      outcome:
        by: gender
        probabilities:
          male: {accept: 0.3, reject: 0.6, invalid: 0.1}
        default: {accept: 0.6, reject: 0.3, invalid: 0.1}
personas:
  source: name_bank
  name_bank: an2024
  axes:
    race: [White, Black]
    gender: [male, female]
  description: "{{ race }} {{ gender }}"
stages:
  - name: write
    role: writer
    prompt: "Write the hiring decision for {{ persona.description }}."
  - name: judge
    role: judge
    answer: logprobs
    prompt: "Label this email: {{ outputs.write.text }}"
    output:
      outcome: {type: choice, choices: [accept, reject, invalid]}
design:
  agents_per_value: 3
analyses:
  - kind: acceptance
    stage: write
    classifier: judge
    judge_stage: judge
    groups: [race, gender]
    unit: name
    n_permutations: 200
"""


def test_the_acceptance_kind_analyses_a_judges_probabilities(tmp_path: Path) -> None:
    path = tmp_path / "judged.yaml"
    path.write_text(JUDGE_STUDY, encoding="utf-8")
    out = tmp_path / "run"
    outcome = execute(prepare(RunOptions(study=str(path), out=out)))
    expected = pd.read_csv(out / "tables" / "analysis1_expected.csv").set_index("value")
    means = expected["mean_probability"]
    assert means[["White|male", "Black|male"]].tolist() == pytest.approx([0.3, 0.3])
    assert means[["White|female", "Black|female"]].tolist() == pytest.approx([0.6, 0.6])
    (case,) = outcome.summary["analyses"][0]["expected"]["cases"]
    assert case["dpd"] == pytest.approx(0.3) and case["n_units"] == 12
    assert "expected acceptance" in " ".join(
        get_kind("acceptance").power_tests(outcome.summary["analyses"][0])
    )
