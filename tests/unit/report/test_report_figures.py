"""Every figure a synthetic run produces carries the synthetic banner; a real run's do not."""

from __future__ import annotations

import pandas as pd
import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.report.outputs import SYNTHETIC_NOTE, analyze
from biasim.simulator.study.load import load_study
from tests.golden_studies import GOLDEN_DIR


def _banners(figure) -> list[str]:
    return [t.get_text() for t in figure.texts if " ".join(t.get_text().split()) == SYNTHETIC_NOTE]


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_every_figure_of_a_synthetic_run_says_so() -> None:
    results = pd.read_parquet(GOLDEN_DIR / "li2025_small" / "results.parquet")
    study = load_study(builtin_path("li2025_decisions")).config
    assert results["synthetic"].all()
    evidence = analyze(results, study)
    # Figs. 3, 4 (one per persona condition) and 5 at least.
    assert len(evidence.figures) >= 5
    for name, figure in evidence.figures.items():
        assert len(_banners(figure)) == 1, name
    real = analyze(results.assign(synthetic=False), study)
    assert set(real.figures) == set(evidence.figures)
    for name, figure in real.figures.items():
        assert _banners(figure) == [], name
