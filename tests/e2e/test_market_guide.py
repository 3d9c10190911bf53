"""Step 6 of docs/guides/labor-market.md runs as written: the study file it shows and the
command it gives compare a second reader with the base, paired in one market, through
`market_effects`; and its fork of a run (a policy from a later cycle, with `--replay`) pays
only from the new policy's start."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd

from biasim.simulator.cli import app
from tests.paths import ROOT

GUIDE = ROOT / "docs" / "guides" / "labor-market.md"


def step_six() -> tuple[str, list[str]]:
    """The study file of step 6 and its command's arguments (after ``biasim``)."""
    text = GUIDE.read_text(encoding="utf-8")
    step = text[text.index("6. **Compare two reading designs") : text.index("## A synthetic")]
    study = re.search(r"^```yaml\n(.*?)^```", step, re.S | re.M)
    command = re.search(r"`biasim (run second_reader\.yaml [^`]*)`", " ".join(step.split()))
    assert study is not None and command is not None, step
    return study.group(1), shlex.split(command.group(1))


def test_the_guides_paired_comparison_of_two_reading_designs_runs(cli, tmp_path: Path) -> None:
    """The command as written (with a run folder, and 10 people per gender so that it takes
    seconds: the same study otherwise): the second reader's trajectory runs on the base's
    random numbers and gets its test over the 20 replicate markets, printed as the guide
    says."""
    study, args = step_six()
    (tmp_path / "second_reader.yaml").write_text(study, encoding="utf-8")
    args[1] = str(tmp_path / args[1])
    out = tmp_path / "run"
    result = cli.invoke(app, [*args, "--agents", "10", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    assert "second_reader vs base: joint p" in printed
    assert "unit: replicate market, 20 of them" in printed
    summary = json.loads((out / "summary.json").read_text())
    effects = next(a for a in summary["analyses"] if a["name"] == "effects")
    (test,) = effects["tests"]
    assert (test["policy"], test["baseline"], test["n_units"]) == ("second_reader", "base", 20)
    assert 0 < test["p_value"] <= 1


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
    20 markets: fewer where fewer people are out of work); a base call it asks again is one
    from cycle 6 on, where the policy's hires leave the people who apply in both trajectories
    (the guide says so)."""
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
    assert 0.9 * 2 * 5 * 20 <= len(late) <= 2 * 5 * 20
    assert results[results["stage"] == "offer__late_redaction"]["cached"].sum() == 0
    assert sorted(asked["cycle"].unique()) == [6, 7, 8, 9, 10]
    assert results[results["cycle"] < 6]["cached"].all()
    assert results[results["cycle"] < 6]["stage"].isin(["apply", "offer"]).all()
