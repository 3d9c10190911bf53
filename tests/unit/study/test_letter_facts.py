"""The Exp. 3-4 letters are generated from per-job facts: the checked-in CSV is exactly what the
facts give (so the two never drift), and bad facts exit 2 naming file, line and field."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from biasim.scenarios.letter_facts import FACTS, LETTERS, build_letters

GENERATOR = [sys.executable, "-m", "biasim.scenarios.letter_facts"]


def test_the_checked_in_letters_are_what_the_facts_give() -> None:
    assert build_letters() == LETTERS.read_text(encoding="utf-8")
    done = subprocess.run([*GENERATOR, "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_check_fails_when_the_letters_drift_and_writing_repairs_them(tmp_path: Path) -> None:
    out = tmp_path / "letters.csv"
    out.write_text(LETTERS.read_text(encoding="utf-8").replace("ten years", "eleven years", 1))
    check = [*GENERATOR, "--out", str(out), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "out of date" in done.stderr
    subprocess.run([*GENERATOR, "--out", str(out)], capture_output=True, check=True)
    assert out.read_text(encoding="utf-8") == LETTERS.read_text(encoding="utf-8")


def _facts_with(tmp_path: Path, row: int, column: str, value: str | None) -> Path:
    """A copy of the facts with one field changed (``value`` None drops the column)."""
    rows = list(csv.DictReader(FACTS.open(encoding="utf-8", newline="")))
    columns = [c for c in rows[0] if value is not None or c != column]
    if value is not None:
        rows[row][column] = value
    path = tmp_path / "facts.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    ("row", "column", "value", "message"),
    [
        (1, "strong_years", "ten", ":3: strong_years: `ten` is not a whole number"),
        (0, "weak_years", "0", ":2: weak_years: 0 is not between 1 and 12"),
        (2, "level", "astronaut", ":4: level: `astronaut` is not a job of"),
        (1, "level", "surgeon", ":3: level: `surgeon` appears twice"),
        (0, "accomplishment", " ", ":2: accomplishment: empty"),
        (0, "broad", None, ":1: missing column(s): broad"),
    ],
)
def test_bad_facts_exit_2_naming_file_line_and_field(
    tmp_path: Path, row: int, column: str, value: str | None, message: str
) -> None:
    facts = _facts_with(tmp_path, row, column, value)
    out = tmp_path / "letters.csv"
    done = subprocess.run(
        [*GENERATOR, "--facts", str(facts), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert f"{facts}{message}" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize(("rank", "said"), [("121", "121st"), ("112", "112th"), ("143", "143rd")])
def test_the_weak_schools_rank_is_spelled_as_an_ordinal(
    tmp_path: Path, rank: str, said: str
) -> None:
    text = build_letters(_facts_with(tmp_path, 0, "weak_rank", rank))
    first = next(csv.DictReader(text.splitlines(keepends=True)))
    assert f"which is ranked {said} in the United States" in first["weak"]
