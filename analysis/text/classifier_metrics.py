"""How well a style scorer labels sentences: precision, recall and F1 on labelled data (seed 002,
Table 19: the paper's three classifiers on their held-out sets).

A labelled CSV has a ``text`` column and a ``label`` column of 0 / 1, 1 meaning what the
dimension counts (positive, formal, agentic: the released agency dataset's ``test.csv`` is in
this form). The scorer labels every text as in the letters analysis (its ``label`` column, 1 or
0; a text it cannot score is counted apart, not guessed). Precision, recall and F1 are of label
1, as the paper reports them, with the macro F1 over both labels and the accuracy beside them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from biasim.analysis.text.scorers import ScoreCache, TextScorer, cached_scores

LABEL_VALUES = {"0": 0, "1": 1, "false": 0, "true": 1}


def read_labelled_sentences(path: Path) -> tuple[list[str], np.ndarray]:
    """Texts and 0/1 labels of a labelled CSV (``text,label``).

    Raises:
        ValueError: A missing column, an empty text or a label other than 0/1 (naming the
            file, line and column), or a file holding one label only.
    """
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in ("text", "label") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: labelled data needs columns `text` and `label` (no {missing})")
    labels = frame["label"].str.strip().str.lower().map(LABEL_VALUES)
    for column, bad in (("label", labels.isna()), ("text", frame["text"].str.strip() == "")):
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            what = "0 or 1" if column == "label" else "a text"
            raise ValueError(f"{path}:{line}: column `{column}` must hold {what}")
    if labels.nunique() < 2:
        raise ValueError(f"{path}: column `label` holds one value only; precision needs both")
    return frame["text"].tolist(), labels.to_numpy(dtype=np.int64)


def label_metrics(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float | int]:
    """Counts and metrics of ``predicted`` against ``truth`` (both 0/1 arrays)."""
    truth, predicted = np.asarray(truth, dtype=bool), np.asarray(predicted, dtype=bool)
    tp = int((truth & predicted).sum())
    fp = int((~truth & predicted).sum())
    fn = int((truth & ~predicted).sum())
    tn = int((~truth & ~predicted).sum())
    precision, recall, f1 = _prf(tp, fp, fn)
    _, _, f1_zero = _prf(tn, fn, fp)
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "macro_f1": (f1 + f1_zero) / 2,
        "accuracy": (tp + tn) / truth.size if truth.size else np.nan,
    }


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """Precision, recall and F1 of one label; NaN where a ratio has nothing to divide."""
    precision = tp / (tp + fp) if tp + fp else np.nan
    recall = tp / (tp + fn) if tp + fn else np.nan
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else np.nan
    return precision, recall, f1


def scorer_metrics(
    dimension: str,
    scorer: TextScorer,
    path: Path,
    cache: ScoreCache | None = None,
) -> dict[str, object]:
    """One row of Table 19: ``scorer`` (of ``dimension``) on the labelled CSV at ``path``."""
    texts, truth = read_labelled_sentences(path)
    table, _ = cached_scores(scorer, texts, cache)
    predicted = table.values[:, 0]
    scored = ~np.isnan(predicted)
    return {
        "dimension": dimension,
        "scorer": scorer.name,
        "labelled": str(path),
        "n": len(texts),
        "n_unscored": int((~scored).sum()),
        **label_metrics(truth[scored], predicted[scored] == 1),
    }
