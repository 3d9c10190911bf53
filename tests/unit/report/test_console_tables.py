"""The one console table renderer: it fits any width by wrapping, abbreviating headers or
splitting columns into groups that repeat the key columns, never by a block per row; it hides
internal columns and counts the rows a caller hides."""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.table import Table

from biasim.simulator.common.tables import Hidden, print_table

BLOCK = re.compile(r"^\s*- \w+:", re.MULTILINE)


def _printed(table: Table, width: int, hidden: Hidden | None = None) -> str:
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=width, color_system=None), table, hidden)
    return buffer.getvalue()


def _table(title: str, columns: tuple[str, ...], *rows: tuple[str, ...]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def test_a_long_text_cell_wraps_in_the_grid() -> None:
    note = "a long explanation that can wrap over several lines of the cell"
    text = _printed(_table("t", ("group", "note", "p"), ("non-binary", note, "0.0123456")), 40)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 40 and "┃" in text  # the boxed grid, whole
    assert "0.0123456" in text and "non-binary" in text and "…" not in text
    cells = " ".join(line.split("│")[2].strip() for line in lines if line.count("│") == 4)
    assert cells == note and len(lines) > 6  # the note wrapped over rows, every word kept


def test_a_wide_table_splits_into_groups_that_repeat_its_keys() -> None:
    table = _table(
        "rates",
        ("model", "attribute", "DPD", "threshold", "p"),
        ("synthetic:synthetic-responder", "gender", "0.250", "0.500", "0.828"),
        ("gpt-4o", "race", "0.125", "0.400", "0.031"),
    )
    text = _printed(table, 40)
    lines = text.splitlines()
    assert not BLOCK.search(text) and max(map(len, lines)) <= 40
    assert lines[0].strip() == "rates"
    assert [line.strip() for line in lines if "(continued)" in line] == ["rates (continued)"] * 3
    # Every group names its rows by the key column, whole; every value appears once.
    headers = [line.split() for line in lines if line.split()[:1] == ["model"]]
    assert [h[1:] for h in headers] == [["attribute"], ["DPD"], ["threshold"], ["p"]]
    assert text.count("synthetic:synthetic-responder") == 4 and text.count("gpt-4o") == 4
    for value in ("0.250", "0.500", "0.828", "0.125", "0.400", "0.031", "gender", "race"):
        assert text.count(value) == 1, value


def test_wide_headers_over_narrow_values_are_abbreviated_with_a_legend() -> None:
    table = _table(
        "t",
        ("group", "threshold", "excluded", "significant"),
        ("Black", "0.5", "1", "no"),
        ("White", "0.4", "0", "yes"),
    )
    assert "threshold" in _printed(table, 80) and "abbreviations" not in _printed(table, 80)
    text = _printed(table, 28)
    assert text.splitlines()[1].split() == ["group", "thr.", "exc.", "sig."]
    assert "abbreviations: thr. = threshold; exc. = excluded; sig. = significant" in " ".join(
        text.split()
    )
    assert max(map(len, text.splitlines())) <= 28


def test_a_column_the_same_in_every_row_moves_to_one_line_when_narrow() -> None:
    table = _table(
        "t",
        ("model", "group", "rate", "p"),
        ("synthetic:synthetic-responder", "female", "0.250", "0.500"),
        ("synthetic:synthetic-responder", "male", "0.125", "0.400"),
    )
    assert _printed(table, 80).count("synthetic:synthetic-responder") == 2  # fits: as it is
    text = _printed(table, 30)
    assert "every row: model synthetic:synthetic-responder" in " ".join(text.split())
    assert text.count("synthetic:synthetic-responder") == 1 and "female" in text


def test_a_column_empty_in_every_row_is_not_said() -> None:
    """labor_market's decomposition printed "every row: identity yes; undefined because "."""
    table = _table(
        "t",
        ("model", "group", "identity", "undefined because"),
        ("synthetic:synthetic-responder", "female", "yes", ""),
        ("synthetic:synthetic-responder", "male", "yes", ""),
    )
    text = " ".join(_printed(table, 30).split())
    assert "every row: model synthetic:synthetic-responder; identity yes" in text
    assert "undefined because" not in text


def test_internal_columns_never_show() -> None:
    table = _table("t", ("group", "_persona", "rate"), ("female", "p-17", "0.250"))
    for width in (20, 80):
        text = _printed(table, width)
        assert "_persona" not in text and "p-17" not in text and "0.250" in text


def test_hidden_rows_are_counted_and_named_in_one_note_line() -> None:
    table = _table("estimates", ("group", "OR"), ("female", "1.20"))
    hidden = Hidden(("GEE male vs female", "mixed male vs female"), "not fitted: one outcome")
    text = _printed(table, 120, hidden)
    assert text.splitlines()[-1] == (
        "2 rows not shown (kept in the CSV tables): not fitted: one outcome "
        "(rows: GEE male vs female; mixed male vs female)"
    )
    # Every row hidden: the title and the note, no empty grid.
    empty = _printed(_table("estimates", ("group", "OR")), 80, Hidden(("B vs A",), "not fitted"))
    assert empty.splitlines() == [
        "estimates",
        "1 row not shown (kept in the CSV tables): not fitted (row: B vs A)",
    ]
    assert "not shown" not in _printed(table, 80, Hidden((), "not fitted"))
    # What every hidden row shares is said once, before the rows' own names.
    shared = Hidden(("GEE B vs A", "mixed B vs A"), "not fitted", of="gpt-4o gender")
    assert (
        _printed(table, 120, shared)
        .splitlines()[-1]
        .endswith("not fitted (rows of gpt-4o gender: GEE B vs A; mixed B vs A)")
    )


def test_many_hidden_rows_are_named_as_far_as_the_width_allows() -> None:
    table = _table("estimates", ("group", "OR"), ("female", "1.20"))
    names = tuple(f"model-{i} B vs A" for i in range(40))
    for width in (100, 140):
        (note,) = [
            ln
            for ln in _printed(table, width, Hidden(names, "not fitted")).splitlines()
            if "not shown" in ln
        ]
        assert len(note) <= width
        listed = note.split("(rows: ")[1].removesuffix(")")
        shown = listed.split(" and ")[0].split("; ")
        assert shown == list(names[: len(shown)]) and 1 <= len(shown) < 40
        assert listed.endswith(f" and {40 - len(shown)} more")
    # A long reason wraps; the names fit a line of their own.
    text = _printed(table, 60, Hidden(names, "the model was not fitted: " + "x " * 40))
    last = text.splitlines()[-1]
    assert last.startswith("  rows: model-0 B vs A; model-1 B vs A") and len(last) <= 60
    assert last.endswith(" more")


def test_a_table_with_nothing_to_show_prints_one_line_that_says_so() -> None:
    assert _printed(_table("rates", ("group", "p")), 80).splitlines() == ["rates", "(no rows)"]
    internal = _table("rates", ("_persona", "_seed"), ("p-1", "3"), ("p-2", "4"))
    assert _printed(internal, 80).splitlines() == [
        "rates",
        "(2 rows not shown: every column is empty or internal; see the CSV tables)",
    ]
    blank = _table("", ("group", "p"), ("", " "))
    assert _printed(blank, 80).splitlines() == [
        "(1 row not shown: every column is empty or internal; see the CSV tables)"
    ]


def test_a_one_row_table_names_its_row_on_one_line_when_narrow() -> None:
    table = _table(
        "dpd",
        ("model", "attribute", "DPD", "threshold", "p"),
        ("local:SmolLM2-135M-Instruct.Q4_1", "gender", "0.250", "0.500", "0.828"),
    )
    text = _printed(table, 40)
    assert "the row: model local:SmolLM2-135M-Instruct.Q4_1; attribute gender" in " ".join(
        text.split()
    )
    assert text.splitlines()[1].split() == ["DPD", "threshold", "p"]
    assert text.splitlines()[3].split() == ["0.250", "0.500", "0.828"]


def test_a_p_value_or_a_unit_never_wraps_inside_its_cell() -> None:
    """At 80 columns a long text column takes the slack; ``< 0.001``, ``120 persona_id`` (a
    number) and a unit in words in a ``no_wrap`` column stay on one line each (cut at its
    space, a p would read ``<`` above ``0.001``)."""
    note = "a long explanation that wraps over several lines of its cell, " * 3
    table = Table(title="tests")
    for column in ("case", "note", "p", "p adj.", "units"):
        table.add_column(column, justify="right")
    table.add_column("unit", no_wrap=True)
    table.add_row("gender", note, "< 0.001", "0.004", "120 persona_id", "persona, 60 units")
    table.add_row("race", note[1:], "0.012", "< 0.001", "96 persona_id", "persona, 58 units")
    text = _printed(table, 80)
    assert max(map(len, text.splitlines())) <= 80
    assert text.count("< 0.001") == 2 and "120 persona_id" in text and "96 persona_id" in text
    assert "persona, 60 units" in text and "persona, 58 units" in text


def test_a_value_that_is_not_zero_never_shows_as_zero() -> None:
    """The console and the page format numbers with one function: a difference of 1e-6 beside a
    small p printed `0.000 p = 0.049` (issue 47's review); now it prints in scientific
    notation, and zero and p-values keep their formats."""
    from biasim.simulator.common.html import fmt

    assert [fmt(1.2e-6), fmt(-3e-5), fmt(0.0), fmt(0.25)] == [
        "1.2e-06",
        "-3.0e-05",
        "0.000",
        "0.250",
    ]
    assert fmt(2e-6, "p") == "< 0.001" and fmt(0.0004, ".4f") == "0.0004"
