"""The built-in aedt_audit study, issue 48's done-when end to end: the docs' walk-through run
as written (`biasim vendor-demo`, run, `audit --format eeoc`, `gate`) finds the declared bias and
the gate exits 1 with JUnit XML; with no bias declared it passes; without the demo the run stops
saying the server is not running; the key reaches no file. The gate's rule passes a fair tool
in at least 93 of 100 seeds (simulated tool outputs through the same audit and gate); a
scikit-learn model through `backend: python` gives the same tables; every preset renders for a
run and for a CSV."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.registry import AUDIT_FORMATS
from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.tools.audit import AuditOptions
from biasim.simulator.tools.gate import gate_rules, run_gate
from biasim.simulator.tools.vendor_demo import label, score
from tests.e2e.test_decision_tools import PYTHON_ROLE, SKLEARN_MODEL
from tests.paths import ROOT

KEY = "demo-key-for-the-walk-through"
GUIDE = ROOT / "docs" / "guides" / "decision-tools.md"
#: The files of an eeoc audit of a run whose tool scores (``--score-col score``): the same
#: for the vendor API and the in-house model.
EEOC_FILES = {
    f"eeoc_{name}"
    for name in (
        *(f"{t}.csv" for t in ("sex", "race_ethnicity", "intersectional", "counts")),
        *(f"{k}_{t}.csv" for k in ("positions", "sweep") for t in ("sex", "race_ethnicity")),
        "sweep_sex.png",
        "sweep_race_ethnicity.png",
    )
} | {"audit.json"}
MODULE = "aedt_inhouse_model"
MARKER = "<!-- walk-through: tests/e2e/test_aedt_audit.py runs these lines as written -->"


def walk_through() -> list[str]:
    """The walk-through's command lines, as the guide writes them."""
    text = GUIDE.read_text()
    block = text[text.index(MARKER) :].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


