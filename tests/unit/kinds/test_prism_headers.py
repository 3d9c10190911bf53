"""Every header of a PRISM table names one column: a value the console says under a table
(``every row: ... application sd 0.000``) or a header of the models' table, which holds both
sides' baselines, says whose it is."""

from __future__ import annotations

from collections import Counter

import pytest

from biasim.simulator.kinds.sections.prism_result import TABLES


@pytest.mark.parametrize("key", sorted(TABLES))
def test_no_two_columns_of_a_prism_table_share_a_header(key: str) -> None:
    headers = Counter(column.label or column.key for column in TABLES[key].columns)
    assert [h for h, n in headers.items() if n > 1] == [], key


def test_the_models_table_heads_each_sides_baseline_with_the_side() -> None:
    headers = [column.label for column in TABLES["model_comparison"].columns]
    for side in ("posting", "application"):
        assert [f"{side} baseline", f"{side} 95 % null", f"{side} reading"] == [
            h for h in headers if h.startswith(f"{side} ") and h != f"{side} sd"
        ]
    # The one-side table keeps the short headers.
    assert {"baseline", "95 % null", "reading"} <= {c.label for c in TABLES["baseline"].columns}
