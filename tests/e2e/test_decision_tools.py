"""Auditing the decision tool a company runs: a loopback "vendor API" (``backend: http``) and a
scikit-learn model in process (``backend: python``), each with a declared bias against women,
run end to end, read by the existing analyses and ``biasim audit --format ll144``; the key never
reaches a file of the run; a resume pays nothing twice; bad config is exit 2 or a recorded
per-call error, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from tests.conftest import answered_calls
from tests.decision_tool_server import ToolServer, label, score

KEY = "sk-live-7f3Qw9ZzTestKeyNeverWritten"
KEY_ENV = "ACME_SCORER_KEY"
BIASIM = [sys.executable, "-m", "biasim"]
YEARS = {"junior": 2, "mid": 6, "senior": 10}


def study_text(url: str, agents: int = 10, role_extra: str = "", role: str | None = None) -> str:
    """The audit study; its screener is the tool at ``url`` unless ``role`` (YAML at the
    role's indentation) replaces it."""
    http_role = textwrap.dedent(
        f"""\
        backend: http
        model: acme-screen-v2
        {role_extra}
        options:
          url: {url}
          body: '{{"candidate": {{{{ fields | tojson }}}}}}'
          headers:
            X-Api-Key: {KEY_ENV}
          response:
            score: $.result.score
            decision: items[0].label
        """
    )
    text = textwrap.dedent(
        f"""\
        name: vendor_scorer
        description: "A vendor's résumé scorer behind an HTTP API"
        seed: 7
        roles:
          screener:
        ROLE
        personas:
          source: name_bank
          name_bank: an2024
          axes:
            race: [White, Black]
            gender: [female, male]
          description: "{{{{ race }}}} {{{{ gender }}}}"
        stages:
          - name: screen
            role: screener
            prompt: >-
              {{"name": {{{{ persona.name | tojson }}}}, "gender": {{{{ gender | tojson }}}},
              "years": {{{{ years }}}}}}
            output:
              score: {{type: number}}
              decision: {{type: choice, choices: [advance, reject]}}
        design:
          agents_per_value: {agents}
          factors:
            experience:
              junior: {{years: "2"}}
              mid: {{years: "6"}}
              senior: {{years: "10"}}
        analyses:
          - kind: demographic_parity
            stage: screen
            field: decision
            target: advance
            by: gender
        """
    )
    block = textwrap.indent(textwrap.dedent(role) if role else http_role, "    ").rstrip()
    return text.replace("ROLE", block)


def expected(results: pd.DataFrame) -> pd.DataFrame:
    """The declared truth for each row: the score the tool gives that candidate."""
    years = results["experience"].map(YEARS)
    scores = [
        score({"name": n, "gender": g, "years": y})
        for n, g, y in zip(results["persona_name"], results["gender"], years, strict=True)
    ]
    return pd.DataFrame({"score": scores, "decision": [label(s) for s in scores]})


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_http_tool_run_lands_in_the_store_and_the_ll144_audit(tmp_path, cli, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with ToolServer(KEY) as server:
        study = tmp_path / "vendor.yaml"
        study.write_text(study_text(server.url))
        run = tmp_path / "run"
        args = ["run", str(study), "--allow-endpoint", "127.0.0.1", "--out", str(run)]
        result = cli.invoke(app, args)
        assert result.exit_code == 0, result.output + result.stderr
        assert server.count == 120 and server.seen_keys == {KEY}
        # A rerun replaying this run's store (a CI rerun) asks the tool nothing.
        replay = [*args[:-1], str(tmp_path / "replayed"), "--replay", str(run)]
        replayed = cli.invoke(app, replay)
        assert replayed.exit_code == 0, replayed.output + replayed.stderr
        assert server.count == 120

    results = pd.read_parquet(run / "results.parquet")
    assert (results["status"] == "answered").all() and len(results) == 120
    truth = expected(results)
    assert results["score"].tolist() == pytest.approx(truth["score"].tolist())
    assert results["decision"].tolist() == truth["decision"].tolist()
    assert set(results["backend"]) == {"http"} and set(results["model"]) == {"acme-screen-v2"}
    rates = (results["decision"] == "advance").groupby(results["gender"]).mean()
    assert rates["female"] < rates["male"]  # the declared bias is there to be found

    audited = cli.invoke(app, ["audit", str(run), "--format", "ll144"])
    assert audited.exit_code == 0, audited.output + audited.stderr
    [(where, _)] = json.loads((run / "summary.json").read_text())["audits"].items()
    sex = pd.read_csv(run / where / "ll144_sex.csv").set_index("gender")
    assert sex.loc["female", "impact_ratio"] == pytest.approx(rates["female"] / rates["male"])
    assert sex.loc["female", "below_four_fifths"]

    # The key went to the tool on every call and into no file the run or the audit wrote.
    assert files_holding(run, KEY) == []
    manifest = json.loads((run / "manifest.json").read_text())
    assert KEY_ENV in json.dumps(manifest)  # the variable is named, its value is not


def test_retry_after_5xx_and_bad_replies_are_retried_or_recorded(tmp_path, cli, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with ToolServer(KEY) as server:
        # One call meets 429 (wait 0 s) then 500 and is answered on its third attempt; later
        # calls meet a body that is not JSON and a reply without the mapped fields: final,
        # recorded with the reason, not retried.
        server.enqueue(429, '{"error": "slow down"}', {"Retry-After": "0"})
        server.enqueue(500, "upstream failed")
        study = tmp_path / "vendor.yaml"
        extra = "max_concurrency: 1\n        backoff_s: 0.01"
        study.write_text(study_text(server.url, agents=1, role_extra=extra))
        run = tmp_path / "run"
        args = ["run", str(study), "--allow-endpoint", "127.0.0.1", "--out", str(run)]
        first = cli.invoke(app, args)
        assert first.exit_code == 0, first.output + first.stderr
        assert server.count == 12 + 2
        server.enqueue(200, f"<html>{KEY} oops</html>")
        server.enqueue(200, '{"result": {}}')
        again = cli.invoke(app, [*args[:-1], str(tmp_path / "run2")])
        assert "Traceback" not in again.output + again.stderr
        assert server.count == 14 + 12

    results = pd.read_parquet(run / "results.parquet")
    assert (results["status"] == "answered").all() and results["attempts"].max() == 3
    second = pd.read_parquet(tmp_path / "run2" / "results.parquet")
    errors = second[second["status"] == "error"]["error"].tolist()
    assert len(errors) == 2, again.output
    assert any("the tool's reply is not JSON" in e and KEY not in e for e in errors)
    assert any("the reply has no `$.result.score`" in e for e in errors)
    assert files_holding(tmp_path / "run2", KEY) == []


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (
            ("X-Api-Key: ACME_SCORER_KEY", f"X-Api-Key: {KEY}"),
            "options.headers.X-Api-Key",
            "must name an environment variable",
        ),
        (
            ("score: $.result.score", "score: $.result..score"),
            "options.response.score",
            "is not a path",
        ),
        (("{{ fields | tojson }}", "{{ resume }}"), "options.body", "reads ['resume']"),
        (("url: http", "url: ftp"), "options.url", "needs `url`"),
    ],
)
def test_bad_tool_config_is_exit_2_at_validate(tmp_path, cli, edit, where, message):
    study = tmp_path / "vendor.yaml"
    study.write_text(study_text("http://127.0.0.1:9/v1/score").replace(*edit))
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2, result.output
    line = next(i for i, text in enumerate(study.read_text().splitlines(), 1) if edit[1] in text)
    assert f"vendor.yaml:{line}: roles.screener.{where}: " in result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert KEY not in result.stderr


def test_a_missing_key_variable_is_exit_2_before_any_call(tmp_path, cli, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    study = tmp_path / "vendor.yaml"
    study.write_text(study_text("http://127.0.0.1:9/v1/score"))
    run = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(run)])
    assert result.exit_code == 2, result.output
    assert "roles.screener.options.headers.X-Api-Key: " in result.stderr
    assert f"environment variable {KEY_ENV} is not set" in result.stderr
    assert not run.exists()


