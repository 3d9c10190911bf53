"""A run directory is read as it is, or not at all: `audit` and `analyze` wait for no live
writer and say when results are partial; a duplicated unit is refused, not counted twice; a
call store that lost or changed answers is reported before `--resume` pays for them again."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.common.rundir import RunLock
from biasim.simulator.engine.store import CallRecord, CallStore
from biasim.simulator.llm.types import LLMResponse
from tests.conftest import write_study
from tests.golden_studies import STUDIES


@pytest.fixture(scope="module")
def hiring_run(tmp_path_factory) -> Path:
    """A small finished hiring run (an analysis that decides, so it can be audited)."""
    from typer.testing import CliRunner

    tmp = tmp_path_factory.mktemp("hiring")
    text, _ = STUDIES["hiring_small"]
    study = tmp / "s.yaml"
    study.write_text(text)
    run = tmp / "run"
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, tmp_path / "run", ignore=shutil.ignore_patterns(".lock")))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_audit_and_analyze_refuse_a_live_run_naming_its_writer(hiring_run, tmp_path, cli):
    run = _copy(hiring_run, tmp_path)
    lock = RunLock(run)
    lock.acquire()  # a live writer (a run or a resume) holds the directory
    try:
        for args in (["audit", str(run)], ["analyze", str(run)]):
            result = cli.invoke(app, args)
            assert result.exit_code == 2, result.output
            assert "is being written by pid" in _one_line(result.stderr), args
    finally:
        lock.release()
    assert not (run / "audit").exists()
    assert "audits" not in json.loads((run / "summary.json").read_text())


def test_a_partial_run_is_audited_and_analysed_with_a_warning(hiring_run, tmp_path, cli):
    run = _copy(hiring_run, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(manifest))
    rows = manifest["counts"]["rows"]
    audited = cli.invoke(app, ["audit", str(run)])
    assert audited.exit_code == 0, audited.output
    expected = f"partial results: the run's status is `interrupted` ({rows:,} rows stored)"
    assert expected in _one_line(audited.stderr)
    [audit] = json.loads((run / "summary.json").read_text())["audits"].values()
    assert audit["source"]["partial"].startswith("partial results")
    assert "Partial results: the run" in (run / "report.html").read_text()
    analysed = cli.invoke(app, ["analyze", str(run)])
    assert analysed.exit_code == 0, analysed.output
    assert expected in _one_line(analysed.stderr)
    assert json.loads((run / "summary.json").read_text())["partial"].startswith("partial")
    manifest["status"] = "complete"
    (run / "manifest.json").write_text(json.dumps(manifest))
    again = cli.invoke(app, ["analyze", str(run)])
    assert "partial" not in again.stderr
    assert "partial" not in json.loads((run / "summary.json").read_text())


def test_duplicated_units_in_results_are_refused_not_counted_twice(hiring_run, tmp_path, cli):
    run = _copy(hiring_run, tmp_path)
    results = pd.read_parquet(run / "results.parquet")
    doubled = pd.concat([results, results.head(7)], ignore_index=True)
    doubled.to_parquet(run / "results.parquet")
    before = (run / "summary.json").read_text()
    manifest = (run / "manifest.json").read_text()
    for args in (["analyze", str(run), "--accept-edits"], ["audit", str(run), "--accept-edits"]):
        result = cli.invoke(app, args)
        assert result.exit_code == 2, result.output
        message = _one_line(result.stderr)
        assert "results.parquet: unit_id: 7 rows repeat a unit id" in message, message
        assert "counted twice" in message and "Traceback" not in result.output
    assert (run / "summary.json").read_text() == before
    assert (run / "manifest.json").read_text() == manifest  # a refusal records no edit


def _edit(path: Path) -> None:
    """Change one decision in a results table, as a hand edit would."""
    if path.suffix == ".csv":
        text = path.read_text()
        path.write_text(text.replace("Stay", "Evacuate", 1) if "Stay" in text else text + "\n")
    else:
        results = pd.read_parquet(path)
        results.loc[0, "unit_id"] = "edited"
        results.to_parquet(path)


@pytest.mark.parametrize("table", ["results.parquet", "results.csv"])
def test_edited_results_are_refused_until_accepted_and_then_reported(
    hiring_run, tmp_path, cli, table
):
    run = _copy(hiring_run, tmp_path)
    _edit(run / table)
    summary, manifest = (run / "summary.json").read_text(), (run / "manifest.json").read_text()
    for args in (
        ["analyze", str(run)],
        ["audit", str(run)],
        ["compare", str(hiring_run), str(run), "--out", str(tmp_path / "cmp")],
    ):
        refused = cli.invoke(app, args)
        assert refused.exit_code == 2, (args, refused.output)
        message = _one_line(refused.stderr)
        assert f"{run / table}: changed after the run: its SHA-256 is" in message, message
        assert "--accept-edits" in message and "Traceback" not in refused.output
    assert (run / "summary.json").read_text() == summary
    assert (run / "manifest.json").read_text() == manifest
    assert not (run / "audit").exists() and not (tmp_path / "cmp").exists()

    accepted = cli.invoke(app, ["analyze", str(run), "--accept-edits"])
    assert accepted.exit_code == 0, accepted.output
    note = f"results edited after the run: {table} (SHA-256"
    assert note in _one_line(accepted.stderr)
    (edit,) = json.loads((run / "manifest.json").read_text())["results_edits"]
    recorded = json.loads(manifest)["results_sha256"][table]
    assert (edit["file"], edit["recorded_sha256"], edit["by"]) == (table, recorded, "analyze")
    assert edit["seen_sha256"] != recorded
    assert json.loads((run / "summary.json").read_text())["edited"].startswith(note)
    assert "Results edited after the run" in (run / "report.html").read_text()
    # Accepted once, the same tables are read again with the note, by every reader.
    audited = cli.invoke(app, ["audit", str(run)])
    assert audited.exit_code == 0, audited.output
    assert note in _one_line(audited.stderr)
    assert "Results edited after the run" in (run / "report.html").read_text()
    # A second edit is a new one: refused again.
    with (run / table).open("ab") as handle:
        handle.write(b"\n")
    assert cli.invoke(app, ["analyze", str(run)]).exit_code == 2


def test_a_resume_writes_the_tables_again_and_their_digests(tmp_path, cli):
    run = _synthetic_run(tmp_path, cli)
    _edit(run / "results.parquet")
    assert cli.invoke(app, ["analyze", str(run)]).exit_code == 2
    resumed = cli.invoke(app, ["run", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    assert "edited" not in set(pd.read_parquet(run / "results.parquet")["unit_id"])
    assert cli.invoke(app, ["analyze", str(run)]).exit_code == 0


def test_a_run_without_digests_is_refused_saying_how_to_go_on(hiring_run, tmp_path, cli):
    run = _copy(hiring_run, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["results_sha256"]  # as a run from before digests were recorded
    (run / "manifest.json").write_text(json.dumps(manifest))
    refused = cli.invoke(app, ["analyze", str(run)])
    assert refused.exit_code == 2, refused.output
    message = _one_line(refused.stderr)
    assert "results.parquet: manifest.json records no digest of it" in message
    assert "--accept-edits" in message
    assert cli.invoke(app, ["analyze", str(run), "--accept-edits"]).exit_code == 0


_CORRUPT = {
    "lock is a directory": (".lock", None, "cannot be opened as the run's lock file"),
    "manifest not JSON": ("manifest.json", '{"study": ', "not valid JSON"),
    "manifest not an object": ("manifest.json", "[1, 2]", "not a JSON object but list"),
    "manifest study not an object": ("manifest.json", '{"study": 3}', "study: not an object"),
    "manifest not UTF-8": ("manifest.json", b"\xff\xfe{", "unreadable"),
    "summary not JSON": ("summary.json", "{bad", "not valid JSON"),
    "summary not an object": ("summary.json", '"text"', "not a JSON object but str"),
}


@pytest.mark.parametrize("case", list(_CORRUPT))
def test_a_corrupt_run_directory_file_is_exit_2_naming_it(hiring_run, tmp_path, cli, case):
    name, content, expected = _CORRUPT[case]
    run = _copy(hiring_run, tmp_path)
    path = run / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    commands = [["analyze", str(run)], ["audit", str(run)], ["run", "--resume", str(run)]]
    if name == "summary.json":
        commands.pop()  # a resume writes the summary anew
    for args in commands:
        result = cli.invoke(app, args)
        assert result.exit_code == 2, (args, result.output, result.exception)
        message = _one_line(result.stderr)
        assert f"{path}" in message and expected in message, (args, message)
        assert "Traceback" not in result.output


def _synthetic_run(tmp_path: Path, cli) -> Path:
    study = write_study(tmp_path / "s.yaml", agents=2)  # 6 units
    run = tmp_path / "run"
    assert cli.invoke(app, ["run", str(study), "--out", str(run)]).exit_code == 0
    return run


def _new_calls(output: str) -> int:
    text = _one_line(output)
    return int(text.split("new calls: ")[1].split()[0].rstrip(","))


def test_a_missing_store_is_reported_before_any_call_and_needs_reask_lost(tmp_path, cli):
    run = _synthetic_run(tmp_path, cli)
    (run / "calls.sqlite").unlink()
    manifest_before = (run / "manifest.json").read_text()
    refused = cli.invoke(app, ["run", "--resume", str(run)])
    assert refused.exit_code == 2, refused.output
    message = _one_line(refused.stderr)
    assert "calls.sqlite is missing: resuming would ask 6 calls again (paid twice)" in message
    assert "--reask-lost" in message
    assert not (run / "calls.sqlite").exists()  # nothing created, nothing asked
    assert (run / "manifest.json").read_text() == manifest_before
    accepted = cli.invoke(app, ["run", "--resume", str(run), "--reask-lost"])
    assert accepted.exit_code == 0, accepted.output
    assert "asking again as --reask-lost allows" in _one_line(accepted.stderr)
    assert _new_calls(accepted.stdout) == 6


def test_an_altered_answer_is_never_replayed_and_stops_the_resume(tmp_path, cli):
    run = _synthetic_run(tmp_path, cli)
    genuine = pd.read_parquet(run / "results.parquet").sort_values("unit_id")
    with sqlite3.connect(run / "calls.sqlite") as conn:
        conn.execute(
            "UPDATE calls SET text = ?, parsed = ? WHERE id = 1",
            ('{"decision": "Stay", "rationale": "edited"}', '{"decision": "Stay"}'),
        )
    refused = cli.invoke(app, ["run", "--resume", str(run)])
    assert refused.exit_code == 2, refused.output
    message = _one_line(refused.stderr)
    assert "1 answers were changed after they were stored or carry no valid checksum" in message
    assert "(row id 1)" in message and "calls.sqlite" in message
    assert "resuming would ask 1 calls again" in message
    accepted = cli.invoke(app, ["run", "--resume", str(run), "--reask-lost"])
    assert accepted.exit_code == 0, accepted.output
    assert _new_calls(accepted.stdout) == 1
    again = pd.read_parquet(run / "results.parquet").sort_values("unit_id")
    assert "edited" not in set(again["rationale"].dropna())
    # The synthetic model answers the same request the same way: the re-asked answer is genuine.
    assert again["decision"].tolist() == genuine["decision"].tolist()
    # The edited row stays in the store, but its key has an intact answer now: a later resume
    # replays it, asks nothing and needs no --reask-lost.
    later = cli.invoke(app, ["run", "--resume", str(run)])
    assert later.exit_code == 0, later.output
    assert _new_calls(later.stdout) == 0


@pytest.mark.parametrize("checksum", ["NULL", "plain"])
def test_an_edited_answer_with_its_checksum_nulled_or_recomputed_is_refused(
    tmp_path, cli, checksum
):
    import hashlib

    import orjson

    run = _synthetic_run(tmp_path, cli)
    assert (run / "calls.key").stat().st_mode & 0o777 == 0o600
    edited = ('{"decision": "Stay", "rationale": "edited"}', '{"decision": "Stay"}')
    with sqlite3.connect(run / "calls.sqlite") as conn:
        key, status = conn.execute("SELECT key, status FROM calls WHERE id = 2").fetchone()
        # The digest anyone can compute without the store's key (the old, unkeyed one).
        plain = hashlib.blake2b(orjson.dumps([key, status, *edited, None]), digest_size=16)
        conn.execute(
            "UPDATE calls SET text = ?, parsed = ?, checksum = ? WHERE id = 2",
            (*edited, plain.hexdigest() if checksum == "plain" else None),
        )
    manifest_before = (run / "manifest.json").read_text()
    refused = cli.invoke(app, ["run", "--resume", str(run)])
    assert refused.exit_code == 2, refused.output
    message = _one_line(refused.stderr)
    assert f"{run / 'calls.sqlite'}" in message and "(row id 2)" in message, message
    assert "Traceback" not in refused.output
    assert (run / "manifest.json").read_text() == manifest_before
    # A new run replaying the tampered store is refused too, naming it.
    replay = cli.invoke(
        app, ["run", str(tmp_path / "s.yaml"), "--replay", str(run), "--out", str(tmp_path / "r")]
    )
    assert replay.exit_code == 2, replay.output
    assert "(row id 2)" in _one_line(replay.stderr) and not (tmp_path / "r").exists()


def test_a_store_without_its_key_is_refused_saying_how_to_go_on(tmp_path, cli):
    run = _synthetic_run(tmp_path, cli)
    (run / "calls.key").unlink()  # as a store from before answers were signed
    refused = cli.invoke(app, ["run", "--resume", str(run)])
    assert refused.exit_code == 2, refused.output
    message = _one_line(refused.stderr)
    assert "has no readable key file calls.key beside it" in message
    assert "none of its 6 answers can be verified" in message and "--reask-lost" in message
    accepted = cli.invoke(app, ["run", "--resume", str(run), "--reask-lost"])
    assert accepted.exit_code == 0, accepted.output
    assert _new_calls(accepted.stdout) == 6  # asked again, and signed with a new key
    assert cli.invoke(app, ["run", "--resume", str(run)]).exit_code == 0


def test_an_invalid_answer_and_its_reask_are_one_unit_in_the_accounting(tmp_path) -> None:
    store = CallStore(tmp_path / "calls.sqlite")
    for unit in range(12):
        for reask, status in ((0, "invalid"), (1, "answered")):
            record = CallRecord(f"k{unit}-{reask}", f"u{unit}", "s", "r", "b", "m", "{}", reask)
            store.record(record, LLMResponse(text="x", status=status))
    (row,) = store.totals()["by_role"]
    store.close()
    assert (row["units"], row["calls"], row["invalid_first"], row["reasks"]) == (12, 24, 12, 12)
    assert (row["answered"], row["invalid"], row["error"]) == (12, 0, 0)


def test_a_session_that_dies_in_its_analysis_leaves_tables_that_verify(tmp_path, cli, monkeypatch):
    """The digests are recorded when the tables are written, not after the analysis: a run
    killed while it analyses is analysed later without being taken for an edited one."""
    from biasim.simulator.engine import runner

    def killed(*args, **kwargs):
        raise MemoryError("killed while analysing")

    monkeypatch.setattr(runner, "_analysis_summary", killed)
    run = tmp_path / "run"
    study = write_study(tmp_path / "s.yaml", agents=3)
    with pytest.raises(MemoryError):
        cli.invoke(app, ["run", str(study), "--out", str(run)], catch_exceptions=False)
    monkeypatch.undo()
    assert (run / "results.parquet").is_file()
    result = cli.invoke(app, ["analyze", str(run)])
    assert result.exit_code == 0, result.output
    assert "edited" not in result.stderr
