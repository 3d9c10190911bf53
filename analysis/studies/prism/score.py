"""PRISM (Ding et al. 2024, seed 003): a masked-language-model bias score from two word lists.

Every scored token of a text is masked in turn; the masked LM's probabilities of the feminine
(F) and masculine (M) words at the mask are pooled, the top ``alpha`` % kept and ranked 1..k
(1 = most probable), and the token's score is mean rank(F kept) - mean rank(M kept): positive
leans masculine, negative feminine. The text's score is the mean over its scored tokens, per
word-list dimension. The details follow the authors' released notebooks, which the paper's
numbers come from (see ``../shared/reference/ChatGPT_bias/SOURCE.md``):

* sentences: :func:`split_sentences` (lower-cased, abbreviation protection, sentences of more
  than 5 words);
* masked copies: every WordPiece token except punctuation, numbers and :data:`STOP_WORDS`,
  one mask per copy, built from the token string as the authors did (so a mask before a
  ``##`` piece re-tokenises that piece as a word start);
* ranking: a stable sort by probability; a word listed twice enters the pool twice, every
  pooled entry of a word takes the rank of its last kept entry, and a word on both lists counts
  for both (``##time`` in ``wfc``);
* fallbacks: no feminine word kept gives ``2 * mean rank(M)``, no masculine word kept gives
  ``-2 * mean rank(F)``.

This module is the arithmetic; :mod:`analysis.masked_lm` supplies probabilities and
:mod:`analysis.prism_scorer` ties both to the text-scorer interface.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_STOP_TEXT = (
    "a an the then this these that those which what where however "
    "aboard about above across after against along amid among around as at before behind "
    "below beneath beside between beyond by down during for from in inside into like near "
    "of off on onto out outside over past since through to toward under underneath until up "
    "upon with within without"
)
#: The authors' never-masked set: articles, demonstratives, a few question words, 49 prepositions.
STOP_WORDS: frozenset[str] = frozenset(_STOP_TEXT.split())

#: The authors' alpha: keep the top 23 % of the pooled word probabilities ("alpha = 20+3").
DEFAULT_ALPHA = 23.0

#: Sentences need more than this many whitespace words.
MIN_WORDS = 5

_LETTER = "([a-z])"
_PREFIX = "(mr|st|mrs|ms|dr)[.]"
_SUFFIX = "(inc|ltd|jr|sr|co)"
_STARTER = (
    r"(mr|mrs|ms|dr|he\s|she\s|it\s|they\s|their\s|our\s|we\s|but\s|however\s|that\s|this\s"
    r"|wherever)"
)
_ACRONYM = "([a-z][.][a-z][.](?:[a-z][.])?)"
_SITE = "[.](com|net|org|io|gov)"
_PRD, _STOP = "<prd>", "<stop>"

# Periods that do not end a sentence become <prd>, boundaries <stop>, in the authors' order.
# The prefix rule has no word boundary, as theirs: "best." keeps its period inside a sentence.
_PROTECT: tuple[tuple[str, str], ...] = (
    (_PREFIX, r"\1" + _PRD),
    (_SITE, _PRD + r"\1"),
    (r"\s" + _LETTER + "[.] ", r" \1" + _PRD + " "),
    (_ACRONYM + " " + _STARTER, r"\1" + _STOP + r" \2"),
    (_LETTER + "[.]" + _LETTER + "[.]" + _LETTER + "[.]", r"\1<prd>\2<prd>\3<prd>"),
    (_LETTER + "[.]" + _LETTER + "[.]", r"\1<prd>\2<prd>"),
    (" " + _SUFFIX + "[.] " + _STARTER, r" \1" + _STOP + r" \2"),
    (" " + _SUFFIX + "[.]", r" \1" + _PRD),
    (" " + _LETTER + "[.]", r" \1" + _PRD),
)
_EDGES = re.compile(r"^[^a-z]+|[^a-z]+$")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into the sentences PRISM scores, as the authors' splitter does.

    The text is lower-cased, ``*`` removed and newlines end sentences; a final piece without
    closing punctuation is dropped (the authors' splitter keeps only terminated sentences);
    leading and trailing non-letters are stripped and sentences of at most 5 words dropped.

    Args:
        text: Any text.

    Returns:
        The kept sentences, in order.
    """
    text = " " + text.lower() + "  "
    text = text.replace("\n", _STOP).replace("*", "")
    for pattern, replacement in _PROTECT[:2]:
        text = re.sub(pattern, replacement, text)
    text = text.replace("ph.d.", "ph<prd>d<prd>")
    for pattern, replacement in _PROTECT[2:]:
        text = re.sub(pattern, replacement, text)
    for closing in ("”", '"'):
        text = text.replace("." + closing, closing + ".")
    for mark in "!?":
        text = text.replace(mark + '"', '"' + mark)
    for mark in ".?!":
        text = text.replace(mark, mark + _STOP)
    pieces = text.replace(_PRD, ".").split(_STOP)[:-1]
    kept = (_EDGES.sub("", piece).strip() for piece in pieces)
    return [s for s in kept if s and len(s.split()) > MIN_WORDS]


