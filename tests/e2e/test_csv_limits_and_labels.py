"""CSV inputs are bounded (cell length, number of groups) by limits the message names with the
option that raises them; formulas hidden behind blanks or in full-width forms are neutralised;
NUL bytes are refused; LL144 counts labels differing only in case or whitespace as one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from biasim.analysis.audit.ll144 import ll144_tables
from biasim.simulator.cli import app
from biasim.simulator.common.csvfiles import csv_safe, csv_safe_table, read_csv
from biasim.simulator.common.csvlimits import DEFAULT_MAX_ROWS


@pytest.mark.parametrize(
    "value", [" =1+1", '\n=HYPERLINK("x")', "\r\n@SUM(A1)", "＝1+1", "＋1", "－1", "＠x", "  -x"]
)
def test_formulas_behind_blanks_or_full_width_are_neutralised(value: str) -> None:
    import pyarrow as pa

    assert csv_safe(value) == "'" + value
    table = csv_safe_table(pa.table({"c": [value]}))
    assert table.column("c").to_pylist() == ["'" + value]


def test_a_table_quotes_only_its_risky_cells_column_by_column() -> None:
    import pyarrow as pa

    table = pa.table(
        {
            "plain": ["a", "b", None],
            "mixed": ["ok", "=1+1", "-0.5"],
            "empty": pa.array([None, None, None], type=pa.string()),
            "n": [1, 2, 3],
        }
    )
    safe = csv_safe_table(table)
    assert safe.column("plain").to_pylist() == ["a", "b", None]
    assert safe.column("mixed").to_pylist() == ["ok", "'=1+1", "-0.5"]
    assert safe.column("empty").to_pylist() == [None, None, None]
    assert safe.column("n").to_pylist() == [1, 2, 3]


#: A formula behind each kind of character a spreadsheet may skip or not show (a space,
#: format or control character), and each NFKC form of a trigger (full-width, small,
#: superscript, subscript).
HIDDEN = {
    "ideographic space": "\u3000=1+1",
    "no-break space": "\u00a0=1+1",
    "byte-order mark": "\ufeff=1+1",
    "zero-width space": "\u200b=1+1",
    "word joiner": "\u2060=1+1",
    "line separator": "\u2028=1+1",
    "vertical tab": "\x0b=1+1",
    "form feed": "\x0c=1+1",
    "NUL": "\x00=1+1",
    "several": "\u200b \u3000\ufeff@SUM(A1)",
    "small equals": "\ufe66cmd",
    "small plus": "\ufe62cmd",
    "small hyphen-minus": "\ufe63cmd",
    "small at": "\ufe6bcmd",
    "superscript equals": "\u207ccmd",
    "subscript plus": "\u208acmd",
}


@pytest.mark.parametrize("value", HIDDEN.values(), ids=HIDDEN)
def test_formulas_behind_invisible_characters_or_in_any_form_are_neutralised(value: str) -> None:
    import pyarrow as pa

    assert csv_safe(value) == "'" + value
    # The Arrow route (results.csv) takes such cells to the same function.
    table = csv_safe_table(pa.table({"c": ["plain", value, None]}))
    assert table.column("c").to_pylist() == ["plain", "'" + value, None]


@pytest.mark.parametrize(
    "value", ["-0.5", " 3", "+3e-2", "a=b", "Male", "１２", "\u3000Male", "\u200b", "\u2212x"]
)
def test_numbers_and_plain_text_are_unchanged(value: str) -> None:
    assert csv_safe(value) == value


def _decisions(path: Path, groups: int, cell: str = "x") -> Path:
    rows = [f"g{i % groups},{'1' if i % 3 else '0'},{cell}" for i in range(groups * 4)]
    path.write_text("grp,ok,note\n" + "\n".join(rows) + "\n")
    return path


ANALYZE = ["analyze", "--group-cols", "grp", "--outcome-col", "ok", "--permutations", "20"]


def test_the_group_limit_is_named_and_its_option_raises_it(tmp_path, cli) -> None:
    path = _decisions(tmp_path / "d.csv", groups=5)
    low = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-groups", "4"])
    assert low.exit_code == 2
    assert "d.csv: grp: 5 distinct groups, more than the limit of 4 (--max-groups raises it)" in (
        " ".join(low.stderr.split())
    )
    ok = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-groups", "5"])
    assert ok.exit_code == 0, ok.output


def test_the_cell_limit_is_named_with_its_line_and_its_option_raises_it(tmp_path, cli) -> None:
    path = _decisions(tmp_path / "d.csv", groups=2, cell="y" * 50)
    low = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-cell-chars", "40"])
    assert low.exit_code == 2
    expected = "d.csv:2: a cell longer than the limit of 40 characters (--max-cell-chars raises it)"
    assert expected in " ".join(low.stderr.split())
    assert (
        cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-cell-chars", "50"]).exit_code
        == 0
    )
    beyond = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-cell-chars", "2000000"])
    assert beyond.exit_code == 2 and "--max-cell-chars" in beyond.stderr


@pytest.mark.parametrize(
    ("line", "found"), [("a,1,x,extra", 4), ("a", 1), ("a,1,x,", 4)], ids=["long", "short", "comma"]
)
def test_a_ragged_row_is_refused_with_its_line_and_counts(tmp_path, cli, line, found) -> None:
    # pandas would fill a short row with missing values, and read a long first row's first
    # cell as an index (every column shifted one to the left): refused instead.
    path = tmp_path / "d.csv"
    path.write_text("grp,ok,note\na,1,x\n\n" + line + "\nb,0,y\n")
    result = cli.invoke(app, [*ANALYZE, "--decisions", str(path)])
    assert result.exit_code == 2, result.output
    assert f"d.csv:4: {found} cells where the header has 3 columns" in " ".join(
        result.stderr.split()
    )


def test_the_row_limit_is_named_with_its_line_and_its_option_raises_it(tmp_path, cli) -> None:
    path = _decisions(tmp_path / "d.csv", groups=2)  # 8 rows, a header and no blank line
    low = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-rows", "7"])
    assert low.exit_code == 2
    expected = "d.csv:9: more than the limit of 7 rows (--max-rows raises it)"
    assert expected in " ".join(low.stderr.split())
    ok = cli.invoke(app, [*ANALYZE, "--decisions", str(path), "--max-rows", "8"])
    assert ok.exit_code == 0, ok.output
    audit = ["audit", str(path), "--sex-col", "grp", "--selected-col", "ok", "--max-rows", "7"]
    refused = cli.invoke(app, [*audit, "--out", str(tmp_path / "audit")])
    assert refused.exit_code == 2 and "more than the limit of 7 rows" in refused.stderr
    assert DEFAULT_MAX_ROWS == 1_000_000


def test_a_nul_byte_in_a_cell_is_refused_with_its_line(tmp_path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("grp,ok\na,1\nb\x00,0\n")
    with pytest.raises(Exception) as refused:
        read_csv(path, "decisions CSV")
    assert str(refused.value) == f"{path}:3: a NUL byte in a cell"


def test_ll144_merges_labels_that_differ_only_in_case_or_whitespace(tmp_path, cli) -> None:
    df = pd.DataFrame(
        {
            "sex": ["Male", "male ", "MALE", "Male", "Female", " female", "Female", "Female"],
            "hired": [1, 1, 0, 0, 1, 0, 0, 0],
        }
    )
    audit = ll144_tables(df, sex_col="sex", selected_col="hired")
    sex = audit.tables["sex"].set_index("sex")
    assert sex["n"].to_dict() == {"Male": 4, "Female": 4}
    assert sex.loc["Male", "selection_rate"] == 0.5
    assert audit.merged == {"sex": {"Male": ["male ", "MALE"], "Female": [" female"]}}
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "audit"
    result = cli.invoke(app, ["audit", str(path), "--selected-col", "hired", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = " ".join(result.stdout.split())
    assert "Category labels that differ only in case or whitespace were counted as one:" in printed
    assert "sex: `Male` from `male `, `MALE`" in printed
    assert "sex: `Female` from ` female`" in printed
    assert json.loads((out / "audit.json").read_text())["merged"]["sex"]["Male"] == [
        "male ",
        "MALE",
    ]


def test_a_long_quoted_value_is_shortened_in_the_middle_of_its_message() -> None:
    from biasim.simulator.common.errors import MAX_MESSAGE_CHARS, Problem

    text = str(
        Problem("d.csv", 3, "ok", "no row has `accept`; values: " + "1" * 5000 + "; use --positive")
    )
    assert len(text) < MAX_MESSAGE_CHARS + 100
    assert text.startswith("d.csv:3: ok: no row has `accept`") and text.endswith("use --positive")
    assert "characters left out" in text


def test_a_5000_digit_score_is_exit_2_without_a_traceback(tmp_path, cli) -> None:
    path = tmp_path / "d.csv"
    path.write_text("sex,score\nM,1\nF,2\nM," + "9" * 5000 + "\n")
    result = cli.invoke(
        app, ["audit", str(path), "--score-col", "score", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 2 and "is not a number" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
