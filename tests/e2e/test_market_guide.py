"""Step 6 of docs/guides/labor-market.md runs as written: the policies it shows (labor_market's)
and the command it gives compare a second reader with the base, paired in one market, through
`market_effects`; and its fork of a run (a policy from a later cycle, with `--replay`) pays
only from the new policy's start."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import yaml

from biasim.simulator.cli import app
from tests.paths import ROOT

GUIDE = ROOT / "docs" / "guides" / "labor-market.md"


def step_six() -> tuple[str, list[str]]:
    """The policies step 6 shows and its command's arguments (after ``biasim``)."""
    text = GUIDE.read_text(encoding="utf-8")
    step = text[text.index("6. **Compare two reading designs") : text.index("## A synthetic")]
    shown = re.search(r"^```yaml\n(.*?)^```", step, re.S | re.M)
    command = re.search(r"`biasim (run labor_market [^`]*)`", " ".join(step.split()))
    assert shown is not None and command is not None, step
    return shown.group(1), shlex.split(command.group(1))


def test_the_guides_paired_comparison_of_two_reading_designs_runs(cli, tmp_path: Path) -> None:
    """The policies the guide shows are labor_market's, and its command as written (with a run
    folder, and 10 people per gender so that it takes seconds: the same study otherwise) runs
    each policy's trajectory on the base's random numbers and tests it over the 20 replicate
    markets, printed as the guide says."""
    shown, args = step_six()
    study = yaml.safe_load((ROOT / "scenarios" / "labor_market" / "study.yaml").read_text())
    fragment = yaml.safe_load(shown)
    assert fragment["policies"] == study["policies"]
    assert fragment["analyses"][0] in study["analyses"]
    out = tmp_path / "run"
    result = cli.invoke(app, [*args, "--agents", "10", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    # One row per policy in the console's table of tests: against the base, 20 markets.
    assert "effects: one test per policy" in printed
    for policy in ("second_reader", "redacted"):
        row = next(line for line in result.output.splitlines() if line.startswith(f"│ {policy} "))
        assert [c.strip() for c in row.strip("│").split("│")][1:4] == ["base", "1", "20"]
    assert "unit: the replicate market" in printed
    assert (out / "tables" / "effects_effects.csv").is_file()
    summary = json.loads((out / "summary.json").read_text())
    effects = next(a for a in summary["analyses"] if a["name"] == "effects")
    tested = {(t["policy"], t["baseline"], t["n_units"]) for t in effects["tests"]}
    assert tested == {("second_reader", "base", 20), ("redacted", "base", 20)}
    assert all(0 < t["p_value"] <= 1 for t in effects["tests"])


def fork_section() -> tuple[str, list[list[str]]]:
    """The study file of the guide's fork of a run and its two commands' arguments."""
    text = GUIDE.read_text(encoding="utf-8")
    part = text[text.index("### A policy from a later cycle") : text.index("## Where the drift")]
    study = re.search(r"^```yaml\n(.*?)^```", part, re.S | re.M)
    commands = re.findall(r"`biasim (run [^`]*)`", " ".join(part.split()))
    assert study is not None and len(commands) == 2, part
    return study.group(1), [shlex.split(c) for c in commands]


def test_the_guides_fork_pays_only_from_the_late_policys_start(cli, tmp_path: Path) -> None:
    """The two commands as written (the run folders in a temporary folder, 10 people per
    gender): the second run answers every call before cycle 6 from the first run's store and
    asks all of the late policy's readings (up to 2 pools of 4 in each of cycles 6 to 10 of the
    20 markets: fewer where fewer people are out of work in its trajectory); the other calls it
    asks are letters of applicants only the late policy's trajectory draws, from cycle 7 on
    (at 6 it holds the base's workforce). It asks no base call again: the base's results are
    the first run's, every one from the store (the guide says so)."""
    study, (first, second) = fork_section()
    (tmp_path / "late_redaction.yaml").write_text(study, encoding="utf-8")
    second[1] = str(tmp_path / second[1])
    second[second.index("--replay") + 1] = str(tmp_path / first[first.index("--out") + 1])
    first[first.index("--out") + 1] = str(tmp_path / first[first.index("--out") + 1])
    out = tmp_path / "second_run"
    for args in (first, [*second, "--out", str(out)]):
        result = cli.invoke(app, [*args, "--agents", "10"])
        assert result.exit_code == 0, result.output
    assert "test over cycles >= 6" in " ".join(result.output.split())
    results = pd.read_parquet(out / "results.parquet")
    asked = results[~results["cached"]]
    late = asked[asked["stage"] == "offer__late_redaction"]
    assert 0 < len(late) <= 2 * 5 * 20
    assert results[results["stage"] == "offer__late_redaction"]["cached"].sum() == 0
    assert sorted(asked["cycle"].unique()) == [6, 7, 8, 9, 10]
    assert results[results["cycle"] < 6]["cached"].all()
    letters = asked[asked["stage"] != "offer__late_redaction"]
    assert set(letters["stage"]) <= {"apply"} and (letters["cycle"] >= 7).all()
    assert (letters["applies_in"] == "late_redaction").all()
    before = pd.read_parquet(tmp_path / first[first.index("--out") + 1] / "results.parquet")
    assert set(before["unit_id"]) <= set(results.loc[results["cached"], "unit_id"])
