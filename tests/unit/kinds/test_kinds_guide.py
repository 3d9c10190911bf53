"""The guide's example kind (docs/extending/kinds.md) runs as written: a kind with one table
declared once gets its summary schema, console and page from that declaration."""

from __future__ import annotations

import io
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
from rich.console import Console

from biasim.simulator.common.html import HtmlSection
from biasim.simulator.kinds import AnalysisContext, get_kind, unregister_kind
from tests.paths import ROOT

GUIDE = ROOT / "docs" / "extending" / "kinds.md"


@contextmanager
def guide_kind(
    folder: Path, edit: Callable[[str], str] = lambda codebook: codebook
) -> Iterator[dict[str, Any]]:
    """The guide's kind loaded and registered, its codebook (changed by ``edit``) beside it in
    ``folder``; its module's names."""
    text = GUIDE.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    codebook = re.search(r"```yaml\n(# codebook of .*?)```", text, re.DOTALL)
    assert code is not None and codebook is not None
    # A module of its own, as the guide's file would be (dataclasses look their module up),
    # with its codebook beside it.
    module = types.ModuleType("mykinds_lengths")
    module.__file__ = str(folder / "lengths.py")
    (folder / "lengths.tables.yaml").write_text(edit(codebook.group(1)), encoding="utf-8")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code.group(1), str(GUIDE), "exec", dont_inherit=True), module.__dict__)
        yield module.__dict__
    finally:
        unregister_kind("answer_length")
        del sys.modules[module.__name__]


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
    assert "longest answers: female" in text
    assert re.search(r"female\s*│\s*1\s*│\s*13\.0", text), text
    page = HtmlSection("x", path=("analyses", 0))
    kind.html(summary, page)
    markup = "".join(page.parts)
    assert "<p>longest answers: female</p>" in markup
    assert 'data-value="13.0">13.0<' in markup
