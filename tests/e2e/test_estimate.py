"""``biasim estimate`` and the estimate line of ``validate``: the calls, tokens, cost and time of
a study, with nothing sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.llm.pricing import PRICES
from biasim.simulator.study.load import load_study
from biasim.simulator.tools.estimate import estimate
from tests.conftest import write_study
from tests.e2e.test_cost_ledger import _study
from tests.loopback_llm_server import LoopbackLLMServer


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1).replace(",", ""))


def test_the_an2024_design_on_gpt_4o_mini_gives_calls_tokens_cost_and_time() -> None:
    result = CliRunner().invoke(
        app, ["estimate", "an2024_hiring", "--backend", "openai", "--model", "gpt-4o-mini"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # 820 templates x 300 names x 3 seeds; the judge stage is off (`when` false everywhere).
    assert "total: 738,000 new calls" in text
    prompt = _number(r"([\d,]+) prompt tokens", text)
    output = _number(r"up to ([\d,]+) output tokens", text)
    assert output == 738_000 * 256
    price = PRICES["gpt-4o-mini"]
    live = _number(r"cost \$([\d,.]+) live", text)
    batch = _number(r"\$([\d,.]+) through a batch API", text)
    assert live == pytest.approx((prompt * price.input + output * price.output) / 1e6, abs=0.01)
    assert batch == pytest.approx(live / 2, abs=0.01)
    assert "time about" in text and "2025-06-01" in text


def test_an_estimate_sends_no_request(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        study = _study(tmp_path, server, agents=3)
        result = CliRunner().invoke(app, ["estimate", str(study)])
        validated = CliRunner().invoke(app, ["validate", str(study)])
        assert server.count == 0
    assert result.exit_code == 0 and "total: 6 new calls" in " ".join(result.output.split())
    assert validated.exit_code == 0 and "estimate: 6 new calls" in validated.output


def test_the_local_backend_counts_with_its_model_files_tokenizer() -> None:
    figures = estimate(load_study("emergency_response"))
    assert any("the tokenizer of" in note and ".gguf" in note for note in figures.notes)
    (line,) = figures.lines
    assert line.calls == 12 and line.price is not None and line.cost() == 0.0


def test_answers_in_a_runs_store_are_not_counted_again(tmp_path: Path) -> None:
    study = write_study(tmp_path / "s.yaml", agents=2)
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(study), out=out)))
    before = estimate(load_study(str(study)))
    after = estimate(load_study(str(study)), store=out)
    assert before.calls == 6 and after.calls == 0 and after.cached == 6
    result = CliRunner().invoke(app, ["estimate", str(study), "--store", str(tmp_path)])
    assert result.exit_code == 2 and "--store" in result.output


def test_role_narrows_backend_and_model_and_an_unknown_role_is_an_input_error() -> None:
    command = ["estimate", "an2024_hiring", "--backend", "openai", "--model", "gpt-4o"]
    result = CliRunner().invoke(app, [*command, "--role", "judge"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "local:" in text and "openai:gpt-4o" in text
    bad = CliRunner().invoke(app, [*command, "--role", "nobody"])
    assert bad.exit_code == 2 and "no role `nobody`" in bad.output


def test_a_pipelines_reading_stages_are_upper_bounds() -> None:
    figures = estimate(load_study("hiring_pipeline"))
    reading = [line for line in figures.lines if line.upper_bound]
    assert reading and figures.upper_bound
    result = CliRunner().invoke(app, ["estimate", "hiring_pipeline"])
    assert "<= " in result.output and "total: up to" in " ".join(result.output.split())


def test_study_prices_make_an_unknown_model_priced(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        plain = _study(tmp_path, server, model="house-model", agents=1)
        unknown = estimate(load_study(str(plain)))
        priced = _study(
            tmp_path,
            server,
            model="house-model",
            agents=1,
            extra="prices:\n  house-model: {input: 1, output: 3, batch_input: 0.5, "
            "batch_output: 1.5}\n",
        )
        known = estimate(load_study(str(priced)))
    assert unknown.cost() is None and any("no price known" in n for n in unknown.notes)
    (line,) = known.lines
    assert known.cost() == pytest.approx(2 * (line.prompt_tokens + 3 * line.output_tokens) / 1e6)
    assert known.cost(batch=True) == pytest.approx(known.cost() / 2)
    assert json.dumps(line.price.as_dict())  # recorded as the manifest records it


def test_a_pilot_measures_tokens_with_real_calls_and_stores_nothing(tmp_path: Path) -> None:
    with LoopbackLLMServer() as server:
        study = _study(tmp_path, server, agents=3)
        result = CliRunner().invoke(app, ["estimate", str(study), "--pilot", "2"])
        requests = [r.body for r in server.requests]
    assert result.exit_code == 0, result.output
    assert len(requests) == 2 and all(r["model"] == "gpt-4o-mini" for r in requests)
    text = " ".join(result.output.split())
    assert "pilot: 2 real calls (0 failed), cost $" in text
    # The stub's answers are a few tokens, not the role's max_tokens of 40.
    output = _number(r"about ([\d,]+) output tokens", text)
    assert 0 < output < 6 * 40
    assert not list(tmp_path.glob("**/calls.sqlite"))


def test_batched_roles_are_priced_at_the_batch_price_as_configured() -> None:
    command = ["estimate", "an2024_hiring", "--backend", "openai", "--model", "gpt-4o-mini"]
    plain = " ".join(CliRunner().invoke(app, command).output.split())
    assert "as configured" not in plain  # nothing batched: the live figure is the run's
    result = CliRunner().invoke(app, [*command, "--batch", "--role", "hiring_manager"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    configured = _number(r"as configured \(batch: hiring_manager\) \$([\d,.]+)", text)
    assert configured == _number(r"\$([\d,.]+) through a batch API", text)
    assert configured < _number(r"cost \$([\d,.]+) live", text)
    # --batch on a role whose backend has no batch API is refused, naming the field.
    refused = CliRunner().invoke(app, ["estimate", "emergency_response", "--batch"])
    assert refused.exit_code == 2 and "batch" in refused.output and "no batch API" in refused.output


def _two_stage_study(tmp_path: Path, second_when: str) -> Path:
    """The synthetic flood study with a second stage asked only `when` ``second_when``, and a
    factor of three levels."""
    study = write_study(tmp_path / "study.yaml", agents=10, replicates=2)
    text = study.read_text()
    second = text[text.index("  - name: decide") : text.index("design:")]
    second = second.replace("name: decide", "name: again").replace(
        "    role: decider\n", f'    role: decider\n    when: "{second_when}"\n'
    )
    text = text.replace("design:", second + "design:")
    text = text.replace("design:\n", "design:\n  factors:\n    task: {a: {}, b: {}, c: {}}\n")
    study.write_text(text)
    return study


@pytest.mark.parametrize(
    ("when", "asked"),
    [
        # 3 personas x 10 agents x 2 replicates x 3 levels = 180 agents.
        ("task == 'a'", 60),
        ("gender == 'female' and task != 'c'", 40),
        ("replicate == 1", 90),
        ("persona.name is none", 180),
    ],
)
def test_a_when_on_the_design_is_counted_not_bounded(tmp_path: Path, when: str, asked: int) -> None:
    """validate and estimate count the agents a `when` on design values selects (what the run
    then asks); one that reads earlier answers stays an upper bound."""
    from biasim.simulator.study.design import when_counts

    study = _two_stage_study(tmp_path, when)
    assert when_counts(load_study(str(study), []).config).agents == {"again": asked}
    checked = CliRunner().invoke(app, ["validate", str(study)])
    assert checked.exit_code == 0, checked.output
    line = " ".join(checked.stdout.split())
    skipped = f" ({180 - asked} skipped by a `when` on the design)" if asked < 180 else ";"
    assert f"360 unit(s){skipped}" in line
    assert f"estimate: {180 + asked:,} new calls" in line
    ran = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run")))
    assert (ran.results["stage"] == "again").sum() == asked
    # Validation renders replicate 0 only: that prompt is not measured, and the estimate says so.
    detail = " ".join(CliRunner().invoke(app, ["estimate", str(study)]).output.split())
    assert ("prompt tokens of again not measured" in detail) == (when == "replicate == 1")


def test_a_when_that_reads_answers_stays_an_upper_bound(tmp_path: Path) -> None:
    study = _two_stage_study(tmp_path, "outputs.decide.decision == 'Stay'")
    checked = CliRunner().invoke(app, ["validate", str(study)])
    line = " ".join(checked.stdout.split())
    assert "up to 360 unit(s) (1 stage(s) run only `when` their condition holds)" in line
    assert "estimate: up to 360 new calls" in line


def test_each_models_calls_are_counted_where_the_when_reads_the_model(tmp_path: Path) -> None:
    """A `when` on `model_label` selects one model's agents: the estimate gives each model its
    own count (their prices may differ), as the run asks."""
    study = _two_stage_study(tmp_path, "model_label == 'fair'")
    text = study.read_text().replace(
        "    backend: synthetic\n",
        "    backend: synthetic\n    models:\n      - {label: fair}\n      - {label: other}\n",
        1,
    )
    study.write_text(text)
    figures = estimate(load_study(str(study), []), tokenizers=False)
    again = {line.label: line.calls for line in figures.lines if line.stage == "again"}
    assert again == {"fair": 180, "other": 0}
    assert not any(line.upper_bound for line in figures.lines)
    ran = execute(prepare(RunOptions(study=str(study), out=tmp_path / "run")))
    asked = ran.results[ran.results["stage"] == "again"]["model_label"].value_counts().to_dict()
    assert asked == {"fair": 180}


def test_a_when_that_fails_for_some_agent_of_the_design_is_refused(tmp_path: Path) -> None:
    """Validation renders one factor level at a time; a `when` failing elsewhere in the design
    is found by counting it, and refused with its line and the agent it fails for."""
    study = _two_stage_study(tmp_path, "1 / (0 if task == 'c' and replicate == 1 else 1) > 0")
    checked = CliRunner().invoke(app, ["validate", str(study)])
    assert checked.exit_code == 2
    assert "stages[1].when: cannot be evaluated: ZeroDivisionError" in checked.stderr
    assert "task=c" in checked.stderr and "replicate 1" in checked.stderr
