"""Two cycles of the built-in labour market on the embedded SmolLM2 model (issue 46: "a
2-cycle run on the embedded model finishes"): applicants write real letters, a manager drawn
from the workforce reads them, and the composition table follows every cycle whatever the small
model answered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path

BIASIM = [sys.executable, "-m", "biasim"]


@pytest.mark.model
def test_two_market_cycles_run_on_the_embedded_model(tmp_path: Path) -> None:
    study = tmp_path / "market.yaml"
    study.write_text(
        f"extends: {builtin_path('market_small')}\n"
        "name: market_two_cycles\n"
        "cycles: 2\n"
        # Short letters: the 135M model's speed, not the market, sets this test's time.
        "roles:\n  applicant: {max_tokens: 48}\n"
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [*BIASIM, "run", str(study), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr + done.stdout
    results = pd.read_parquet(out / "results.parquet")
    assert not results["synthetic"].any() and set(results["backend"]) == {"local"}
    # Per cycle: 4 letters, and one manager's reading of the pool of 4.
    assert results.groupby("cycle")["stage"].value_counts().to_dict() == {
        (c, s): n for c in (1, 2) for s, n in (("apply", 4), ("offer", 1))
    }
    market = pd.read_csv(out / "market.csv")
    assert sorted(market["cycle"].unique()) == [0, 1, 2]
    per_cycle = market.groupby("cycle")[["applicants", "readers", "hires", "left", "workforce"]]
    totals = per_cycle.sum()
    assert list(totals["applicants"]) == [0, 4, 4] and list(totals["readers"]) == [0, 1, 1]
    # One leaver a cycle; the hire joins only when the manager's answer named an applicant.
    assert list(totals["left"]) == [0, 1, 1]
    assert totals.loc[0, "workforce"] == 8
    for cycle in (1, 2):
        expected = totals.loc[cycle - 1, "workforce"] - 1 + totals.loc[cycle, "hires"]
        assert totals.loc[cycle, "workforce"] == expected
