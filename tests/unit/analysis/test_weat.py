"""WEAT: effect size and permutation p against a plain computation, exactness against scipy's
exact permutation test, calibration under a null, and the shipped MiniLM embeddings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from biasim.analysis.text.weat import SentenceEmbedder, association, weat

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


def test_salient_weat_takes_the_strongest_words_of_each_side_and_cuts_to_equal_size():
    import pandas as pd

    from biasim.analysis.text.weat import TOO_FEW, salient_weat
    from biasim.analysis.text.word_sets import load_word_sets

    salient = pd.DataFrame(
        {
            "side": ["male"] * 4 + ["female"] * 3,
            "word": ["w1", "w2", "w3", "w4", "v1", "v2", "v3"],
            "odds_ratio": [1.5, 4.0, 2.0, 3.0, 0.5, 0.2, 0.9],
        }
    )
    vectors = {w: RNG.normal(size=5) for w in ["w1", "w2", "w3", "w4", "v1", "v2", "v3"]}
    vectors.update({w: RNG.normal(size=5) for w in ["a1", "a2", "b1", "b2"]})
    seen = []

    def embed(words):
        seen.append(list(words))
        return np.vstack([vectors[w] for w in words])

    sets = {"T": {"male": ["a1", "a2"], "female": ["b1", "b2"]}}
    out = salient_weat(salient, ("male", "female"), embed, sets, n_permutations=1000)
    row = out.iloc[0]
    # Strongest first: male by descending odds ratio, female by ascending, 3 each.
    assert row["words_male"] == "w2 w4 w3" and row["words_female"] == "v2 v1 v3"
    expected = weat(
        embed(["w2", "w4", "w3"]),
        embed(["v2", "v1", "v3"]),
        embed(["a1", "a2"]),
        embed(["b1", "b2"]),
        1000,
    )
    assert row["effect_size"] == pytest.approx(expected["effect_size"])
    assert row["p_value"] == pytest.approx(expected["p_value"]) and row["exact"]
    few = salient_weat(salient[salient["side"] == "male"], ("male", "female"), embed, sets)
    assert few.iloc[0]["excluded"] == TOO_FEW and np.isnan(few.iloc[0]["effect_size"])
    shipped = load_word_sets()
    assert list(shipped) == ["MF", "CF"]
    # Caliskan et al. 2017, WEAT 6, as published: 8 words per set.
    assert shipped["CF"]["male"][:3] == ["executive", "management", "professional"]
    assert all(len(words) == 8 for sets_ in shipped.values() for words in sets_.values())


def test_sets_for_groups_reads_a_unique_prefix_and_says_why_not() -> None:
    from biasim.analysis.text.word_sets import sets_for_groups

    sets = {"MF": {"male": ["he"], "female": ["she"]}}
    keyed, why = sets_for_groups(sets, ("m", "F"))
    assert keyed == {"MF": {"m": ["he"], "F": ["she"]}} and why == ""
    keyed, why = sets_for_groups(sets, ("man", "f"))
    assert keyed is None and why == "test `MF` has no words for group `man`"
    # "fe" would name female only; an empty prefix would name both: refused, not guessed
    assert sets_for_groups(sets, ("", "fe"))[0] is None
