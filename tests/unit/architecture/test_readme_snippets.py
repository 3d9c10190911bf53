"""Every ```yaml snippet in README.md and docs/ validates: a whole study as written, a fragment
(first line ``# fragment of STUDY``) merged onto the built-in study it names, as a file that
``extends`` it would be (a kind's codebook, first line ``# codebook of``, is the kinds guide's
test's to load; the kinds guide's study entry validates with the guide's kind registered). A
snippet that no longer validates fails here, naming its file and line."""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path

import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.study.load import load_study
from tests.guide_kind import GUIDE, guide_kind
from tests.paths import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
_FRAGMENT = re.compile(r"^# fragment of (\w+)")


def _snippets() -> list[tuple[str, str]]:
    """(``page:line``, text) of every yaml block of the README and the docs."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT)
        found += [
            (f"{name}:{text.count(chr(10), 0, m.start()) + 2}", m.group(1))
            for m in _BLOCK.finditer(text)
            # A kind's codebook, not a study: tests/unit/kinds/test_kinds_guide.py loads it.
            if not m.group(1).startswith("# codebook of ")
        ]
    return found


def _as_study(snippet: str) -> str:
    """The study file the snippet stands for: itself, or its base extended by the fragment."""
    match = _FRAGMENT.match(snippet)
    if match is None:
        return snippet
    return f"extends: {match.group(1)}\nname: readme_fragment\n{snippet}"


def _load(tmp_path: Path, where: str, snippet: str) -> None:
    # A snippet's data paths (`data/...`) read as they would beside the built-in studies.
    (tmp_path / "data").symlink_to(ROOT / "scenarios" / "data")
    path = tmp_path / "snippet.yaml"
    path.write_text(_as_study(snippet), encoding="utf-8")
    on_guide = where.startswith(f"{GUIDE.relative_to(ROOT)}:")
    try:
        with guide_kind(tmp_path) if on_guide else nullcontext():
            load_study(str(path))
    except InputError as exc:
        problems = "\n".join(str(p) for p in exc.problems)
        pytest.fail(f"{where}: the snippet does not validate:\n{problems}")


def test_the_readme_has_whole_studies_and_fragments() -> None:
    snippets = [s for _, s in _snippets()]
    assert len(snippets) >= 8
    assert any(_FRAGMENT.match(s) for s in snippets)
    assert any(not _FRAGMENT.match(s) for s in snippets)


@pytest.mark.parametrize(("where", "snippet"), _snippets(), ids=lambda v: str(v)[:40])
def test_every_yaml_snippet_validates(tmp_path: Path, where: str, snippet: str) -> None:
    _load(tmp_path, where, snippet)


def test_a_snippet_that_does_not_validate_is_caught(tmp_path: Path) -> None:
    # The README's old `design.conditions` example: the working key is `factors`.
    bad = "# fragment of emergency_response\ndesign:\n  conditions: {calm: {tone: calm}}\n"
    with pytest.raises(
        pytest.fail.Exception, match=r"(?s)README.md:7: .*design\.conditions: unknown field"
    ):
        _load(tmp_path, "README.md:7", bad)
