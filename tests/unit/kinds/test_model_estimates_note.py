"""The mixed model prints no p-value, and the report says why (issue 27): its interval is
conditional on the estimated variances and excluded a true null in 12 % of simulated studies.
The table is the declared one (``MODEL_ESTIMATES``): what the console shows is what the page,
the CSV file and the summary hold."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pandas as pd
from rich.console import Console

from biasim.analysis.stats.unit_models import UNCALIBRATED
from biasim.simulator.kinds.base import Section
from biasim.simulator.kinds.sections.expected import EXPECTED_CASES
from biasim.simulator.kinds.sections.unit_models import MODEL_ESTIMATES, add_model_estimates


def _printed(rows: list[dict]) -> str:
    out = io.StringIO()
    MODEL_ESTIMATES.print(Console(file=out, width=200), rows, "dp")
    return out.getvalue()


def test_the_console_says_why_the_mixed_model_has_no_p_value():
    rows = [
        {
            "model": model,
            "group": "B",
            "reference": "A",
            "odds_ratio": 1.1,
            "or_low": 0.8,
            "or_high": 1.5,
            "p_value": p,
            "n_units": 40,
            "unit": "name",
            "converged": True,
            "note": "" if model.startswith("GEE") else UNCALIBRATED,
        }
        for model, p in (("GEE logistic", 0.41), ("mixed logistic", float("nan")))
    ]
    text = " ".join(_printed(rows).split())
    assert "0.410" in text  # the GEE's p
    assert "The mixed model prints no p-value" in text
    assert "12 % of simulated studies" in text and "test with the GEE" in text
    assert "posterior mode" not in text  # the fit is the Laplace approximation


def _row(model: str, converged: bool, note: str, odds_ratio: float) -> dict:
    return {
        "model": model,
        "group": "B",
        "reference": "A",
        "p_value": 0.41,
        "odds_ratio": odds_ratio,
        "or_low": odds_ratio / 2,
        "or_high": odds_ratio * 2,
        "n_units": 12,
        "unit": "persona_id",
        "converged": converged,
        "note": note,
    }


def test_unfitted_models_say_nothing_and_are_counted_in_one_line():
    """A saturated run (every unit answers alike): the models that were not fitted are left out
    of the console table with one line saying how many and why; a fit that warned stays."""
    unfitted = "not fitted: one group or one outcome"
    rows = [
        _row("GEE logistic", False, "separation: an odds ratio is infinite", float("nan")),
        _row("mixed logistic", False, unfitted, float("nan")),
        _row("mixed logistic", False, unfitted, float("nan")),
    ]
    text = _printed(rows)
    grid = [line for line in text.splitlines() if "│" in line]
    assert len(grid) == 1 and "separation" in grid[0] and "no" in grid[0]
    assert "2 rows not shown (kept in the CSV tables): the model was not fitted" in text
    assert "(rows: mixed logistic B vs A; mixed logistic B vs A)" in text
    # None fitted: the title and the count, not the note that explains the fitted models.
    text = _printed(rows[1:])
    assert text.splitlines()[1].startswith("2 rows not shown")
    assert "Odds ratio of each group" not in text
    # A run's every fit unfitted (make run's few answers): the model and axis every row shares
    # are said once, then each row by its fit and contrast.
    run = [
        {"model_label": "local:m", "attribute": "gender", **_row(model, False, unfitted, np.nan)}
        | {"group": group, "reference": "male"}
        for model in ("GEE logistic", "mixed logistic")
        for group in ("female", "non-binary")
    ]
    assert (
        "(rows of local:m gender: GEE logistic female vs male; GEE logistic non-binary vs male"
        " and 2 more)"
    ) in " ".join(_printed(run).split())


def test_a_fit_that_did_not_converge_shows_no_number_on_any_route():
    """Perfect separation: the GEE does not converge and its odds ratio is not to be read; the
    table (the CSV file and the summary, hence the console and the page) holds none."""
    rng = np.random.default_rng(1)
    rows = pd.DataFrame(
        {
            "unit": [f"u{i}" for i in range(40) for _ in range(3)],
            "gender": ["female" if i % 2 else "male" for i in range(40) for _ in range(3)],
        }
    )
    rows["hit"] = rows["gender"] == "male"  # every male targeted, no female: separation
    rows["model_label"] = "m"
    rows = rows.sample(frac=1.0, random_state=int(rng.integers(100)))
    table, grades = add_model_estimates(
        Section(summary={}),
        SimpleNamespace(name="dp"),
        rows,
        fit_cols=["model_label"],
        group_col="gender",
        hit_col="hit",
        unit_col="unit",
        item_col=None,
    )
    assert grades is None  # one model: nothing to grade
    unread = table[~table["converged"].astype(bool)]
    assert len(unread) >= 1
    assert unread[["odds_ratio", "or_low", "or_high", "p_value", "estimate"]].isna().all().all()
    read = table[table["converged"].astype(bool)]
    assert read["odds_ratio"].notna().all()


def test_a_tiny_p_of_a_converged_model_reads_below_0_001():
    row = {**_row("GEE logistic", True, "", 2.0), "p_value": 1e-9}
    grid = next(line for line in _printed([row]).splitlines() if "│" in line)
    assert "< 0.001" in grid and "0.000" not in grid


def test_expected_decisions_of_equal_means_name_no_highest_and_lowest_group():
    case = {"model_label": "m", "groups": 2, "n_units": 6, "max_group": None, "min_group": None}
    case |= {"dpd": 0.0, "p_value": 1.0}
    out = io.StringIO()
    EXPECTED_CASES.named(unit="persona_id", unit_means="replicates pooled").print(
        Console(file=out, width=200), [case], "dp"
    )
    grid = next(line for line in out.getvalue().splitlines() if "│" in line)
    assert grid.count(" - ") == 2 and "0.000" in grid