@pytest.mark.slow
def test_resume_after_a_kill_pays_no_answered_call_twice(tmp_path):
    # 408 calls of 10 ms, 4 in flight: about a second of work, killed after 100 answers.
    with ToolServer(KEY, latency_s=0.01) as server:
        study = tmp_path / "vendor.yaml"
        study.write_text(study_text(server.url, agents=34, role_extra="max_concurrency: 4"))
        run = tmp_path / "run"
        env = {**os.environ, KEY_ENV: KEY}
        cmd = [*BIASIM, "run", str(study), "--allow-endpoint", "127.0.0.1", "--out", str(run)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while answered_calls(run / "calls.sqlite") < 100:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = answered_calls(run / "calls.sqlite")
        assert before < 408
        done = subprocess.run(
            [*BIASIM, "run", "--resume", str(run), "--allow-endpoint", "127.0.0.1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        # Only the calls in flight at the kill (at most 4, answered but not yet stored) were
        # sent twice; every stored answer was read back, not paid for again.
        sent_twice = sum(n - 1 for n in server.bodies.values())
        assert len(server.bodies) == 408 and sent_twice <= 4

    results = pd.read_parquet(run / "results.parquet")
    assert len(results) == 408 and (results["status"] == "answered").all()
    assert results["cached"].sum() == 0  # a resume says where each answer first came from
    assert files_holding(run, KEY) == []


#: An in-house model: logistic regression trained on past decisions that held women back at
#: the same experience (the declared bias), scoring each applicant record the stage writes.
SKLEARN_MODEL = """
import numpy as np
from sklearn.linear_model import LogisticRegression

rng = np.random.default_rng(0)
years = rng.integers(0, 13, 4000)
female = rng.integers(0, 2, 4000)
hired = rng.random(4000) < 1 / (1 + np.exp(-(-2.0 + 0.4 * years - 1.5 * female)))
MODEL = LogisticRegression().fit(np.c_[years, female], hired)


def features(fields):
    return [[float(fields["years"]), 1.0 if fields["gender"] == "female" else 0.0]]


def screen(fields):
    probability = MODEL.predict_proba(features(fields))[0, 1]
    decision = "advance" if probability >= 0.5 else "reject"
    return {"model": {"p_hire": probability}, "label": decision}
"""

PYTHON_ROLE = """\
backend: python
model: inhouse-logreg-2026
options:
  function: inhouse_screen_model:screen
  response:
    score: model.p_hire
    decision: $.label
"""


def test_sklearn_model_in_process_is_audited_with_the_same_tables(tmp_path, cli, monkeypatch):
    (tmp_path / "inhouse_screen_model.py").write_text(SKLEARN_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    study = tmp_path / "inhouse.yaml"
    study.write_text(study_text("", role=PYTHON_ROLE))
    run = tmp_path / "run"
    untrusted = cli.invoke(app, ["run", str(study), "--out", str(run)])
    assert untrusted.exit_code == 2 and not run.exists()
    assert "--trust-backend python:inhouse_screen_model" in untrusted.stderr
    assert "inhouse_screen_model" not in sys.modules  # its code did not run
    trust = ["--trust-backend", "python:inhouse_screen_model"]
    result = cli.invoke(app, ["run", str(study), "--out", str(run), *trust])
    assert result.exit_code == 0, result.output + result.stderr

    import inhouse_screen_model as model  # the module the run imported

    results = pd.read_parquet(run / "results.parquet")
    assert (results["status"] == "answered").all() and len(results) == 120
    records = [
        {"years": YEARS[e], "gender": g}
        for e, g in zip(results["experience"], results["gender"], strict=True)
    ]
    truth = [model.screen(r) for r in records]
    assert results["score"].tolist() == pytest.approx([t["model"]["p_hire"] for t in truth])
    assert results["decision"].tolist() == [t["label"] for t in truth]
    # Trained on biased decisions, it advances senior women only, men from mid-level on.
    rates = (results["decision"] == "advance").groupby(results["gender"]).mean()
    assert rates.to_dict() == pytest.approx({"female": 1 / 3, "male": 2 / 3})

    audited = cli.invoke(app, ["audit", str(run), "--format", "ll144"])
    assert audited.exit_code == 0, audited.output + audited.stderr
    [(where, _)] = json.loads((run / "summary.json").read_text())["audits"].items()
    sex = pd.read_csv(run / where / "ll144_sex.csv").set_index("gender")
    assert sex.loc["female", "impact_ratio"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("no_such_module_xyz:screen", "no module `no_such_module_xyz` on the Python path"),
        ("not a target", "needs `function: module:function`"),
    ],
)
def test_python_target_errors_are_exit_2_at_validate(tmp_path, cli, function, message):
    study = tmp_path / "inhouse.yaml"
    study.write_text(
        study_text("", role=PYTHON_ROLE.replace("inhouse_screen_model:screen", function))
    )
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2, result.output
    line = next(i for i, t in enumerate(study.read_text().splitlines(), 1) if "function:" in t)
    assert f"inhouse.yaml:{line}: roles.screener.options.function: " in result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("inhouse_broken:screen", "importing `inhouse_broken:screen` failed: ZeroDivisionError"),
        ("inhouse_ok:missing", "module `inhouse_ok` has no `missing`"),
    ],
)
def test_python_import_errors_are_exit_2_before_any_call(
    tmp_path, cli, monkeypatch, function, message
):
    (tmp_path / "inhouse_broken.py").write_text("x = 1 / 0\n")
    (tmp_path / "inhouse_ok.py").write_text("def screen(document):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    study = tmp_path / "inhouse.yaml"
    study.write_text(
        study_text("", role=PYTHON_ROLE.replace("inhouse_screen_model:screen", function))
    )
    assert cli.invoke(app, ["validate", str(study)]).exit_code == 0  # no code runs to validate
    run = tmp_path / "run"
    module = function.partition(":")[0]
    result = cli.invoke(
        app, ["run", str(study), "--out", str(run), "--trust-backend", f"python:{module}"]
    )
    assert result.exit_code == 2, result.output
    line = next(i for i, t in enumerate(study.read_text().splitlines(), 1) if "function:" in t)
    assert f"inhouse.yaml:{line}: roles.screener.options.function: " in result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not run.exists()


def test_a_function_that_raises_is_a_recorded_error_per_call(tmp_path, cli, monkeypatch):
    source = (
        "def screen(fields):\n"
        "    if fields['gender'] == 'female':\n"
        "        raise ValueError('no female model')\n"
        "    return {'model': {'p_hire': 0.9}, 'label': 'advance'}\n"
    )
    (tmp_path / "inhouse_partial.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    study = tmp_path / "inhouse.yaml"
    study.write_text(
        study_text(
            "", agents=1, role=PYTHON_ROLE.replace("inhouse_screen_model", "inhouse_partial")
        )
    )
    run = tmp_path / "run"
    trust = ["--trust-backend", "python:inhouse_partial"]
    result = cli.invoke(app, ["run", str(study), "--out", str(run), *trust])
    assert "Traceback" not in result.output + result.stderr
    results = pd.read_parquet(run / "results.parquet").set_index("gender")
    assert (results.loc["male", "status"] == "answered").all()
    errors = results.loc["female", "error"].tolist()
    assert len(errors) == 6
    assert all("inhouse_partial:screen raised ValueError: no female model" in e for e in errors)
