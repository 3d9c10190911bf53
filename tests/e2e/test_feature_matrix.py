"""Every built-in analysis kind x every tool (run, analyze, compare, audit, power, report) on a
small synthetic study: each cell either works or is refused with a clear message (exit 2, an
``error`` line naming what is wrong), never a traceback. Each kind's study runs once per
module; the cells that need a kind's own models or long runs are under the slow marker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from biasim.registry import KINDS
from biasim.simulator.cli import app
from tests import market_studies, pipeline_studies

POLICIES = {"redacted": {"stages": {"screen": {"author": "redacted"}}}}
EFFECT = {
    "kind": "policy_effect",
    "stages": ["screen", "offer"],
    "groups": ["race", "gender"],
    "n_permutations": 100,
    "n_boot": 100,
}

#: kind -> (the study, "tiny" for the test's pipeline study, slow: the kind's cells run slowly).
STUDIES: dict[str, tuple[str, bool]] = {
    "demographic_parity": ("emergency_response", False),
    "condition_differences": ("persona_ablation", False),
    # The seed-004 kinds over the same decisions: one run of li2025_decisions serves all three.
    "explicit_bias": ("li2025_decisions", True),
    "rationale_terms": ("li2025_decisions", True),
    "predictions_check": ("li2025_decisions", True),
    "pipeline": ("tiny", False),
    "policy_effect": ("tiny", False),
    "market_effects": ("tiny", False),
    "market": ("tiny", False),
    "prism": ("ding2024_prism", False),  # refused at validate: it needs a masked LM
    "acceptance": ("an2024_hiring", True),
    "association": ("bias_transmission_association", True),
    "picks": ("bias_transmission_supplemental", True),
    "letter_evaluation": ("bias_transmission_letters", True),
    "letters": ("wan2023_letters", True),
    "counterfactual_text": ("wan2023_letters_counterfactual", True),
    "transmission": ("bias_transmission_pipeline", True),
}
TOOLS = ("run", "analyze", "compare", "audit", "power", "report")


def test_every_built_in_kind_is_in_the_matrix() -> None:
    assert set(STUDIES) == set(KINDS.names())


def _clean(result, what: str) -> None:
    """Worked (0) or refused with a clear message (2); never a traceback."""
    text = result.output
    assert result.exit_code in (0, 2), f"{what}: exit {result.exit_code}\n{text}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what}: {result.exception!r}"
    )
    assert "Traceback" not in text, what
    if result.exit_code == 2:
        assert "error" in text.lower() and len(text.strip()) > 20, f"{what}: {text}"


def _study(kind: str, folder: Path) -> tuple[str, list[str]]:
    name, _ = STUDIES[kind]
    if name != "tiny":
        return name, ["--agents", "1"]
    data = pipeline_studies.study()
    if kind == "market_effects":
        data = market_studies.market(
            market={"decompose": ["readers", "attrition"]},
            policies={"redacted": {"stages": {"offer": {"author": "redacted"}}}},
            analyses=[{"kind": "market_effects"}],
        )
    if kind == "market":
        data = market_studies.market(market={"replicates": 3}, analyses=[{"kind": "market"}])
    if kind == "policy_effect":
        data["policies"] = POLICIES
        data["analyses"] = [EFFECT]
    return str(pipeline_studies.write(folder / f"{kind}.yaml", data)), []


class Runs:
    """Each kind's study run once, shared by its cells."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cli = CliRunner()
        self.done: dict[str, tuple[object, Path, str, list[str]]] = {}

    def get(self, kind: str):
        name = STUDIES[kind][0]
        key = kind if name == "tiny" else name  # kinds of one built-in study share its run
        if key not in self.done:
            study, args = _study(kind, self.folder)
            out = self.folder / f"run_{key}"
            result = self.cli.invoke(
                app, ["run", study, "--backend", "synthetic", "--out", str(out), *args]
            )
            self.done[key] = (result, out, study, args)
        return self.done[key]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("matrix"))


def _cells() -> list:
    cells = []
    for kind, (_, slow) in STUDIES.items():
        for tool in TOOLS:
            marks = [pytest.mark.slow] if slow or tool == "power" else []
            cells.append(pytest.param(kind, tool, marks=marks, id=f"{kind}-{tool}"))
    return cells


@pytest.mark.parametrize(("kind", "tool"), _cells())
def test_cell(runs: Runs, kind: str, tool: str) -> None:
    result, out, study, args = runs.get(kind)
    _clean(result, f"{kind} run")
    if result.exit_code != 0:
        # Refused before any call: every other tool has no run to read.
        assert tool == "run" or not (out / "results.parquet").exists()
        return
    cli = runs.cli
    if tool == "run":
        assert (out / "results.parquet").is_file() and (out / "summary.json").is_file()
    elif tool == "analyze":
        _clean(cli.invoke(app, ["analyze", str(out)]), f"{kind} analyze")
    elif tool == "compare":
        twin = runs.folder / f"twin_{kind}"
        if not twin.exists():
            shutil.copytree(out, twin)
        target = runs.folder / f"compare_{kind}"
        shutil.rmtree(target, ignore_errors=True)
        labels = ["--label", f"a={out}", "--label", f"b={twin}"]
        result = cli.invoke(app, ["compare", str(out), str(twin), *labels, "--out", str(target)])
        _clean(result, f"{kind} compare")
        assert result.exit_code == 0, result.output  # the same study twice always compares
    elif tool == "audit":
        target = runs.folder / f"audit_{kind}"
        shutil.rmtree(target, ignore_errors=True)
        result = cli.invoke(app, ["audit", str(out), "--out", str(target)])
        _clean(result, f"{kind} audit")
        if kind in ("pipeline", "policy_effect", "demographic_parity", "acceptance"):
            assert result.exit_code == 0, result.output
    elif tool == "power":
        target = runs.folder / f"power_{kind}"
        shutil.rmtree(target, ignore_errors=True)
        size = args[1] if args else "8"
        result = cli.invoke(
            app, ["power", study, "--agents", size, "--studies", "2", "--out", str(target)]
        )
        _clean(result, f"{kind} power")
        if result.exit_code == 0:
            # A table with a row per test, each naming the unit its null reshuffled; a kind
            # without a test power reads is refused before anything runs, not an empty table.
            table = pd.read_csv(target / "power.csv")
            assert len(table) and (table["unit"] != "not stated").all(), table.to_string()
        else:
            assert "nothing to count" in result.output or "synthetic truth" in result.output
    else:
        page = (out / "report.html").read_text(encoding="utf-8")
        assert KINDS.instance(kind).title.split(":")[0] in page
