"""A near-singular Laplace Hessian is said once in the fit's note, never as scipy's raw
``LinAlgWarning`` on stderr (where ``biasim power`` printed one per Newton step between its
progress lines)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from biasim.analysis.stats.glmm import fit_glmm
from biasim.analysis.stats.unit_models import mixed_odds_ratios


def test_a_near_singular_fit_warns_nothing_and_its_note_says_so(capfd) -> None:
    # Two fixed-effect columns 1e-6 apart: the Hessian is invertible but ill-conditioned.
    rng = np.random.default_rng(1)
    t = rng.integers(0, 2, 40).astype(float)
    x = np.c_[np.ones(40), t, t + 1e-6 * rng.random(40)]
    k = rng.binomial(5, 0.3 + 0.3 * t).astype(float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = fit_glmm(x, [np.repeat(np.arange(10), 4)], np.full(40, 5.0), k)
    assert caught == [] and capfd.readouterr().err == ""
    assert fit.near_singular > 0
    assert fit.note.startswith(f"the Laplace Hessian was near-singular in {fit.near_singular}")


def test_a_separated_group_leaves_no_warning_and_a_note(capfd) -> None:
    # Group a never hits: its effect runs off to -inf and the Newton steps are ill-conditioned.
    rows = [
        {"g": g, "unit": f"{g}{u}", "item": i, "y": g == "b" and (u + i) % 2 == 0}
        for g in "ab"
        for u in range(5)
        for i in range(4)
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = mixed_odds_ratios(pd.DataFrame(rows), "g", "y", "unit", "item")
    assert caught == [] and capfd.readouterr().err == ""
    assert not table["converged"].any() and table["note"].iloc[0] != ""
    assert "random-intercept sd" not in table["note"].iloc[0]


def test_a_well_conditioned_fit_has_no_note() -> None:
    rng = np.random.default_rng(2)
    t = rng.integers(0, 2, 40).astype(float)
    k = rng.binomial(5, 0.3 + 0.3 * t).astype(float)
    fit = fit_glmm(np.c_[np.ones(40), t], [np.repeat(np.arange(10), 4)], np.full(40, 5.0), k)
    assert fit.near_singular == 0 and fit.note == ""
