"""What every built-in study writes, run once on the synthetic responder (tests/builtin_runs.py):
its ``summary.json`` validates against the versioned schema in the docs, and so do the summaries
``compare``, ``audit`` and ``analyze`` write; its tables equal the golden recordings
(``tests/golden``: ``make golden`` rewrites them deliberately).

The studies are parametrized at module scope, so pytest runs a study's tests one after the other
and each study runs once."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from biasim.simulator.cli import app
from biasim.simulator.report.outputs import print_report
from tests.builtin_runs import STUDIES, BuiltinRuns
from tests.golden import changes, golden_path, run_text
from tests.paths import ROOT

SCHEMA = ROOT / "docs" / "reference" / "summary.schema.json"


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES, scope="module")
def test_summary_validates_against_the_docs_schema(name: str, builtin_runs: BuiltinRuns) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    summary = json.loads((builtin_runs(name) / "summary.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(summary)
    assert summary["schema_version"] == int(schema["$id"].rsplit(":", 1)[1])
    assert [a["kind"] for a in summary["analyses"]], name


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES, scope="module")
def test_tables_equal_the_golden_recording(name: str, builtin_runs: BuiltinRuns) -> None:
    path = golden_path(name)
    assert path.is_file(), f"no recording of {name}: run make golden"
    found = changes(path.read_text(encoding="utf-8"), run_text(builtin_runs(name)))
    assert not found, f"{name}'s tables changed (make golden, if meant):\n" + "\n".join(found)


#: A p-value's key in a summary: ``p``, ``p_value``, ``p_adjusted``, ``p_welch``, ``sign_p``...
P_KEY = re.compile(r"^(p|p_[a-z_]+|[a-z_]+_p|[a-z_]*p_value)$")


def _tiny_ps(value: Any) -> Any:
    """The summary with every p-value at 0.0002 and every other fraction at 0.5, so any
    ``0.000`` the console prints is a p written with a number format instead of as a p."""
    if isinstance(value, dict):
        return {
            k: 0.0002 if P_KEY.match(k) and isinstance(v, float) else _tiny_ps(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_tiny_ps(v) for v in value]
    return 0.5 if isinstance(value, float) else value


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES, scope="module")
def test_every_console_p_below_a_thousandth_reads_as_such(
    name: str, builtin_runs: BuiltinRuns
) -> None:
    """Each kind prints its p columns by hand; they all go through one p format (``fmt(.., "p")``
    or ``Column(.., "p")``): a p of 0.0002 reads ``< 0.001``, never ``0.000``."""
    summary = json.loads((builtin_runs(name) / "summary.json").read_text(encoding="utf-8"))
    buffer = io.StringIO()
    print_report(_tiny_ps(summary), Console(file=buffer, width=250, color_system=None))
    printed = buffer.getvalue()
    assert "0.000" not in printed, next(line for line in printed.splitlines() if "0.000" in line)


@pytest.mark.slow
def test_compare_audit_and_analyze_write_summaries_that_validate(
    builtin_runs: BuiltinRuns, tmp_path: Path, cli
) -> None:
    """The other routes that write a summary: ``compare`` (its own fields; a pipeline kind's
    part per run, under ``models``), ``audit`` (attached to the run) and ``analyze``
    (rewritten from the stored results)."""
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    copies = {}
    for study in ("emergency_response", "hiring_pipeline"):
        copies[study] = [tmp_path / study / side for side in ("a", "b")]
        for copy in copies[study]:
            shutil.copytree(builtin_runs(study), copy)
    first = copies["emergency_response"][0]
    routes = [
        *[
            (["compare", *map(str, runs), "--out", str(tmp_path / study / "cmp")], study)
            for study, runs in copies.items()
        ],
        (["audit", str(first), "--format", "ll144"], "emergency_response"),
        (["analyze", str(first)], "emergency_response"),
    ]
    for args, study in routes:
        result = cli.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        out = tmp_path / study / "cmp" if args[0] == "compare" else first
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        validator.validate(summary)
        assert summary["analyses"], args
    compared = json.loads((tmp_path / "hiring_pipeline" / "cmp" / "summary.json").read_text())
    assert "compared_runs" in compared and "models" in compared["analyses"][0]
    assert "audits" in summary  # analyze keeps the audit