class Demo:
    """`biasim vendor-demo ...` in the background, on a free port the test passes on in
    AEDT_VENDOR_URL (as the guide says to move it)."""

    def __init__(self, line: str, extra: tuple[str, ...] = ()) -> None:
        args = shlex.split(line.removesuffix("&"))[1:]
        cmd = [sys.executable, "-m", "biasim", *args, "--port", "0", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=os.environ)

    def __enter__(self) -> str:
        first = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("AEDT_VENDOR_URL="), first
        return first.strip().split("=", 1)[1]

    def __exit__(self, *_: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run_lines(cli, lines: list[str]) -> list:
    """Each `biasim` line through the CLI, in the current directory; exports set."""
    results = []
    for line in lines:
        words = shlex.split(line)
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            os.environ[name] = value
            continue
        assert words[0] == "biasim"
        results.append(cli.invoke(app, words[1:]))
    return results


@pytest.fixture
def walk_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AEDT_DEMO_KEY", "unset-yet")  # the walk-through's export replaces it
    monkeypatch.delenv("AEDT_VENDOR_URL", raising=False)
    return tmp_path


def test_the_walk_through_finds_the_bias_and_the_gate_fails(walk_dir, cli, monkeypatch):
    lines = walk_through()
    assert lines[0] == f"export AEDT_DEMO_KEY={KEY}" and lines[1] == "biasim vendor-demo &"
    run_lines(cli, lines[:1])
    with Demo(lines[1]) as url:
        monkeypatch.setenv("AEDT_VENDOR_URL", url)
        ran, audited, gated = run_lines(cli, lines[2:])
    assert ran.exit_code == 0, ran.output + ran.stderr
    assert audited.exit_code == 0, audited.output + audited.stderr
    assert gated.exit_code == 1, gated.output + gated.stderr
    junit = ET.parse(walk_dir / "gate.xml").getroot()
    assert int(junit.get("failures")) >= 1 and (walk_dir / "gate.md").is_file()

    run = walk_dir / "runs" / "aedt"
    results = pd.read_parquet(run / "results.parquet")
    assert len(results) == 240 and (results["status"] == "answered").all()
    [(where, _)] = json.loads((run / "summary.json").read_text())["audits"].items()
    sex = pd.read_csv(run / where / "eeoc_sex.csv").set_index("gender")
    assert sex.loc["female", "impact_ratio_ci_high"] < 0.8  # the bias is found
    positions = pd.read_csv(run / where / "eeoc_positions_sex.csv").set_index("gender")
    assert positions.loc["female", "mean_position"] > positions.loc["male", "mean_position"]
    assert {p.name for p in (run / where).iterdir()} == EEOC_FILES
    # The key went to the demo and into no file of the run, the audit, the gate or the study.
    assert files_holding(walk_dir, KEY) == []
    assert files_holding(builtin_path("aedt_audit").parent, KEY) == []


def test_with_no_bias_declared_the_same_steps_pass(walk_dir, cli, monkeypatch):
    lines = walk_through()
    run_lines(cli, lines[:1])
    with Demo(lines[1], ("--penalty", "0")) as url:
        monkeypatch.setenv("AEDT_VENDOR_URL", url)
        ran, audited, gated = run_lines(cli, lines[2:])
    assert (ran.exit_code, audited.exit_code) == (0, 0), ran.output + audited.output
    assert gated.exit_code == 0, gated.output + gated.stderr
    assert ET.parse(walk_dir / "gate.xml").getroot().get("failures") == "0"


def test_without_the_demo_the_run_says_the_server_is_not_running(walk_dir, cli, monkeypatch):
    lines = walk_through()
    run_lines(cli, lines[:1])
    monkeypatch.setenv("AEDT_VENDOR_URL", "http://127.0.0.1:9/v1/score")  # nothing listens
    [ran] = run_lines(cli, lines[2:3])
    assert ran.exit_code == 3 and "Traceback" not in ran.output + ran.stderr
    said = " ".join((ran.output + ran.stderr).split())
    assert "connection refused" in said and "is the server running?" in said


# --- the gate's calibration on the demo's own outputs ----------------------------------------


def _demo_decisions(seed: int, penalty: float) -> pd.DataFrame:
    """One audit of the demo's scorer: the study's design (race x gender x experience, 20 per
    value) with names drawn afresh, decided by the demo's score and label."""
    rng = np.random.default_rng(seed)
    rows = []
    for race in ("White", "Black"):
        for gender in ("female", "male"):
            for years in (2, 6, 10):
                for _ in range(20):
                    name = f"name{rng.integers(1 << 30)}"
                    value = score({"name": name, "gender": gender, "years": years}, penalty)
                    rows.append((race, gender, label(value) == "advance"))
    return pd.DataFrame(rows, columns=["race", "gender", "selected"])


def _gate_passes(tmp_path: Path, seed: int, penalty: float) -> bool:
    path = tmp_path / f"demo{seed}.csv"
    _demo_decisions(seed, penalty).to_csv(path, index=False)
    options = AuditOptions(audit_format="eeoc")
    rules = gate_rules(path, ["impact_ratio.ci_high >= 0.8"], options)
    return run_gate(path, rules, options).passed


@pytest.mark.slow
def test_the_studys_gate_passes_a_fair_demo_in_93_of_100_seeds(tmp_path) -> None:
    from biasim.simulator.study.load import load_study

    assert load_study("aedt_audit").config.gates == ["impact_ratio.ci_high >= 0.8"]
    passed = sum(_gate_passes(tmp_path, seed, 0.0) for seed in range(100))
    print(f"the gate passes {passed} of 100 seeds with no bias")
    assert passed >= 93
    found = sum(not _gate_passes(tmp_path, 500 + seed, 0.2) for seed in range(10))
    assert found == 10


# --- the same tables from an in-house model; every preset for a run and a CSV ----------------


def test_a_sklearn_model_gives_the_same_tables_and_every_preset_renders(
    tmp_path, cli, monkeypatch, request
):
    # A module name of its own: the decision-tools test checks that its module is not
    # imported before it trusts it, whichever test runs first in a worker.
    (tmp_path / f"{MODULE}.py").write_text(SKLEARN_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: sys.modules.pop(MODULE, None))
    text = builtin_path("aedt_audit").read_text()
    role = re.search(r"  screener:\n(.*?)\npersonas:", text, re.S)
    assert role is not None
    role_text = PYTHON_ROLE.replace("inhouse_screen_model", MODULE)
    python_role = "".join(f"    {line}\n" for line in role_text.splitlines())
    study = tmp_path / "inhouse.yaml"
    study.write_text(text.replace(role.group(1), python_role.rstrip()))
    run = tmp_path / "run"
    trust = ["--trust-backend", f"python:{MODULE}"]
    ran = cli.invoke(app, ["run", str(study), "--out", str(run), *trust])
    assert ran.exit_code == 0, ran.output + ran.stderr

    csv = tmp_path / "decisions.csv"
    results = pd.read_parquet(run / "results.parquet")
    results.assign(selected=results["decision"] == "advance")[
        ["gender", "race", "score", "selected"]
    ].to_csv(csv, index=False)
    for name in AUDIT_FORMATS.names():
        for source, extra in ((run, ["--score-col", "score"]), (csv, [])):
            out = tmp_path / f"{name}-{source.name}"
            args = ["audit", str(source), "--format", name, "--out", str(out), *extra]
            audited = cli.invoke(app, args)
            assert audited.exit_code == 0, (name, audited.output + audited.stderr)
            assert (out / "audit.json").is_file()
        assert "Impact ratio" in (run / "report.html").read_text()
    # The in-house model's audit has the files of the vendor API's (the walk-through's).
    assert {p.name for p in (tmp_path / "eeoc-run").iterdir()} == EEOC_FILES
    sex = pd.read_csv(tmp_path / "eeoc-run" / "eeoc_sex.csv").set_index("gender")
    assert sex.loc["female", "impact_ratio"] == pytest.approx(0.5)
    assert files_holding(tmp_path, KEY) == []


def test_the_demo_without_its_key_or_on_a_taken_port_is_exit_2(cli, monkeypatch) -> None:
    import socket

    monkeypatch.delenv("AEDT_DEMO_KEY", raising=False)
    unset = cli.invoke(app, ["vendor-demo", "--serve-s", "0"])
    assert unset.exit_code == 2 and "--key-env" in unset.stderr
    assert "AEDT_DEMO_KEY is not set" in unset.stderr
    monkeypatch.setenv("AEDT_DEMO_KEY", KEY)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = cli.invoke(app, ["vendor-demo", "--port", port, "--serve-s", "0"])
    assert busy.exit_code == 2 and f"cannot listen on {port}" in busy.stderr
    served = cli.invoke(app, ["vendor-demo", "--port", "0", "--serve-s", "0"])
    assert served.exit_code == 0 and "AEDT_VENDOR_URL=http://127.0.0.1:" in served.output
    assert KEY not in served.output + served.stderr
