"""The PRISM text scorer: many texts' masked copies through one masked LM in shared batches.

Texts are split into sentences, each distinct sentence is masked once however often it occurs
(postings repeat their boilerplate), every masked copy of every sentence goes through the model
in length-sorted batches, and the probabilities are ranked per dimension with
:mod:`analysis.prism`. Columns: one score per dimension (B(T)), the mean Theorem-1 z per
dimension (``<dim>_z``), and ``tokens``, the number of scored tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.studies.prism.baseline import PERMUTATIONS, label_permutation_null
from biasim.analysis.studies.prism.score import (
    DEFAULT_ALPHA,
    EXAMPLE_WORD_LISTS,
    WordLists,
    filter_to_vocabulary,
    is_scored,
    rank_plan,
    rank_sum_z,
    read_word_lists,
    split_sentences,
    token_scores,
)
from biasim.analysis.text.masked_lm import HuggingFaceMaskedLM, MaskedLM
from biasim.analysis.text.scorers import ScoreTable, scorer_key

NO_SENTENCE = "no sentence of more than 5 words"
NO_TOKEN = "no scored token"
TRUNCATED = "a sentence longer than the model's maximum length"
#: Masked copies per side the baseline is computed on (a few hundred texts' worth at most).
BASELINE_COPIES = 4000
#: Columns of :meth:`PrismScorer.baseline` (also when no text had a scored token).
BASELINE_COLUMNS = (
    *("dimension", "side", "observed", "baseline", "low", "high", "p", "texts"),
    *("verdict", "permutations"),
)


class PrismScorer:
    """PRISM scores of texts on each word-list dimension.

    Args:
        lm: A masked LM, or the hub id / local path of one (loaded with
            :class:`~analysis.masked_lm.HuggingFaceMaskedLM`).
        word_lists: Dimension -> word lists, or a JSON file / mapping in the reference layout.
        alpha: Percentage of pooled word probabilities kept (23 as the authors' code).
        batch_size: Masked copies per forward pass (when ``lm`` is a path; None: 64 on the
            CPU, more on a GPU).
        progress: Show a progress bar with ETA over the masked copies.
        device: Where a masked LM given by path runs: ``auto`` (a CUDA GPU when torch sees
            one, else the CPU), ``cpu`` or ``cuda``.
    """

    name = "prism"
    version = "1"

    def __init__(
        self,
        lm: MaskedLM | str,
        word_lists: Mapping[str, WordLists] | str | Path,
        alpha: float = DEFAULT_ALPHA,
        batch_size: int | None = None,
        progress: bool = False,
        device: str = "auto",
    ) -> None:
        self.lm: MaskedLM = (
            HuggingFaceMaskedLM(lm, batch_size=batch_size, device=device)
            if isinstance(lm, str)
            else lm
        )
        lists = word_lists
        if not (
            isinstance(lists, Mapping) and all(isinstance(v, WordLists) for v in lists.values())
        ):
            lists = read_word_lists(lists)  # type: ignore[arg-type]
        self.word_lists: dict[str, WordLists] = dict(lists)  # type: ignore[arg-type]
        if not 0 < alpha <= 100:
            raise ValueError(f"alpha must be in (0, 100], got {alpha}")
        self.alpha = float(alpha)
        self.progress = progress
        dims = list(self.word_lists)
        self.columns: tuple[str, ...] = (*dims, *(f"{d}_z" for d in dims), "tokens")
        words = list(dict.fromkeys(w for wl in self.word_lists.values() for w in wl.pooled))
        self._ids = self.lm.vocab_ids(words)
        self._column_of = {w: j for j, w in enumerate(words)}
        self._plans = {
            d: rank_plan(wl, self._column_of, self.alpha) for d, wl in self.word_lists.items()
        }

    def params(self) -> dict[str, Any]:
        """Model identity, alpha and a digest of the word lists."""
        lists = {d: [list(wl.fem), list(wl.mas)] for d, wl in self.word_lists.items()}
        digest = hashlib.sha256(json.dumps(lists).encode()).hexdigest()
        return {"model": self.lm.identity(), "alpha": self.alpha, "word_lists": digest}

    def masked_copies(self, sentences: Sequence[str]) -> tuple[list[str], list[int]]:
        """Every masked copy of ``sentences`` and the index of the sentence it came from."""
        copies: list[str] = []
        owner: list[int] = []
        for k, sentence in enumerate(sentences):
            tokens = self.lm.tokenize(sentence)
            for i, token in enumerate(tokens):
                if is_scored(token):
                    copies.append(self.lm.masked_text(tokens, i))
                    owner.append(k)
        return copies, owner

    def score_probabilities(self, probs: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Token scores and Theorem-1 z per dimension for rows of word probabilities."""
        return {d: (token_scores(probs, p), rank_sum_z(probs, p)) for d, p in self._plans.items()}

    def score(self, texts: Sequence[str]) -> ScoreTable:
        """PRISM scores of ``texts`` (see the module docstring for the columns)."""
        per_text = [split_sentences(t) for t in texts]
        sentences = list(dict.fromkeys(s for ss in per_text for s in ss))
        copies, owner = self.masked_copies(sentences)
        probs = self._probabilities(copies)
        scores = self.score_probabilities(probs)
        rows_of: dict[int, list[int]] = {}
        for row, k in enumerate(owner):
            rows_of.setdefault(k, []).append(row)
        truncated = {owner[r] for r in np.flatnonzero(np.isnan(probs).any(axis=1))}
        index = {s: k for k, s in enumerate(sentences)}
        values = np.full((len(texts), len(self.columns)), np.nan)
        excluded: list[str | None] = []
        dims = list(self._plans)
        for t, ss in enumerate(per_text):
            ks = [index[s] for s in ss]
            rows = [r for k in ks for r in rows_of.get(k, [])]
            reason = (
                NO_SENTENCE
                if not ss
                else TRUNCATED
                if any(k in truncated for k in ks)
                else NO_TOKEN
                if not rows
                else None
            )
            excluded.append(reason)
            if reason is not None:
                continue
            for j, d in enumerate(dims):
                values[t, j] = scores[d][0][rows].mean()
                values[t, len(dims) + j] = scores[d][1][rows].mean()
            values[t, -1] = len(rows)
        return ScoreTable(self.columns, values, excluded)

    def baseline(
        self,
        texts_by_side: Mapping[str, Sequence[str]],
        max_copies: int = BASELINE_COPIES,
        permutations: int = PERMUTATIONS,
        seed: int = 0,
    ) -> pd.DataFrame:
        """Each dimension's no-gender-signal baseline per side (see :mod:`.baseline`).

        Distinct texts of each side are taken in a seeded random order until their masked
        copies reach ``max_copies`` (all of them in a small study), and their probabilities go
        through the label-permutation null.

        Returns:
            One row per dimension and side: ``observed`` (mean score of those texts),
            ``baseline``, ``low``, ``high`` (the null's 95 % range), ``p``, ``verdict``,
            ``texts`` and ``permutations``.
        """
        copies: list[str] = []
        owner: list[int] = []
        sides: list[str] = []
        rng = np.random.default_rng(seed)
        for side, texts in texts_by_side.items():
            distinct = [t for t in dict.fromkeys(texts) if t]
            used = 0
            for i in rng.permutation(len(distinct)):
                mine, _ = self.masked_copies(split_sentences(distinct[i]))
                if not mine:
                    continue
                copies += mine
                owner += [len(sides)] * len(mine)
                sides.append(side)
                used += len(mine)
                if used >= max_copies:
                    break
        probs = self._probabilities(copies)
        ok = ~np.isnan(probs).any(axis=1)  # a copy cut off at the model's maximum length
        rows = []
        for dim, lists in self.word_lists.items():
            found = label_permutation_null(
                probs[ok],
                np.asarray(owner, dtype=np.int64)[ok],
                sides,
                lists,
                self._column_of,
                self.alpha,
                permutations,
                seed,
            )
            for side, null in found.items():
                rows.append(
                    {
                        "dimension": dim,
                        "side": side,
                        **asdict(null),
                        "verdict": null.verdict,
                        "permutations": permutations,
                    }
                )
        return pd.DataFrame(rows, columns=BASELINE_COLUMNS)

    def _probabilities(self, copies: list[str]) -> np.ndarray:
        if not copies:
            return np.zeros((0, len(self._ids)), dtype=np.float32)
        if not self.progress:
            return self.lm.mask_probabilities(copies, self._ids, None)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = (
            TextColumn("PRISM masked copies"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, transient=True) as bar:
            task = bar.add_task("prism", total=len(copies))
            return self.lm.mask_probabilities(copies, self._ids, lambda n: bar.advance(task, n))


def vocabulary_scorer(
    model: str,
    word_lists: str | Path | Mapping | None = None,
    alpha: float = DEFAULT_ALPHA,
    batch_size: int | None = None,
    progress: bool = False,
    device: str = "auto",
) -> tuple[PrismScorer, dict[str, list[str]]]:
    """A PRISM scorer on a ``transformers`` masked LM, word lists filtered to its vocabulary.

    Args:
        model: Hub id or local folder of an ``AutoModelForMaskedLM``.
        word_lists: A JSON file or mapping in the reference layout; the paper's example words
            (:data:`EXAMPLE_WORD_LISTS`) when None.
        alpha: Percentage of pooled word probabilities kept.
        batch_size: Masked copies per forward pass (None: chosen for the device).
        progress: Show a progress bar over the masked copies.
        device: ``auto``, ``cpu`` or ``cuda`` (see :class:`PrismScorer`).

    Returns:
        The scorer and the words dropped per ``"<dim>.<side>"`` (see ``filter_to_vocabulary``).

    Raises:
        ValueError: A side of a dimension has no word in the vocabulary, or bad word lists.
    """
    lm = HuggingFaceMaskedLM(model, batch_size=batch_size, device=device)
    lists, dropped = filter_to_vocabulary(
        read_word_lists(EXAMPLE_WORD_LISTS if word_lists is None else word_lists),
        lm.vocabulary(),
    )
    return PrismScorer(lm, lists, alpha=alpha, progress=progress), dropped


def cached_baseline(
    scorer: PrismScorer, texts_by_side: Mapping[str, Sequence[str]], path: Path | None
) -> pd.DataFrame:
    """:meth:`PrismScorer.baseline`, kept in the JSON file ``path`` by scorer and texts, so a
    re-analysis does not run the masked LM again (None: not kept)."""
    blob = json.dumps(
        [scorer_key(scorer), {s: sorted(set(t)) for s, t in texts_by_side.items()}],
        sort_keys=True,
    )
    key = hashlib.sha256(blob.encode()).hexdigest()
    stored = json.loads(path.read_text(encoding="utf-8")) if path and path.is_file() else {}
    if key in stored:
        return pd.DataFrame(stored[key])
    table = scorer.baseline(texts_by_side)
    if path is not None:
        stored[key] = table.to_dict("records")
        path.write_text(json.dumps(stored), encoding="utf-8")
    return table
