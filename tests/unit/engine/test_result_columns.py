"""The results writer turns a stage's rows into columns: every row's value under its column's
name, ``None`` where a row lacks it, whatever order or set of keys each row has."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from biasim.simulator.engine import results as results_module
from biasim.simulator.engine.results import ResultsWriter, result_columns

NAMES = ["unit_id", "stage", "valid", "text", "selected", "latency_s"]
SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("stage", pa.string()),
        ("valid", pa.bool_()),
        ("text", pa.string()),
        ("selected", pa.string()),
        ("latency_s", pa.float64()),
        ("reasks", pa.int64()),
    ]
)


def _row(rng: random.Random, i: int) -> dict[str, object]:
    row: dict[str, object] = {
        "unit_id": f"u{i}",
        "stage": rng.choice(["apply", "screen"]),
        "valid": rng.random() < 0.8,
        "text": rng.choice(["a", None, "=1+1"]),
        "selected": rng.choice(["1|2", "3"]),
        "latency_s": rng.random(),
        "not_a_column": i,
    }
    items = list(row.items())
    # Most rows of a stage share one key order; some differ, lack keys or hold others.
    if rng.random() < 0.2:
        rng.shuffle(items)
    if rng.random() < 0.2:
        items = [kv for kv in items if rng.random() < 0.7 or kv[0] == "unit_id"]
    return dict(items)


def test_columns_hold_each_rows_value_by_name() -> None:
    rng = random.Random(3)
    for trial in range(300):
        rows = [_row(rng, i) for i in range(rng.randint(0, 40))]
        if trial % 3 == 0:  # long runs of rows with the same keys in the same order
            rows = [dict(sorted(r.items())) for r in rows]
        columns = result_columns(rows, NAMES)
        assert list(columns) == NAMES
        for name in NAMES:
            assert list(columns[name]) == [row.get(name) for row in rows], (trial, name)


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("batches", [0, 3])
def test_the_results_handed_on_are_the_parquet_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool, batches: int
) -> None:
    if not kept:
        monkeypatch.setattr(results_module, "KEPT_BYTES", 100)  # past it: read from the file
    rng = random.Random(11)
    writer = ResultsWriter(tmp_path / "r.parquet", tmp_path / "r.csv", SCHEMA)
    for b in range(batches):
        writer.write([_row(rng, 100 * b + i) for i in range(50)])
    writer.close()
    pd.testing.assert_frame_equal(writer.results(), pd.read_parquet(tmp_path / "r.parquet"))
    assert (writer._kept is not None) == (kept or not batches)


def test_a_written_table_reads_back_row_by_row(tmp_path: Path) -> None:
    rng = random.Random(5)
    batches = [[_row(rng, 100 * b + i) for i in range(60)] for b in range(3)]
    writer = ResultsWriter(tmp_path / "r.parquet", tmp_path / "r.csv", SCHEMA)
    for rows in batches:
        writer.write(rows)
    writer.close()
    table = pd.read_parquet(tmp_path / "r.parquet")
    expected = [row for rows in batches for row in rows]
    assert len(table) == len(expected)
    for record, row in zip(table.to_dict("records"), expected, strict=True):
        for name in NAMES:
            value = record[name]
            assert (None if pd.isna(value) else value) == row.get(name), (row["unit_id"], name)
