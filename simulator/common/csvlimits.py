"""Bounds on the CSV files biasim reads (kept free of pandas so the command line can name them
in its options without importing it)."""

from __future__ import annotations

from dataclasses import dataclass

#: Longest cell a CSV biasim reads may hold (characters; ``--max-cell-chars`` raises it up to
#: :data:`CELL_CHARS_CEILING`): a letter is a few thousand, and a 50 MB cell would take minutes.
DEFAULT_MAX_CELL_CHARS = 100_000
#: The most ``--max-cell-chars`` may allow: spaCy refuses longer texts.
CELL_CHARS_CEILING = 1_000_000
#: Most distinct groups a decisions CSV may have (``--max-groups`` raises it): the parity tests'
#: memory and time grow with the number of groups (100,000 would need gigabytes).
DEFAULT_MAX_GROUPS = 1_000
#: Most data rows a CSV biasim reads may hold (``--max-rows`` raises it), counted while the file
#: is streamed, before pandas holds it: a million rows of a two-column decisions CSV take about
#: 450 MB, two million 800 MB.
DEFAULT_MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class CsvLimits:
    """Bounds on a CSV biasim reads; each names the option that raises it."""

    max_cell_chars: int = DEFAULT_MAX_CELL_CHARS
    max_groups: int = DEFAULT_MAX_GROUPS
    max_rows: int = DEFAULT_MAX_ROWS
