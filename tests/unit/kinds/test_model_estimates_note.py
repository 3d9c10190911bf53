"""The mixed model prints no p-value, and the report says why (issue 27): its interval is
conditional on the estimated variances and excluded a true null in 12 % of simulated studies."""

from __future__ import annotations

import io

from rich.console import Console

from biasim.analysis.stats.unit_models import UNCALIBRATED
from biasim.simulator.kinds.sections.expected import dpd_extremes, print_expected
from biasim.simulator.kinds.sections.unit_models import print_model_estimates


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
    out = io.StringIO()
    print_model_estimates(rows, [], Console(file=out, width=200))
    text = " ".join(out.getvalue().split())
    assert "0.410" in text  # the GEE's p
    assert "The mixed model prints no p-value" in text
    assert "12 % of simulated studies" in text and "test with the GEE" in text
    assert "posterior mode" not in text  # the fit is the Laplace approximation


def _row(model: str, converged: bool, note: str, odds_ratio: float) -> dict:
    return {
        "model": model,
        "group": "B",
        "reference": "A",
        "odds_ratio": odds_ratio,
        "or_low": odds_ratio / 2,
        "or_high": odds_ratio * 2,
        "p_value": 0.41,
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
        _row("GEE logistic", False, "separation: an odds ratio is infinite", 3.5),
        _row("mixed logistic", False, unfitted, float("nan")),
        _row("mixed logistic", False, unfitted, float("nan")),
    ]
    out = io.StringIO()
    print_model_estimates(rows, [], Console(file=out, width=200))
    text = out.getvalue()
    grid = [line for line in text.splitlines() if "│" in line]
    # The fit that warned stays, without numbers that are not to be read (kept in the CSV).
    assert len(grid) == 1 and "separation" in grid[0] and "3.50" not in grid[0]
    assert "0.410" not in grid[0] and "-" in grid[0]
    assert text.count("one group or one outcome") == 1
    assert (
        "2 rows not shown (kept in the CSV tables): the model was not fitted: one group or one "
        "outcome (rows: mixed B vs A; mixed B vs A)" in text
    )
    # None fitted: the title and the count, not the note that explains the fitted models.
    out = io.StringIO()
    print_model_estimates(rows[1:], [], Console(file=out, width=200))
    assert out.getvalue().splitlines()[1].startswith("2 rows not shown")
    assert "Odds ratio of each group" not in out.getvalue()


def test_a_tiny_p_of_a_converged_model_reads_below_0_001():
    out = io.StringIO()
    row = {**_row("GEE logistic", True, "", 2.0), "p_value": 1e-9}
    print_model_estimates([row], [], Console(file=out, width=200))
    grid = next(line for line in out.getvalue().splitlines() if "│" in line)
    assert "< 0.001" in grid and "0.000" not in grid


def test_a_dpd_of_zero_names_no_highest_and_lowest_group():
    assert dpd_extremes(0.0, "Black", "Black") == ("no difference", "-")
    assert dpd_extremes(0.25, "Black", "White") == ("Black", "White")
    out = io.StringIO()
    case = {"dpd": 0.0, "highest": "Black", "lowest": "Black", "p_value": 1.0}
    expected = {"cases": [{**case, "n_units": 6, "unit": "persona_id"}], "case_columns": []}
    print_expected({"expected": expected}, Console(file=out, width=200))
    assert "(no difference)" in out.getvalue() and "Black" not in out.getvalue()
