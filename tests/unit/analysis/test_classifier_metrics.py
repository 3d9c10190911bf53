"""Table 19 of seed 002: a style scorer's precision, recall and F1 on labelled sentences, against
scikit-learn computed on the scorer's own labels in the test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

from biasim.analysis.text.classifier_metrics import (
    label_metrics,
    read_labelled_sentences,
    scorer_metrics,
)
from biasim.analysis.text.scorers import create_scorer

SENTENCES = [
    ("She is a confident and ambitious leader.", 1),
    ("He took the initiative and led the team.", 1),
    ("An independent, decisive engineer.", 1),
    ("He is kind and caring to everyone.", 1),  # labelled agentic, reads communal: a miss
    ("She is warm and helpful.", 0),
    ("A supportive and pleasant colleague.", 0),
    ("They are caring and kind.", 0),
    ("An ambitious and decisive colleague.", 0),  # labelled communal, reads agentic: a false alarm
    ("The weather was fine.", 0),  # no agency word either way: unscored
]


def test_label_metrics_equal_sklearn() -> None:
    rng = np.random.default_rng(19)
    truth = rng.integers(0, 2, 200)
    predicted = np.where(rng.random(200) < 0.8, truth, 1 - truth)
    out = label_metrics(truth, predicted)
    p, r, f, _ = precision_recall_fscore_support(truth, predicted, average="binary")
    assert (out["precision"], out["recall"], out["f1"]) == pytest.approx((p, r, f))
    assert out["macro_f1"] == pytest.approx(f1_score(truth, predicted, average="macro"))
    assert out["accuracy"] == pytest.approx(accuracy_score(truth, predicted))
    assert out["tp"] + out["fp"] + out["fn"] + out["tn"] == 200


def test_a_scorer_on_a_tiny_labelled_set(tmp_path) -> None:
    path = tmp_path / "labelled.csv"
    pd.DataFrame(SENTENCES, columns=["text", "label"]).to_csv(path, index=False)
    scorer = create_scorer("agency_lexicon")
    row = scorer_metrics("agentic", scorer, path)
    # The oracle: the scorer's own labels, scored sentences only, through scikit-learn.
    labels = scorer.score([t for t, _ in SENTENCES]).values[:, 0]
    scored = ~np.isnan(labels)
    truth = np.array([y for _, y in SENTENCES])[scored]
    predicted = labels[scored].astype(int)
    p, r, f, _ = precision_recall_fscore_support(truth, predicted, average="binary")
    assert (row["n"], row["n_unscored"]) == (9, int((~scored).sum()))
    assert row["n_unscored"] >= 1
    assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((p, r, f))
    assert row["accuracy"] == pytest.approx(accuracy_score(truth, predicted))
    # The planted miss and false alarm: neither metric is perfect.
    assert row["precision"] < 1 and row["recall"] < 1


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"text": "a", "lab": 1}], "needs columns `text` and `label`"),
        ([{"text": "a", "label": 1}, {"text": "b", "label": 2}], "labelled.csv:3: column `label`"),
        ([{"text": "a", "label": 1}, {"text": " ", "label": 0}], "labelled.csv:3: column `text`"),
        ([{"text": "a", "label": 1}, {"text": "b", "label": 1}], "one value only"),
    ],
)
def test_bad_labelled_files_name_file_line_and_column(tmp_path, rows, expected) -> None:
    path = tmp_path / "labelled.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(ValueError, match=expected):
        read_labelled_sentences(path)
