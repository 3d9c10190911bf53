"""The golden recordings (``tests/golden``) see a changed number and only that: a perturbation
in the 8th significant digit, a row more, a table more or gone, and the same in a table kept as
a digest; a change in the 14th digit (another machine's BLAS) is not one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.builtin_runs import STUDIES
from tests.golden import GOLDEN, MAX_INLINE, changes, rounded, run_text

ROWS = "group,rate,n\nfemale,0.123456789012345,12\nmale,1.5e-17,3\n"


def _run(tmp_path: Path, tables: dict[str, str]) -> Path:
    (tmp_path / "tables").mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        (tmp_path / "tables" / name).write_text(text, encoding="utf-8")
    return tmp_path


def _long() -> str:
    """A table whose rounded text is longer than MAX_INLINE: kept as shape and digest."""
    rows = [f"g{i},{i / 7:.17g},{i}" for i in range(MAX_INLINE // 10)]
    return "group,rate,n\n" + "\n".join(rows) + "\n"


def test_numbers_keep_ten_significant_digits_and_text_stays() -> None:
    assert rounded("0.123456789012345") == "0.123456789"
    assert rounded("0.12345678901") == rounded("0.12345678899") != rounded("0.12345679")
    assert rounded("1.5e-17") == rounded("-2e-16") == "0"
    assert rounded("12") == "12" and rounded("female") == "female" and rounded("") == ""


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda t: t.replace("0.123456789012345", "0.123456719012345"), "changed a.csv"),
        (lambda t: t + "other,0.5,1\n", "changed a.csv"),
        (lambda t: t.replace(",n\n", ",count\n"), "changed a.csv"),
    ],
)
def test_a_changed_number_row_or_column_is_found(tmp_path: Path, edit, what: str) -> None:
    recorded = run_text(_run(tmp_path / "before", {"a.csv": ROWS, "b.csv": ROWS}))
    now = run_text(_run(tmp_path / "after", {"a.csv": edit(ROWS), "b.csv": ROWS}))
    found = changes(recorded, now)
    assert len(found) == 1 and found[0].startswith(what), found


def test_noise_in_the_fourteenth_digit_is_not_a_change(tmp_path: Path) -> None:
    recorded = run_text(_run(tmp_path / "before", {"a.csv": ROWS}))
    noisy = ROWS.replace("0.123456789012345", "0.123456789012349").replace("1.5e-17", "-3e-17")
    assert run_text(_run(tmp_path / "after", {"a.csv": noisy})) == recorded


def test_a_table_added_removed_or_changed_inside_a_digest_is_found(tmp_path: Path) -> None:
    long = _long()
    recorded = run_text(_run(tmp_path / "before", {"a.csv": ROWS, "long.csv": long}))
    assert "sha256 of the rounded rows" in recorded and len(recorded) < 1000
    perturbed = long.replace(f"{100 / 7:.17g}", f"{100 / 7 + 1e-6:.17g}")
    assert perturbed != long
    now = run_text(_run(tmp_path / "after", {"long.csv": perturbed, "c.csv": ROWS}))
    found = changes(recorded, now)
    assert found[:2] == ["new table c.csv", "table gone: a.csv"]
    assert found[2].startswith("changed long.csv") and "sha256" in found[2]


def test_a_perturbed_number_of_a_recorded_study_is_found(tmp_path: Path) -> None:
    """On a real recording: one number of one table moved in its 8th digit."""
    recorded = (GOLDEN / "emergency_response.txt").read_text(encoding="utf-8")
    cells = [c for line in recorded.splitlines() if line[:3] != "== " for c in line.split(",")]
    number = next(c for c in cells if re.fullmatch(r"0\.\d{6,}", c))
    moved = f"{float(number) * (1 + 3e-8):.10g}"
    assert moved != number
    found = changes(recorded, recorded.replace(number, moved, 1))
    assert len(found) == 1 and "+" in found[0] and moved in found[0], found


def test_every_built_in_study_run_here_has_a_recording_and_no_other() -> None:
    recorded = sorted(p.stem for p in GOLDEN.glob("*.txt"))
    assert recorded == STUDIES
    assert sum(p.stat().st_size for p in GOLDEN.glob("*.txt")) < 400_000
