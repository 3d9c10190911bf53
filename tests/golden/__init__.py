"""Golden tables: every built-in study's CSV tables, as a run on the synthetic responder writes
them (fixed seed, smallest size; ``tests/builtin_runs.py``), recorded in a compact text form so
that a changed number fails ``tests/e2e/test_golden_tables.py`` and a deliberate change is one
command: ``make golden`` (``python -m tests.golden --update``), which prints what changed.

The form, per table: its name, shape and columns, then its rows as CSV text with every number
printed at 10 significant digits (and ``0`` below 1e-12 in size), so the last-digit noise of
another machine's BLAS does not break it. A table whose text is longer than
:data:`MAX_INLINE` characters is recorded by its shape and the SHA-256 of that rounded text.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from pathlib import Path

#: Where the recordings live: one file per built-in study.
GOLDEN = Path(__file__).parent
#: The longest rounded table kept row by row; longer ones are kept as shape and digest.
MAX_INLINE = 6000
#: Significant digits kept of a number.
DIGITS = 10
#: Magnitude below which a number is written as 0 (a difference of equal sums, in noise).
TINY = 1e-12

_INTEGER = re.compile(r"-?\d+")


def rounded(cell: str) -> str:
    """``cell`` with a number in it at :data:`DIGITS` significant digits; text as it is."""
    if _INTEGER.fullmatch(cell):
        return cell
    try:
        value = float(cell)
    except ValueError:
        return cell
    if math.isfinite(value) and abs(value) < TINY:
        return "0"
    return f"{value:.{DIGITS}g}"


def table_text(path: Path) -> str:
    """One table in the recorded form."""
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    header, body = (rows[0], rows[1:]) if rows else ([], [])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[rounded(c) for c in r] for r in body])
    text = buffer.getvalue()
    head = f"== {path.name}: {len(body)} rows x {len(header)} columns\n" + ",".join(header)
    if len(text) > MAX_INLINE:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return f"{head}\nsha256 of the rounded rows: {digest}\n"
    return f"{head}\n{text}"


def run_text(run: Path) -> str:
    """Every table of a run folder (``tables/*.csv``), in name order."""
    tables = sorted((run / "tables").glob("*.csv"))
    return "".join(table_text(t) for t in tables)


def golden_path(study: str) -> Path:
    return GOLDEN / f"{study}.txt"


def _tables(text: str) -> dict[str, str]:
    """Recorded text by table name (the blocks that ``== NAME:`` lines begin)."""
    blocks = re.split(r"^(?=== )", text, flags=re.MULTILINE)
    return {b[3:].split(":", 1)[0]: b for b in blocks if b.startswith("== ")}


def changes(recorded: str, written: str, *, lines: int = 12) -> list[str]:
    """What differs between two recordings, table by table: added, removed, and changed ones
    with their first differing lines (``-`` recorded, ``+`` now)."""
    import difflib

    old, new = _tables(recorded), _tables(written)
    found = [f"new table {name}" for name in new if name not in old]
    found += [f"table gone: {name}" for name in old if name not in new]
    for name in [n for n in old if n in new and old[n] != new[n]]:
        diff = difflib.unified_diff(
            old[name].splitlines(), new[name].splitlines(), lineterm="", n=0
        )
        shown = [d for d in diff if d[:1] in "+-" and d[:3] not in ("---", "+++")]
        more = f" (+{len(shown) - lines} more lines)" if len(shown) > lines else ""
        found.append(f"changed {name}{more}:\n  " + "\n  ".join(shown[:lines]))
    return found
