"""The DPD per case as ``demographic_parity`` declares it: a case whose groups share one rate
names no highest and no lowest group on any route (issue 45, item 5: a DPD of 0 printed
'highest: Black lowest: Black'); a case with a difference names both."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from biasim.analysis.stats.cases import case_parity, case_rates
from biasim.simulator.kinds.demographic_parity import TABLES


def _decisions(yes: dict[str, int]) -> pd.DataFrame:
    """Four answers per group of one case, ``yes[group]`` of them the target."""
    rows = [
        {"case": "c", "value": group, "decision": "Yes" if i < k else "No", "valid": True}
        for group, k in yes.items()
        for i in range(4)
    ]
    return pd.DataFrame(rows)


def _shown(yes: dict[str, int]) -> tuple[dict, str]:
    rates = case_rates(_decisions(yes), ["case"], "value", "decision", "Yes")
    (case,) = case_parity(rates, ["case"], "value", n_simulations=200).to_dict("records")
    out = io.StringIO()
    TABLES["cases"].named(cases_note="").print(Console(file=out, width=250), [case], "dp")
    return case, out.getvalue()


def test_a_dpd_of_zero_names_no_group_as_highest_and_lowest() -> None:
    case, text = _shown({"Black": 2, "White": 2, "Asian": 2})
    assert case["dpd"] == 0 and case["max_group"] is None and case["min_group"] is None
    assert "Black" not in text and "White" not in text
    (row,) = [line for line in text.splitlines() if line.startswith("│")]
    cells = [c.strip() for c in row.strip("│").split("│")]
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    heads = [c.strip() for c in header.strip("┃").split("┃")]
    assert cells[heads.index("highest")] == "-" and cells[heads.index("lowest")] == "-"


def test_a_difference_names_the_highest_and_the_lowest_group() -> None:
    case, text = _shown({"Black": 1, "White": 3, "Asian": 2})
    assert (case["max_group"], case["min_group"]) == ("White", "Black")
    assert "White" in text and "Black" in text
