"""The guide's example kind (docs/extending/kinds.md) runs as written: a kind with one table
declared once gets its summary schema, console and page from that declaration; its package's
pyproject.toml names it, and the guide's study entry runs with the guide's commands, its table
where the guide says."""

from __future__ import annotations

import io
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
from rich.console import Console

from biasim.simulator.cli import app
from biasim.simulator.common.html import HtmlSection
from biasim.simulator.kinds import AnalysisContext, get_kind
from tests.guide_kind import GUIDE, guide_kind


@pytest.fixture
def guide(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with guide_kind(tmp_path) as names:
        yield names


def test_the_guides_kind_derives_its_schema_console_and_page(guide: dict[str, Any]) -> None:
    kind = get_kind("answer_length")
    schema = kind.summary_schema()
    assert schema["required"] == ["by", "lengths"]
    columns = schema["properties"]["lengths"]["items"]
    assert columns["properties"]["n"]["type"] == ["integer", "null"]
    assert columns["required"] == ["n", "mean_chars"]
    results = pd.DataFrame(
        {
            "stage": "decide",
            "valid": [True, True, True, False],
            "gender": ["female", "male", "male", "female"],
            "rationale": ["a fine answer", "ok", "okay", "ignored"],
        }
    )
    spec = guide["LengthSpec"](stage="decide", by="gender")
    section = kind.compute(results, spec, AnalysisContext(study=None, name="lengths"))
    summary = section.summary
    jsonschema.validate(summary, schema)
    assert list(section.tables) == ["lengths_lengths"]
    assert summary["lengths"] == [
        {"gender": "female", "n": 1, "mean_chars": 13.0},
        {"gender": "male", "n": 2, "mean_chars": 3.0},
    ]
    out = io.StringIO()
    kind.print({"name": "lengths", **summary}, Console(file=out, width=80, markup=False))
    text = out.getvalue()
    assert "longest answers (13.0 characters): female" in text
    assert re.search(r"female\s*│\s*1\s*│\s*13\.0", text), text
    page = HtmlSection("x", path=("analyses", 0))
    kind.html(summary, page)
    markup = "".join(page.parts)
    assert "<p>longest answers (13.0 characters): female</p>" in markup
    assert 'data-value="13.0">13.0<' in markup
    # A tie names every group that holds the longest mean, not the first one.
    tied = results.assign(rationale=["abc", "abc", "abc", "x"])
    summary = kind.compute(tied, spec, AnalysisContext(study=None, name="lengths")).summary
    assert kind.lines(summary) == ["longest answers (3.0 characters): female, male"]


def test_the_guides_pyproject_names_the_kind_and_ships_its_codebook() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", text, re.DOTALL)
    assert block is not None
    project = tomllib.loads(block.group(1))
    entry = project["project"]["entry-points"]["biasim.analyses"]
    # The module path the guide's code block names, and the class it defines.
    assert entry == {"answer_length": "mykinds.lengths:LengthKind"}
    assert (
        "# mykinds/lengths.py" in text and "class LengthKind(AnalysisKind, spec=LengthSpec" in text
    )
    assert project["tool"]["setuptools"]["package-data"] == {"mykinds": ["*.tables.yaml"]}


def _using_it(text: str) -> str:
    """The guide's section on using the kind in a study."""
    return text[text.index("## Using it in a study") :]


def test_the_guides_study_entry_runs_with_its_commands_and_shows_where_it_says(
    guide: dict[str, Any], tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = _using_it(GUIDE.read_text(encoding="utf-8"))
    fragment = re.search(r"```yaml\n# fragment of (\w+).*?\n(.*?)```", section, re.DOTALL)
    commands = re.search(r"```\n(biasim .*?)```", section, re.DOTALL)
    assert fragment is not None and commands is not None
    # As the guide says: its first line `extends: <the study>`.
    (tmp_path / "study.yaml").write_text(f"extends: {fragment.group(1)}\n{fragment.group(2)}")
    monkeypatch.chdir(tmp_path)
    said = {}
    for line in commands.group(1).splitlines():
        args = shlex.split(line.split("#")[0])
        result = cli.invoke(app, args[1:])
        assert result.exit_code == 0, (line, result.output)
        said[args[1]] = result.stdout
    assert "answer_length" in said["kinds"]
    run = tmp_path / "runs" / "lengths"
    assert "runs/lengths/tables/lengths_lengths.csv" in section
    table = pd.read_csv(run / "tables" / "lengths_lengths.csv")
    assert table["n"].sum() == 12 and set(table["gender"]) == {"male", "female", "non-binary"}
    summary = json.loads((run / "summary.json").read_text())
    assert [a["kind"] for a in summary["analyses"]] == ["demographic_parity", "answer_length"]
    entry = summary["analyses"][1]
    assert "`analyses[1]`" in section and '"name": "lengths", "by": "gender"' in section
    assert (entry["name"], entry["by"], len(entry["lengths"])) == ("lengths", "gender", 3)
    page = (run / "report.html").read_text()
    for shown in ("lengths (answer_length)", "lengths: answer length per group"):
        assert f"`{shown}`" in section and shown in said["run"] and shown in said["analyze"]
    assert '"Answer length: lengths"' in section and "Answer length: lengths" in page
    # The synthetic backend's one rationale text: every group alike, as the guide warns.
    assert "(19.0 characters): male, female, non-binary" in said["run"]
    assert "`synthetic rationale`" in section
