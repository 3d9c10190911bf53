"""The built-in counterfactual variants of the seed studies that write text (issue 47 item 5):
each twin's prompt is its agent's, word for word, but for the swapped name, at the same seed;
and the study's own analyses read the agents' documents as the parent study does."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from tests.builtin_runs import BuiltinRuns

#: Variant -> (its parent, the writing stage swapped).
VARIANTS = {
    "bias_transmission_pipeline_counterfactual": ("bias_transmission_pipeline", "apply"),
}


def _requests(out: Path, stage: str) -> dict[str, dict]:
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute("select unit_id, request from calls where stage = ?", (stage,))
        return {unit: json.loads(request) for unit, request in rows.fetchall()}


@pytest.mark.parametrize("study", sorted(VARIANTS))
def test_twins_differ_only_in_the_swapped_name(builtin_runs: BuiltinRuns, study: str) -> None:
    _, stage = VARIANTS[study]
    out = builtin_runs(study)
    requests = _requests(out, stage)
    names = pd.read_parquet(out / "results.parquet").set_index("unit_id")["persona_name"]
    twins = [unit for unit in requests if "/cf=" in unit]
    assert twins and len(twins) == len(requests) - len(twins)
    for unit in twins:
        own_unit = unit.split("/cf=")[0]
        request, own = requests[unit], requests[own_unit]
        name, own_name = names[unit], names[own_unit]
        assert name != own_name and request["seed"] == own["seed"]
        text = request["messages"][-1]["content"]
        own_text = own["messages"][-1]["content"]
        assert own_name in own_text and name in text
        assert text.replace(name, own_name) == own_text
        assert len(request["messages"]) == len(own["messages"])


@pytest.mark.parametrize("study", sorted(VARIANTS))
def test_own_analyses_read_what_the_parent_reads(builtin_runs: BuiltinRuns, study: str) -> None:
    parent, _ = VARIANTS[study]
    ours, theirs = builtin_runs(study) / "tables", builtin_runs(parent) / "tables"
    shared = sorted(p.name for p in theirs.glob("*.csv"))
    assert shared
    for name in shared:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    assert (ours / "counterfactual_metrics.csv").is_file()
