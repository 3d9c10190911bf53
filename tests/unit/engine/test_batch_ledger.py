"""The run directory's record of its batches survives a restart, and a line cut by a kill is
not taken for an accepted batch."""

from __future__ import annotations

from pathlib import Path

from biasim.simulator.engine.batching import BatchLedger


def test_a_restarted_ledger_knows_the_pending_batches_and_the_failed_calls(tmp_path: Path) -> None:
    path = tmp_path / "batches.jsonl"
    ledger = BatchLedger(path)
    ledger.write({"event": "submitted", "batch_id": "b1", "keys": ["k1", "k2"]})
    ledger.write({"event": "submitted", "batch_id": "b2", "keys": ["k3"]})
    ledger.write({"event": "collected", "batch_id": "b1", "failed": ["k2"]})
    with path.open("ab") as handle:
        handle.write(b'{"event": "submitted", "batch_id": "b3", "ke')  # killed mid-line
    again = BatchLedger(path)
    assert again.pending == {"b2": ["k3"]}
    assert again.failed == {"k2"} and again.submitted == ["b1", "b2"]
    again.write({"event": "collected", "batch_id": "b2", "failed": []})
    assert not BatchLedger(path).pending  # written on a line of its own after the cut one
