"""The results writer encodes and writes each batch in a thread while the next stage runs: the
tables hold every row in order, and a batch that fails to write fails the run (with the rows
written before it kept), never silently and never as a traceback."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from biasim.simulator.engine.results import ResultsWriter
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests import pipeline_studies

SCHEMA = pa.schema([("unit_id", pa.string()), ("n", pa.int64()), ("text", pa.string())])


def _writer(tmp_path: Path) -> ResultsWriter:
    return ResultsWriter(tmp_path / "results.parquet", tmp_path / "results.csv", SCHEMA)


def test_batches_written_in_a_thread_keep_every_row_in_order(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    expected = []
    for batch in range(5):
        rows = [{"unit_id": f"u{batch}-{i}", "n": i, "text": "=1+1"} for i in range(batch * 7)]
        writer.write(rows)
        expected += rows
    writer.close()

    parquet = pd.read_parquet(tmp_path / "results.parquet")
    csv = pd.read_csv(tmp_path / "results.csv", keep_default_na=False)
    assert parquet["unit_id"].tolist() == [r["unit_id"] for r in expected]
    assert csv["unit_id"].tolist() == [r["unit_id"] for r in expected]
    assert parquet["n"].tolist() == [r["n"] for r in expected]
    # The CSV is still made safe for spreadsheets in the thread.
    assert set(csv["text"]) == {"'=1+1"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_batch_that_fails_to_write_raises_at_the_next_write_or_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _writer(tmp_path)
    append = ResultsWriter._append
    calls = []

    def failing(self: ResultsWriter, table: pa.Table) -> None:
        calls.append(table.num_rows)
        if len(calls) == 2:
            raise OSError("No space left on device")
        append(self, table)

    monkeypatch.setattr(ResultsWriter, "_append", failing)
    writer.write([{"unit_id": "a", "n": 1, "text": "x"}])
    writer.write([{"unit_id": "b", "n": 2, "text": "y"}])
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    writer.close()  # raised once, not again: the rows written before are kept
    assert pd.read_parquet(tmp_path / "results.parquet")["unit_id"].tolist() == ["a"]


def test_a_run_whose_results_fail_to_write_is_failed_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    append = ResultsWriter._append
    batches = []

    def failing(self: ResultsWriter, table: pa.Table) -> None:
        batches.append(table.num_rows)
        if len(batches) == 3:  # the last stage's batch
            raise OSError("No space left on device")
        append(self, table)

    monkeypatch.setattr(ResultsWriter, "_append", failing)
    path = pipeline_studies.write(tmp_path / "pipe.yaml", pipeline_studies.study())
    outcome = execute(prepare(RunOptions(study=str(path), out=tmp_path / "run")))

    assert outcome.status == "failed"
    assert "No space left on device" in outcome.message
    assert outcome.exit_code != 0
    # The stages written before the failure are in the table; the call store has them all.
    assert set(outcome.results["stage"]) == {"apply", "screen"}
