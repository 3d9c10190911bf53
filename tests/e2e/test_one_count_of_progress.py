"""One count of progress: after a SIGINT at a random moment, the progress line's last count, the
stop message, ``summary.json`` and the manifest give the same units done; the resume counts what
it replays from the store in the same units (every unit that had a result); a study's implicit
skip (an ablation's) is named as what it is."""

from __future__ import annotations

import json
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

#: 36 agents: 36 `decide` units, and 36 `follow` units of which the `when` skips 12 and the
#: other 24 share 12 calls (`shared_across: [place]`).
STUDY = """\
name: count_trial
description: counts at a stop
seed: 7
roles:
  decider:
    backend: synthetic
    max_concurrency: 4
    options: {latency_ms: 60}
    synthetic:
      decision: {by: gender, probabilities: {male: {Evacuate: 0.3, Stay: 0.7}}}
personas:
  axes:
    gender: [male, female, non-binary]
  description: "a {{ gender }} person"
design:
  agents_per_value: 6
  factors:
    place: {home: {where: "at home"}, work: {where: "at work"}}
stages:
  - name: decide
    role: decider
    prompt: "You are {{ persona.description }} {{ where }}. Evacuate or stay?"
    output:
      decision: {type: choice, choices: [Evacuate, Stay]}
  - name: follow
    role: decider
    when: "gender != 'non-binary'"
    shared_across: [place]
    prompt: "You are {{ persona.description }}. Evacuate now?"
    output:
      decision: {type: choice, choices: [Evacuate, Stay]}
"""
UNITS, CALLS = 72, 48
#: It signals a subprocess and waits on it: the serial pass (tests/conftest.py).
pytestmark = pytest.mark.serial


def _biasim(*args: str) -> list[str]:
    return [sys.executable, "-m", "biasim", *args]


def _calls(db: Path) -> int:
    # Never create the file: a plain connect made an empty calls.sqlite in the run folder when
    # the poll came between the folder's creation and the store's, and the run then stopped
    # with exit 2 ("the run ended first", clean-clone CI at a28d2da).
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


#: Calls answered before the signal, drawn at random: in `decide` (one call per unit) or in
#: `follow` (two units per call, a third of the units skipped), at least 4 calls before the end.
MOMENTS = {"decide": (1, 32), "follow": (37, CALLS - 4)}


@pytest.mark.parametrize("stage", ["follow", pytest.param("decide", marks=pytest.mark.slow)])
def test_a_stop_at_a_random_moment_counts_the_same_units_everywhere(
    tmp_path: Path, stage: str
) -> None:
    after = random.Random().randint(*MOMENTS[stage])
    study = tmp_path / "s.yaml"
    study.write_text(STUDY, encoding="utf-8")
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _biasim("run", str(study), "--out", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while _calls(out / "calls.sqlite") < after:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended first"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    stderr = " ".join(proc.communicate(timeout=120)[1].split())
    assert proc.returncode == 130, stderr
    progress = int(re.findall(r"progress count_trial: (\d+)/72 units", stderr)[-1])
    stopped = re.search(r"(\d+) of 72 units done \((\d+) with results", stderr)
    assert stopped, stderr
    done, rows = int(stopped[1]), int(stopped[2])
    assert progress == done, (after, stderr)  # the moment drawn, to replay a failure
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert summary["units_done"] == manifest["counts"]["units_done"] == done
    assert manifest["counts"]["units"] == summary["units_expected"] == UNITS
    kept = pd.read_parquet(out / "results.parquet")
    assert len(kept) == rows == summary["units"] and rows < UNITS
    # Units done are the ones with results and those no call is needed for (the `when`).
    assert rows <= done <= rows + 12

    resumed = subprocess.run(
        _biasim("run", "--resume", str(out)), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    text = " ".join((resumed.stdout + resumed.stderr).split())
    assert f"{rows} units)" in text.split("from cache:")[1].split("\n")[0], text
    assert re.findall(r"progress count_trial: (\d+)/72 units", text)[-1] == "72"
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["units_done"] == UNITS
    assert manifest["sessions"][-1]["units_from_cache"] == rows


def test_an_ablations_implicit_skip_is_named_as_what_it_is() -> None:
    checked = subprocess.run(
        _biasim("validate", "persona_ablation"), capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr
    line = " ".join(checked.stdout.split())
    assert "skipped by a `when`" not in line  # the study file has no `when`
    assert "12 skipped: the persona writer does not run under the ablation's `attribute`" in line
