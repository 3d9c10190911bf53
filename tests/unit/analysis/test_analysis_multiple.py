"""Holm and Benjamini–Hochberg against statsmodels' multipletests."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from biasim.analysis.stats.multiple import adjust, benjamini_hochberg, holm


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("ours", "theirs"), [(holm, "holm"), (benjamini_hochberg, "fdr_bh")])
def test_matches_statsmodels(seed, ours, theirs):
    rng = np.random.default_rng(seed)
    # Ties and tiny values both occur in practice (exact tests, many equal counts).
    p = np.concatenate([rng.uniform(0, 0.1, 20), rng.uniform(0, 1, 20), [0.01, 0.01, 1.0]])
    rng.shuffle(p)
    expected = multipletests(p, method=theirs)[1]
    np.testing.assert_allclose(ours(p), expected, rtol=1e-12, atol=1e-15)


def test_adjust_by_name_and_bad_input():
    p = [0.01, 0.04, 0.03]
    np.testing.assert_allclose(adjust(p, "holm"), holm(p))
    np.testing.assert_allclose(adjust(p, "none"), p)
    with pytest.raises(ValueError, match="unknown adjustment"):
        adjust(p, "bonferonni")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.5, 1.2])
