"""The mixed model prints no p-value, and the report says why (issue 27): its interval is
conditional on the estimated variances and excluded a true null in 12 % of simulated studies."""

from __future__ import annotations

import io

from rich.console import Console

from biasim.analysis.stats.unit_models import UNCALIBRATED
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