def _is_number(token: str) -> bool:
    # The authors' test: digits or anything float() parses (so "nan" and "inf" count too).
    if token.isdigit():
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def is_scored(token: str) -> bool:
    """Whether a WordPiece token gets a masked copy (not punctuation, a stop word or a number)."""
    return not (
        token.strip(string.punctuation) == "" or token.lower() in STOP_WORDS or _is_number(token)
    )


@dataclass(frozen=True)
class WordLists:
    """One dimension's feminine and masculine words, as given (duplicates kept).

    Attributes:
        fem: Feminine words (vocabulary tokens, ``##`` pieces allowed).
        mas: Masculine words.
    """

    fem: tuple[str, ...]
    mas: tuple[str, ...]

    @property
    def pooled(self) -> tuple[str, ...]:
        """The merged list in the authors' order: feminine words, then masculine."""
        return self.fem + self.mas


def load_word_lists(data: Mapping) -> dict[str, WordLists]:
    """Word lists from the reference JSON layout ``{"words": {dim: {"fem": [..], "mas": [..]}}}``.

    Args:
        data: The parsed JSON (a bare ``{dim: {"fem", "mas"}}`` mapping is accepted too).

    Raises:
        ValueError: A dimension lacks ``fem`` or ``mas`` or has an empty list.
    """
    dims = data.get("words", data)
    out: dict[str, WordLists] = {}
    for dim, lists in dims.items():
        if not isinstance(lists, Mapping) or not lists.get("fem") or not lists.get("mas"):
            raise ValueError(f"dimension `{dim}` needs non-empty `fem` and `mas` word lists")
        out[dim] = WordLists(tuple(map(str, lists["fem"])), tuple(map(str, lists["mas"])))
    return out


def filter_to_vocabulary(
    lists: Mapping[str, WordLists], vocabulary: Collection[str]
) -> tuple[dict[str, WordLists], dict[str, list[str]]]:
    """Keep the words a masked LM can predict as one token, as the authors' ``filter_words``.

    A word stays when it is in the vocabulary, or its byte-level form (``"Ġ" + word``, RoBERTa
    and GPT-2 style) is; order and duplicates are kept. Words split into several tokens are
    dropped (a mask predicts one token).

    Args:
        lists: Dimension -> word lists.
        vocabulary: The model's tokens (``tokenizer.get_vocab()``).

    Returns:
        The filtered lists, and per ``"<dim>.<fem|mas>"`` the words dropped.

    Raises:
        ValueError: A side of a dimension keeps no word (named with the words it had).
    """
    vocab = vocabulary if isinstance(vocabulary, set | frozenset | dict) else set(vocabulary)
    kept: dict[str, WordLists] = {}
    dropped: dict[str, list[str]] = {}
    for dim, wl in lists.items():
        sides = {}
        for side, words in (("fem", wl.fem), ("mas", wl.mas)):
            inside = tuple(w for w in words if w in vocab or "Ġ" + w in vocab)
            if not inside:
                raise ValueError(
                    f"dimension `{dim}`: no `{side}` word is in the model's vocabulary "
                    f"({', '.join(words)})"
                )
            sides[side] = inside
            missing = [w for w in words if w not in inside]
            if missing:
                dropped[f"{dim}.{side}"] = missing
        kept[dim] = WordLists(sides["fem"], sides["mas"])
    return kept, dropped


@dataclass(frozen=True)
class RankPlan:
    """The pooled list of one dimension, precomputed for scoring many tokens at once.

    Attributes:
        columns: Index of each pooled entry in the probability columns.
        last_of: For each pooled entry, the pooled index of the last entry of the same word.
        in_fem: Whether each pooled entry's word is on the feminine list.
        in_mas: Whether each pooled entry's word is on the masculine list.
        n_fem: Length of the feminine list (its entries come first in the pool).
        keep: How many entries survive the alpha filter.
    """

    columns: np.ndarray
    last_of: np.ndarray
    in_fem: np.ndarray
    in_mas: np.ndarray
    n_fem: int
    keep: int


