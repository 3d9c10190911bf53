"""A market run killed or interrupted (Ctrl-C) mid-cycle resumes where it stopped: nothing
asked twice, and the result equals an uninterrupted run of the same study (every market draw is
keyed by seed and cycle, and each cycle's calls replay from the store)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests import pipeline_studies
from tests.conftest import answered_calls
from tests.market_studies import market, referral_market

BIASIM = [sys.executable, "-m", "biasim"]
COLUMNS = ["unit_id", "replicate", "cycle", "stage", "gender", "persona_name", "selected", "reads"]
#: With referrals and reapplication the graph, the referrers and the histories are rebuilt on
#: resume from the seed and the replayed cycles: their columns must match too.
REFERRAL_COLUMNS = ["referred_by", "reapplied", "applications_before", "rejections_before"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("data", "columns", "calls", "kill_at", "stop"),
    # 3 calls a cycle, 24 in all: stopped in cycle 4 of 8 by a kill or by Ctrl-C (SIGINT: the
    # run saves what it has and exits), or killed in the second replicate market (its cycle 1
    # or 2 of 4), which must start from its own workforce (and, with referrals, its own
    # graph and histories) again on resume; with a policy (4 calls a cycle, 32 in all, and the
    # letter of one applicant only the policy's trajectory draws: 33), both trajectories of the
    # second market must; a policy from cycle 3 (3 calls a cycle, then 4: 28) must be the base
    # again before cycle 3 of the second market.
    [
        (market(cycles=8), COLUMNS, 24, 10, signal.SIGKILL),
        (market(cycles=8), COLUMNS, 24, 10, signal.SIGINT),
        (market(cycles=4, market={"replicates": 2}), COLUMNS, 24, 14, signal.SIGKILL),
        (
            market(
                cycles=4,
                market={"replicates": 2},
                policies={"redacted": {"stages": {"offer": {"author": "redacted"}}}},
            ),
            COLUMNS,
            33,
            19,
            signal.SIGKILL,
        ),
        (
            market(
                cycles=4,
                market={"replicates": 2},
                policies={"late": {"stages": {"offer": {"author": "redacted"}}, "from_cycle": 3}},
            ),
            COLUMNS,
            28,
            16,
            signal.SIGKILL,
        ),
        (
            referral_market(0.5, cycles=8, market={"reapply": {"probability": 0.5}}),
            COLUMNS + REFERRAL_COLUMNS,
            24,
            10,
            signal.SIGKILL,
        ),
        (
            referral_market(
                0.5, cycles=4, market={"reapply": {"probability": 0.5}, "replicates": 2}
            ),
            COLUMNS + REFERRAL_COLUMNS,
            24,
            14,
            signal.SIGKILL,
        ),
    ],
    ids=[
        "SIGKILL",
        "SIGINT",
        "second-market",
        "second-market-policy",
        "second-market-late-policy",
        "referrals",
        "referrals-second-market",
    ],
)
def test_a_market_stopped_mid_cycle_resumes_to_the_uninterrupted_result(
    tmp_path: Path,
    data: dict,
    columns: list[str],
    calls: int,
    kill_at: int,
    stop: signal.Signals,
) -> None:
    for role in data["roles"].values():
        role["options"] = {"latency_ms": 60}
    study = pipeline_studies.write(tmp_path / "market.yaml", data)
    whole, out = tmp_path / "whole", tmp_path / "run"
    subprocess.run(
        [*BIASIM, "run", str(study), "--out", str(whole)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [*BIASIM, "run", str(study), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while answered_calls(out / "calls.sqlite") < kill_at:
        assert proc.poll() is None, "run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, stop)  # SIGINT: Ctrl-C, the run saves what it has and exits
    proc.wait(timeout=60)
    before = answered_calls(out / "calls.sqlite")
    assert kill_at <= before < calls
    done = subprocess.run(
        [*BIASIM, "run", "--resume", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"new calls: {calls - before}" in " ".join(done.stdout.split())
    with sqlite3.connect(out / "calls.sqlite") as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert total == distinct == calls  # no call was asked twice
    resumed = pd.read_parquet(out / "results.parquet")[columns]
    expected = pd.read_parquet(whole / "results.parquet")[columns]
    if "referred_by" in columns:  # the run referred and reapplied before and after the kill
        assert expected["referred_by"].notna().sum() == 8 and expected["reapplied"].any()
    pd.testing.assert_frame_equal(resumed, expected)
    assert (out / "market.csv").read_bytes() == (whole / "market.csv").read_bytes()
    # The total grows with letters only a policy's applicants write (counted again on the
    # resume's replay): both runs end with every unit they expected done.
    summaries = [json.loads((run / "summary.json").read_text()) for run in (whole, out)]
    assert [s["units_expected"] for s in summaries] == [s["units"] for s in summaries]
    assert summaries[0]["units_expected"] == summaries[1]["units_expected"]
