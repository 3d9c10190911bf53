"""The text-scorer interface, its lookup in the one plug-in registry, and the score cache.

A text scorer turns texts into numbers: it has a ``name``, a ``version``, the ``params`` that
change its values (model identity, word lists, thresholds), the ``columns`` it fills, and
``score(texts)``. Scorers are registered by import path, like backends and analysis kinds, so
naming one never imports another's dependencies (torch for PRISM). :func:`cached_scores`
scores only texts the :class:`ScoreCache` has not seen under the same scorer, version and
params; the cache is a small sqlite file the caller places (a run directory).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from biasim.registry import SCORERS, UnknownPlugin


@dataclass
class ScoreTable:
    """Scores of many texts.

    Attributes:
        columns: Column names, in the order of ``values``' second axis.
        values: ``(n_texts, n_columns)`` floats; NaN where a text was not scored.
        excluded: Per text, None or the reason it was not scored.
    """

    columns: tuple[str, ...]
    values: np.ndarray
    excluded: list[str | None]

    def frame(self) -> Any:
        """The scores as a DataFrame with an ``excluded`` column."""
        import pandas as pd

        out = pd.DataFrame(self.values, columns=list(self.columns))
        out["excluded"] = self.excluded
        return out


@runtime_checkable
class TextScorer(Protocol):
    """What every text scorer provides."""

    name: str
    version: str
    columns: tuple[str, ...]

    def params(self) -> dict[str, Any]:
        """Everything besides name and version that changes the values (JSON-able, no secrets)."""
        ...

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """Score ``texts``; a text that cannot be scored gets NaN and a reason."""
        ...


def scorer_key(scorer: TextScorer) -> str:
    """A digest of the scorer's name, version and params: the cache's namespace."""
    blob = json.dumps(
        {"name": scorer.name, "version": scorer.version, "params": scorer.params()},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def scorer_names() -> list[str]:
    """Names of every registered scorer."""
    return SCORERS.names()


#: Scorer options that name files or model folders: a study resolves them against its folder.
PATH_OPTIONS = ("model", "train_csv", "stems", "base_model")


def scorer_factory(name: str) -> Any:
    """The class or callable registered as ``name`` (imported now).

    Raises:
        KeyError: No scorer of that name.
    """
    try:
        return SCORERS.load(name)
    except UnknownPlugin as exc:
        raise KeyError(str(exc)) from None


def create_scorer(name: str, **options: Any) -> TextScorer:
    """Build the scorer registered as ``name`` from its options.

    Raises:
        KeyError: No scorer of that name.
    """
    return scorer_factory(name)(**options)


class ScoreCache:
    """Scores by (scorer key, text) in one sqlite file.

    Args:
        path: The sqlite file; created with its folder when missing.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS scores (scorer TEXT, text TEXT, columns TEXT,"
            " vals TEXT, excluded TEXT, PRIMARY KEY (scorer, text))"
        )

    @staticmethod
    def _text_key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def get(
        self, key: str, texts: Sequence[str], columns: tuple[str, ...]
    ) -> dict[str, tuple[list[float], str | None]]:
        """Cached ``(values, excluded)`` of those ``texts`` scored with the same columns."""
        found: dict[str, tuple[list[float], str | None]] = {}
        wanted = {self._text_key(t): t for t in texts}
        cols = json.dumps(columns)
        keys = list(wanted)
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            rows = self._db.execute(
                "SELECT text, vals, excluded FROM scores WHERE scorer = ? AND columns = ?"
                f" AND text IN ({','.join('?' * len(chunk))})",
                (key, cols, *chunk),
            )
            for text_key, vals, excluded in rows:
                values = [np.nan if v is None else v for v in json.loads(vals)]
                found[wanted[text_key]] = (values, excluded)
        return found

    def put(self, key: str, texts: Sequence[str], table: ScoreTable) -> None:
        """Store ``table``'s rows for ``texts`` under scorer ``key``."""
        cols = json.dumps(table.columns)
        rows = [
            (
                key,
                self._text_key(text),
                cols,
                json.dumps([None if np.isnan(v) else float(v) for v in values]),
                excluded,
            )
            for text, values, excluded in zip(texts, table.values, table.excluded, strict=True)
        ]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def cached_scores(
    scorer: TextScorer, texts: Sequence[str], cache: ScoreCache | None = None
) -> tuple[ScoreTable, int]:
    """Score ``texts``, each distinct text once, reusing and filling ``cache``.

    Returns:
        The scores in the order of ``texts``, and how many distinct texts were scored now.
    """
    distinct = list(dict.fromkeys(texts))
    key = scorer_key(scorer)
    known = cache.get(key, distinct, scorer.columns) if cache else {}
    missing = [t for t in distinct if t not in known]
    if missing:
        fresh = scorer.score(missing)
        if cache:
            cache.put(key, missing, fresh)
        for text, values, excluded in zip(missing, fresh.values, fresh.excluded, strict=True):
            known[text] = (list(values), excluded)
    values = np.array([known[t][0] for t in texts], dtype=float).reshape(
        len(texts), len(scorer.columns)
    )
    return ScoreTable(scorer.columns, values, [known[t][1] for t in texts]), len(missing)
