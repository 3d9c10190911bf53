"""Every ```yaml snippet in README.md validates: a whole study as written, a fragment (first
line ``# fragment of STUDY``) merged onto the built-in study it names, as a file that
``extends`` it would be. A snippet that no longer validates fails here, naming its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from biasim.simulator.config import load_study
from biasim.simulator.errors import InputError

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
_FRAGMENT = re.compile(r"^# fragment of (\w+)")


def _snippets() -> list[tuple[int, str]]:
    """(line in README.md, text) of every yaml block."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _as_study(snippet: str) -> str:
    """The study file the snippet stands for: itself, or its base extended by the fragment."""
    match = _FRAGMENT.match(snippet)
    if match is None:
        return snippet
    return f"extends: {match.group(1)}\nname: readme_fragment\n{snippet}"


def _load(tmp_path: Path, line: int, snippet: str) -> None:
    # A snippet's data paths (`data/...`) read as they would beside the built-in studies.
    (tmp_path / "data").symlink_to(README.parent / "scenarios" / "data")
    path = tmp_path / f"readme_line_{line}.yaml"
    path.write_text(_as_study(snippet), encoding="utf-8")
    try:
        load_study(str(path))
    except InputError as exc:
        problems = "\n".join(str(p) for p in exc.problems)
        pytest.fail(f"README.md line {line}: the snippet does not validate:\n{problems}")


def test_the_readme_has_whole_studies_and_fragments() -> None:
    snippets = [s for _, s in _snippets()]
    assert len(snippets) >= 8
    assert any(_FRAGMENT.match(s) for s in snippets)
    assert any(not _FRAGMENT.match(s) for s in snippets)


@pytest.mark.parametrize(("line", "snippet"), _snippets(), ids=lambda v: str(v)[:12])
def test_every_yaml_snippet_validates(tmp_path: Path, line: int, snippet: str) -> None:
    _load(tmp_path, line, snippet)


def test_a_snippet_that_does_not_validate_is_caught(tmp_path: Path) -> None:
    # The README's old `design.conditions` example: the working key is `factors`.
    bad = "# fragment of emergency_response\ndesign:\n  conditions: {calm: {tone: calm}}\n"
    with pytest.raises(
        pytest.fail.Exception, match=r"(?s)line 7: .*design\.conditions: unknown field"
    ):
        _load(tmp_path, 7, bad)
