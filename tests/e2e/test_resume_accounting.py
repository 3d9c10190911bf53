"""After ``--resume`` the accounting counts each unit's final state: calls that failed and were
asked again count as redone, not as errors still standing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests.e2e.test_fast_failures import STUDY
from tests.loopback_llm_server import Fault, LoopbackLLMServer


def test_a_resume_that_fixes_every_error_leaves_no_error_in_the_accounting(
    tmp_path: Path,
) -> None:
    with LoopbackLLMServer() as server:
        study = tmp_path / "s.yaml"
        options = json.dumps({"base_url": server.openai_base_url})
        study.write_text(
            STUDY.format(probe=60, options=options).replace("max_attempts: 4", "max_attempts: 1")
        )
        out = tmp_path / "run"
        server.fault_every(2, Fault.http_error(500))
        first = execute(prepare(RunOptions(study=str(study), out=out, max_error_rate=1.0)))
        errors = int((first.results["status"] == "error").sum())
        assert 0 < errors < 6
        server.fault_every(0, None)
        second = execute(prepare(RunOptions(resume=out)))
    assert (second.results["status"] == "answered").all()
    (row,) = second.summary["accounting"]["by_role"]
    assert (row["answered"], row["invalid"], row["error"]) == (6, 0, 0)
    assert row["redone"] == errors and row["calls"] == 6 + errors
    saved = json.loads((out / "summary.json").read_text())["accounting"]["by_role"][0]
    assert saved["error"] == 0 and saved["redone"] == errors


def test_a_run_killed_before_its_call_store_existed_can_be_resumed(tmp_path: Path) -> None:
    from tests.conftest import write_study

    study = write_study(tmp_path / "s.yaml", agents=2)
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(study), out=out)))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(status="running", sessions=manifest["sessions"][:1])
    del manifest["counts"]  # written when a session ends, so not yet there
    # What a kill right after the manifest was written leaves: the manifest alone.
    shutil.rmtree(out)
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps(manifest))
    resumed = execute(prepare(RunOptions(resume=out)))
    assert resumed.status == "complete" and len(resumed.results) == 6
    assert (resumed.results["status"] == "answered").all()
