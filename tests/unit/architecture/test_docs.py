"""The documentation site builds with warnings as errors, and every page is in its navigation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import ROOT


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == _nav_pages(config["nav"])


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "extending" / "backends" / "index.html").is_file()
    assert "Architecture" in (tmp_path / "architecture" / "index.html").read_text()


def test_the_generated_reference_pages_are_up_to_date() -> None:
    """The CLI and study-file reference pages are generated from the code; a command, option or
    field added without regenerating them fails here."""
    from biasim.simulator.cli.reference_docs import main

    assert main(["--check"]) == 0, "run: python -m biasim.simulator.cli.reference_docs"


def test_no_file_holds_a_merge_conflicts_markers() -> None:
    # A conflict resolved in the code but not in the prose once shipped both sides of a page.
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    markers = ("<<<<<<< ", ">>>>>>> ")
    found = [
        f"{name}:{number}"
        for name in tracked
        if (ROOT / name).is_file() and (ROOT / name).stat().st_size < 2_000_000
        for number, line in enumerate(
            (ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1
        )
        if line.startswith(markers) or line == "======="
    ]
    assert found == []
