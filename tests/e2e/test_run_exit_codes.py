"""Exits that say what happened: a run whose calls failed is `failed` (exit 3), a corrupt store
to resume is exit 2 naming it, credentials in a URL are refused at validate, and a persona value
that is broken mathtext still gives every figure and a full report."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.failures import EXIT_CALLS_FAILED, EXIT_INPUT
from tests.conftest import write_study
from tests.e2e.test_faults_end_to_end import study_file
from tests.loopback_llm_server import Fault, LoopbackLLMServer


@pytest.fixture
def server():
    with LoopbackLLMServer() as srv:
        yield srv


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "fault",
    [
        Fault.http_error(500),
        Fault.rate_limited(0.0),
        Fault.connection_reset(),
        Fault.truncated_body(),
        Fault.hang(5),
        "refused",
    ],
    ids=["500", "429", "reset", "truncated", "hang", "refused"],
)
def test_a_run_whose_every_call_failed_exits_3_with_status_failed(
    tmp_path: Path, server: LoopbackLLMServer, cli, fault
) -> None:
    # 6 units: below the 20 the dispatcher waits for before it judges the error rate.
    study = study_file(tmp_path, server, agents=2, attempts=2, timeout=0.3)
    if fault == "refused":
        text = study.read_text().replace(str(server.port), str(_closed_port()))
        study.write_text(text)
    else:
        server.set_default_fault(fault)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == EXIT_CALLS_FAILED == 3, result.output
    err = " ".join(result.stderr.split())
    assert "run failed: every call of stage `decide` failed (6 of 6 units)" in err
    assert f"biasim run --resume {out}" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert _manifest(out)["status"] == summary["status"] == "failed"
    assert _manifest(out)["resume"] == f"biasim run --resume {out}"


def test_a_failed_run_resumes_to_complete(tmp_path: Path, server: LoopbackLLMServer, cli) -> None:
    study = study_file(tmp_path, server, agents=2, attempts=1)
    server.set_default_fault(Fault.http_error(500))
    out = tmp_path / "run"
    assert cli.invoke(app, ["run", str(study), "--out", str(out)]).exit_code == 3
    server.set_default_fault(None)
    resumed = cli.invoke(app, ["run", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert _manifest(out)["status"] == "complete" and "resume" not in _manifest(out)


def test_the_error_rate_threshold_applies_to_small_runs_and_can_be_changed(
    tmp_path: Path, server: LoopbackLLMServer, cli
) -> None:
    study = study_file(tmp_path, server, agents=3, attempts=1, concurrency=1)
    server.fault_every(3, Fault.http_error(500))  # 3 of 9 units fail
    done = cli.invoke(app, ["run", str(study), "--out", str(tmp_path / "a")])
    assert done.exit_code == 0, done.output  # 33 % is under the default 50 %
    assert _manifest(tmp_path / "a")["status"] == "complete"
    server.reset()
    server.fault_every(3, Fault.http_error(500))
    strict = cli.invoke(
        app, ["run", str(study), "--out", str(tmp_path / "b"), "--max-error-rate", "0.2"]
    )
    assert strict.exit_code == 3, strict.output
    assert "3 of 9 units failed (more than --max-error-rate 20%)" in " ".join(strict.stderr.split())
    assert _manifest(tmp_path / "b")["status"] == "failed"


def test_run_help_documents_the_exit_codes(cli) -> None:
    text = " ".join(cli.invoke(app, ["run", "--help"], terminal_width=200).output.split())
    for code in ("0 complete", "1 something broke", "2 bad input", "3 the calls failed", "130"):
        assert code in text


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_resume_on_a_damaged_store_exits_2_naming_it_and_changes_nothing(
    tmp_path: Path, cli, damage: str
) -> None:
    out = tmp_path / "run"
    study = write_study(tmp_path / "s.yaml", agents=40)
    assert cli.invoke(app, ["run", str(study), "--out", str(out)]).exit_code == 0
    store = out / "calls.sqlite"
    data = store.read_bytes()
    assert len(data) > 8192
    store.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x13" * len(data))
    manifest = (out / "manifest.json").read_bytes()
    result = cli.invoke(app, ["run", "--resume", str(out)])
    assert result.exit_code == EXIT_INPUT, result.output
    assert str(store) in " ".join(result.stderr.split()) and "Traceback" not in result.output
    assert (out / "manifest.json").read_bytes() == manifest  # still `complete`
    assert json.loads(manifest)["status"] == "complete"


def test_credentials_in_a_server_url_are_refused_at_validate(tmp_path: Path, cli) -> None:
    study = tmp_path / "s.yaml"
    text = write_study(study, agents=2).read_text()
    for options in (
        '{base_url: "http://alice:pw-1234@127.0.0.1:9/v1"}',
        '{base_url: ["http://127.0.0.1:9/v1", "https://bob:pw-1234@10.0.0.2/v1"]}',
        '{kwargs: {openai_api_base: "https://alice:pw-1234@llm.example.org/v1"}}',
    ):
        backend = "langchain" if "kwargs" in options else "openai"
        study.write_text(
            text.replace("backend: synthetic", f"backend: {backend}\n    model: openai:m").replace(
                "options: {latency_ms: 0}", f"options: {options}"
            )
        )
        result = cli.invoke(app, ["validate", str(study)])
        assert result.exit_code == 2, (options, result.output)
        assert "may not carry credentials" in result.stderr and f"{study}:" in result.stderr
        assert "pw-1234" not in result.output


def test_a_persona_value_that_is_broken_mathtext_gives_a_full_report(tmp_path: Path, cli) -> None:
    study = tmp_path / "s.yaml"
    text = write_study(study, agents=4).read_text()
    study.write_text(text.replace("non-binary]", "'$\\frac{a$']"))
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert "analysis_error" not in summary and "report_error" not in summary
    assert len(summary["analyses"]) == 1
    value = "$\\frac{a$"
    assert json.dumps(value) in json.dumps(summary["analyses"][0])  # the analysis has the group
    assert any(p.endswith(".png") for p in summary["outputs"])
    page = (out / "report.html").read_text()
    assert value in page and "<img" in page


def test_one_model_of_a_comparison_whose_every_call_failed_fails_the_run(
    tmp_path: Path, cli
) -> None:
    study = tmp_path / "s.yaml"
    text = write_study(study, agents=2).read_text()
    models = (
        "    models:\n"
        "      - {label: up, model: a}\n"
        "      - {label: down, model: b, options: {fail_rate: 1.0}}\n"
    )
    study.write_text(text.replace("    synthetic:\n", models + "    synthetic:\n", 1))
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 3, result.output
    assert "every call of stage `decide` (model `down`) failed (6 of 6 units)" in " ".join(
        result.stderr.split()
    )
    assert _manifest(out)["status"] == "failed"


@pytest.mark.parametrize(
    ("crash", "code", "said"),
    [
        (RuntimeError("disk on fire"), 1, "run failed before its first call: RuntimeError: disk"),
        (InputError("a bad model file"), EXIT_INPUT, "error a bad model file"),
    ],
    ids=["bug", "input"],
)
def test_a_crash_before_the_first_call_leaves_no_manifest_running(
    tmp_path: Path, cli, monkeypatch, crash, code, said
) -> None:
    from biasim.simulator.engine import runner

    def broken(*_args, **_kwargs):
        raise crash

    monkeypatch.setattr(runner, "ResultsWriter", broken)
    out = tmp_path / "run"
    result = cli.invoke(
        app, ["run", str(write_study(tmp_path / "s.yaml", agents=2)), "--out", str(out)]
    )
    assert result.exit_code == code, result.output
    assert said in " ".join(result.stderr.split()) and "Traceback" not in result.output
    manifest = _manifest(out)
    assert manifest["status"] == manifest["sessions"][-1]["status"] == "failed"
    assert str(crash) in manifest["sessions"][-1]["error"]
    # Nothing was asked: resuming starts the run, and it completes.
    monkeypatch.undo()
    resumed = cli.invoke(app, ["run", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert _manifest(out)["status"] == "complete"
