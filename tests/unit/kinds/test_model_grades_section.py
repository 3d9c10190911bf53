"""The model-grades figure of a comparison names a model that has no estimate (its GEE was
not fitted) rather than dropping its row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from biasim.simulator.kinds.base import Section
from biasim.simulator.kinds.sections.unit_models import add_model_estimates


def _answers() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    parts = []
    for model, rate in (("m1", {"female": 0.3, "male": 0.6}), ("m2", None), ("m3", {})):
        for unit in range(40):
            gender = "female" if unit % 2 else "male"
            p = 0.5 if rate is None else rate.get(gender, 1.0)  # m3 answers alike: not fitted
            hits = rng.random(4) < p
            parts += [(model, f"u{unit}", gender, bool(h)) for h in hits]
    return pd.DataFrame(parts, columns=["model_label", "unit", "gender", "hit"])


def test_a_model_without_an_estimate_keeps_its_row_in_the_grades_figure() -> None:
    section = Section(summary={})
    add_model_estimates(
        section,
        SimpleNamespace(name="dp"),
        _answers(),
        fit_cols=["model_label"],
        group_col="gender",
        hit_col="hit",
        unit_col="unit",
        item_col=None,
    )
    (figure,) = [f for name, f in section.figures.items() if "model_grades" in name]
    (ax,) = figure.axes
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert "m3 (no estimate)" in ticks and {"m1", "m2"} <= set(ticks)
    assert any(t.get_text().startswith("not fitted") for t in ax.texts)
