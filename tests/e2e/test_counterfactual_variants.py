"""The built-in counterfactual variants of the seed studies that write text (issue 47 item 5):
each twin's prompt is its agent's, word for word, but for the swapped name, at the same seed;
and the study's own analyses read the agents' documents as the parent study does."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.study.load import load_study
from tests.builtin_runs import BuiltinRuns

#: Variant -> (the writing stage swapped, the columns every set holds fixed).
VARIANTS = {
    "bias_transmission_pipeline_counterfactual": ("apply", ["occupation", "agent_id"]),
    "an2024_hiring_counterfactual": (
        "write",
        ["gender", "template", "job", "qualification", "replicate", "agent_id"],
    ),
}


def _requests(out: Path, stage: str) -> dict[str, dict]:
    with sqlite3.connect(out / "calls.sqlite") as db:
        rows = db.execute("select unit_id, request from calls where stage = ?", (stage,))
        return {unit: json.loads(request) for unit, request in rows.fetchall()}


def _axis(study: str, stage: str) -> str:
    (cf,) = [s.counterfactual for s in load_study(study).config.stages if s.name == stage]
    return cf.axis


def _axis_values(study: str, stage: str) -> list[str]:
    return load_study(study).config.personas.axes[_axis(study, stage)]


@pytest.mark.parametrize("study", sorted(VARIANTS))
def test_twins_differ_only_in_the_swapped_name(builtin_runs: BuiltinRuns, study: str) -> None:
    stage, _ = VARIANTS[study]
    out = builtin_runs(study)
    requests = _requests(out, stage)
    names = pd.read_parquet(out / "results.parquet").set_index("unit_id")["persona_name"]
    twins = [unit for unit in requests if "/cf=" in unit]
    others = len(_axis_values(study, stage)) - 1
    assert twins and len(twins) == others * (len(requests) - len(twins))
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
def test_a_set_spans_the_swapped_axis_and_nothing_else(
    builtin_runs: BuiltinRuns, study: str
) -> None:
    stage, fixed = VARIANTS[study]
    df = pd.read_parquet(builtin_runs(study) / "results.parquet")
    rows = df[df["stage"] == stage]
    axis, values = _axis(study, stage), _axis_values(study, stage)
    sets = rows.groupby("cf_set")
    assert sets.size().eq(len(values)).all()
    assert sets["cf_swap"].agg(lambda v: sorted(v) == sorted(values)).all()
    assert (rows["cf_swap"] == rows[axis]).all()
    assert sets["persona_name"].nunique().eq(len(values)).all()
    for column in fixed:
        assert sets[column].nunique(dropna=False).eq(1).all(), column


def test_transmission_reads_what_the_pipeline_reads(builtin_runs: BuiltinRuns) -> None:
    """No reader sees a twin: the pipeline's own tables are the pipeline's at the same seed."""
    ours = builtin_runs("bias_transmission_pipeline_counterfactual") / "tables"
    theirs = builtin_runs("bias_transmission_pipeline") / "tables"
    shared = sorted(p.name for p in theirs.glob("*.csv"))
    assert shared
    for name in shared:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    assert (ours / "counterfactual_metrics.csv").is_file()


@pytest.mark.parametrize(
    ("analysis", "named"),
    [
        ("{kind: acceptance, name: hiring, stage: write, field: text,"
         " groups: [race]}", "acceptance"),
        ("{kind: letters, name: styles, stage: write, field: text, group: race,"
         " compare: [White, Black], success_filter: none}", "letters"),
    ],
)  # fmt: skip
def test_a_kind_that_counts_rows_is_refused_over_twins(
    tmp_path: Path, analysis: str, named: str
) -> None:
    """An analysis that counts each row as its own unit over a stage of counterfactual sets
    would count an agent's twins as independent people: validate refuses it (exit 2), naming
    the field that names the stage and the route that does pair them."""
    study = tmp_path / "twins.yaml"
    study.write_text(
        "extends: an2024_hiring_counterfactual\nname: twins\nanalyses:\n"
        "  - kind: counterfactual_text\n    name: counterfactual\n    stage: write\n"
        f"  - {analysis}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "biasim", "validate", str(study)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "twins.yaml" in said and "analyses[1].stage" in said
    assert f"`{named}` counts each row as its own unit" in said and "pair: cf_set" in said
    # The first analysis (the set as its unit) is not refused.
    assert "analyses[0]" not in said
