"""WEAT: effect size and permutation p against a plain computation, exactness against scipy's
exact permutation test, calibration under a null, and the shipped MiniLM embeddings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from biasim.analysis.weat import SentenceEmbedder, association, weat

RNG = np.random.default_rng(0)
X, Y, A, B = (RNG.normal(size=(k, 5)) for k in (4, 4, 3, 3))


def _cos(u, v):
    return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


def test_effect_size_by_hand():
    s = [np.mean([_cos(w, a) for a in A]) - np.mean([_cos(w, b) for b in B]) for w in (*X, *Y)]
    np.testing.assert_allclose(association(np.vstack([X, Y]), A, B), s)
    out = weat(X, Y, A, B)
    assert out["effect_size"] == pytest.approx(
        (np.mean(s[:4]) - np.mean(s[4:])) / np.std(s, ddof=1)
    )
    assert out["statistic"] == pytest.approx(sum(s[:4]) - sum(s[4:]))


def test_exact_p_matches_scipy():
    s = association(np.vstack([X, Y]), A, B)
    ref = stats.permutation_test(
        (s[:4], s[4:]),
        lambda u, v: u.sum() - v.sum(),
        permutation_type="independent",
        n_resamples=np.inf,
        alternative="greater",
        vectorized=False,
    )
    out = weat(X, Y, A, B)
    assert out["exact"] and out["p_value"] == pytest.approx(ref.pvalue)
    big = weat(*(RNG.normal(size=(k, 5)) for k in (12, 12, 3, 3)), n_permutations=20000, seed=1)
    assert not big["exact"] and 0 < big["p_value"] <= 1
    with pytest.raises(ValueError, match="set A is empty"):
        weat(X, Y, A[:0], B)


@pytest.mark.slow
def test_weat_calibration():
    rng = np.random.default_rng(3)
    sims = 1000
    rejected = 0
    for i in range(sims):
        x, y, a, b = (rng.normal(size=(k, 16)) for k in (8, 8, 8, 8))
        rejected += weat(x, y, a, b, n_permutations=999, seed=i)["p_value"] <= 0.05
    assert 0.03 <= rejected / sims <= 0.07, rejected / sims


def test_shipped_minilm_embeddings_separate_career_from_family():
    embedder = SentenceEmbedder()
    career = embedder.embed(["executive", "management", "salary", "office", "business"])
    family = embedder.embed(["home", "parents", "children", "family", "relatives"])
    male = embedder.embed(["john", "paul", "mike", "kevin", "steve"])
    female = embedder.embed(["amy", "joan", "lisa", "sarah", "diana"])
    # Career words sit closer to career words than to family words: a sanity check that the
    # shipped weights load and embed, not a bias claim.
    assert (association(career, career, family) > 0).all()
    out = weat(male, female, career, family, n_permutations=5000)
    assert np.isfinite(out["effect_size"]) and 0 < out["p_value"] <= 1