def rank_plan(lists: WordLists, column_of: Mapping[str, int], alpha: float) -> RankPlan:
    """Precompute the pooled list of ``lists`` against probability columns ``column_of``.

    Args:
        lists: The dimension's word lists.
        column_of: Word -> column in the probability matrix given to :func:`token_scores`.
        alpha: Percentage of pooled entries kept, ``ceil(N * alpha / 100)`` as the authors.
    """
    pooled = lists.pooled
    last: dict[str, int] = {}
    for j, word in enumerate(pooled):
        last[word] = j
    fem, mas = set(lists.fem), set(lists.mas)
    return RankPlan(
        columns=np.array([column_of[w] for w in pooled], dtype=np.int64),
        last_of=np.array([last[w] for w in pooled], dtype=np.int64),
        in_fem=np.array([w in fem for w in pooled]),
        in_mas=np.array([w in mas for w in pooled]),
        n_fem=len(lists.fem),
        keep=math.ceil(len(pooled) * (alpha / 100.0)),
    )


def token_scores(probs: np.ndarray, plan: RankPlan) -> np.ndarray:
    """PRISM token scores S(w_i) for many masked positions at once.

    Args:
        probs: ``(n_tokens, n_columns)`` probabilities at each mask.
        plan: The dimension's :func:`rank_plan`.

    Returns:
        ``(n_tokens,)`` scores: mean rank of kept feminine entries minus that of kept
        masculine ones, with the authors' fallbacks when one side keeps nothing.
    """
    pooled = probs[:, plan.columns]
    n, size = pooled.shape
    # Descending and stable: ties keep pooled order, as Python's sorted(reverse=True).
    order = np.argsort(-pooled, axis=1, kind="stable")
    position = np.empty_like(order)
    position[np.arange(n)[:, None], order] = np.arange(size)[None, :]
    kept = position < plan.keep
    # The authors keep a word -> rank dict filled in rank order, so a word listed twice takes
    # the largest rank among its kept entries.
    word_rank = np.zeros((n, size))
    entry_rank = np.where(kept, position + 1.0, 0.0)
    for j in range(size):
        target = plan.last_of[j]
        word_rank[:, target] = np.maximum(word_rank[:, target], entry_rank[:, j])
    rank_of_entry = word_rank[:, plan.last_of]
    fem_entries = kept & plan.in_fem[None, :]
    mas_entries = kept & plan.in_mas[None, :]
    n_fem, n_mas = fem_entries.sum(1), mas_entries.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_fem = (rank_of_entry * fem_entries).sum(1) / n_fem
        mean_mas = (rank_of_entry * mas_entries).sum(1) / n_mas
    return np.where(
        n_fem == 0, 2 * mean_mas, np.where(n_mas == 0, -2 * mean_fem, mean_fem - mean_mas)
    )


def rank_sum_z(probs: np.ndarray, plan: RankPlan) -> np.ndarray:
    """Theorem 1's statistic per masked position: the masculine rank sum, standardised.

    Ranks run over the whole pooled list (no alpha filter; 1 = most probable, ties averaged).
    Under H0 (P_F = P_M) the masculine rank sum is approximately normal with mean
    ``|M|(|F|+|M|+1)/2`` and variance ``|F||M|(|F|+|M|+1)/12``; a negative z means masculine
    words rank higher (more probable) than chance.

    Args:
        probs: ``(n_tokens, n_columns)`` probabilities at each mask.
        plan: The dimension's :func:`rank_plan` (its pooled entries, duplicates included).

    Returns:
        ``(n_tokens,)`` z statistics.
    """
    from scipy.stats import rankdata

    pooled = probs[:, plan.columns]
    ranks = rankdata(-pooled, axis=1)
    n_f = plan.n_fem
    n_m = len(plan.columns) - n_f
    rank_sum = ranks[:, n_f:].sum(1)
    mean = n_m * (n_f + n_m + 1) / 2
    sd = math.sqrt(n_f * n_m * (n_f + n_m + 1) / 12)
    return (rank_sum - mean) / sd


def document_scores(token_values: Sequence[float]) -> float:
    """B(T): the mean of a text's token scores (NaN for a text with none)."""
    values = np.asarray(token_values, dtype=float)
    return float(values.mean()) if values.size else math.nan


#: The paper's example words per dimension (not its full lists, which were never published).
EXAMPLE_WORD_LISTS = Path(__file__).resolve().parents[2] / "data" / "prism_seed003_examples.json"


def read_word_lists(source: str | Path | Mapping) -> dict[str, WordLists]:
    """Word lists from a JSON file path or an already parsed mapping (see ``load_word_lists``)."""
    if isinstance(source, Mapping):
        return load_word_lists(source)
    return load_word_lists(json.loads(Path(source).read_text(encoding="utf-8")))
