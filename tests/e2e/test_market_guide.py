"""Step 6 of docs/guides/labor-market.md runs as written: the study file it shows and the
command it gives compare a second reader with the base, paired in one market, through
`market_effects`."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

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
