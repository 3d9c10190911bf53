"""Key terms and distinctive words in the rationales agents give for their decisions.

Two views of the text behind the decisions (Li, Shirado & Das 2025, sections 5.2 and 5.5):

* ``term_counts`` counts the rationales that use a named set of key terms, as the paper counts
  agents ("Among the 100 Asian-coded agents, 80 included terms ... such as 'personal safety'"),
  optionally only among the units that chose a given option. A study names its sets: the
  paper's are bundled as ``li2025`` (``BUNDLED_TERM_SETS``), never applied by default.
* ``distinctive_terms`` scans the whole vocabulary for the words that most separate one group's
  rationales from all the others': the weighted log-odds ratio with an informative Dirichlet
  prior of Monroe, Colaresi & Quinn (2008, "Fightin' Words", eqs. 16-22), tested over the family
  of all (group, word) pairs with Benjamini-Hochberg. ``strip_names`` removes the agents' names
  first, which would otherwise top every group's list.

Both count the inflections of a word together ("family", "families") by default, through the
suffix rules of ``analysis.stemming``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special  # not scipy.stats: validating a study imports this module

from biasim.analysis.stats.multiple import benjamini_hochberg
from biasim.analysis.text.stemming import stem
from biasim.analysis.text.term_sets import checked_set, checked_term

# Words and contractions carrying no content on their own. Negations (no, not, nor, never, don't,
# can't ...) are deliberately absent: "no immediate threat" is one of the paper's findings.
_STOP_WORD_TEXT = """
    a about after again against all also am an and any are as at be because been before being
    both but by can could did do does doing down during each for from further had has have having
    he her here hers herself him himself his how i i'd i'll i'm i've if in into is it it's its
    itself just let's may me might more most must my myself of off on once only onto or other our
    ours ourselves out over own same shall she should so some such than that that's the their
    theirs them themselves then there these they they're this those through to too under until up
    us very was we we're we've were what when where which while who whom whose why will with would
    you you're your yours yourself
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORD_TEXT.split())

# Letters (any script), optionally joined by apostrophes: "don't", "agent's".
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
_POSSESSIVE = re.compile(r"'s$")
_WHITESPACE = re.compile(r"\s+")
# A term of plain words separated by single spaces; any other character makes it a regex.
_PLAIN_TERM = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*(?: [^\W\d_]+(?:'[^\W\d_]+)*)*")
_PRIORS = ("informative", "uniform")
# Monroe et al.'s uninformative prior puts 0.01 pseudo-counts on every word.
_UNIFORM_PSEUDO_COUNT = 0.01

_DISTINCTIVE_COLUMNS = [
    "term",
    "forms",
    "count_group",
    "count_rest",
    "log_odds",
    "z",
    "p_value",
    "q_value",
    "significant",
]


def term_counts(
    df: pd.DataFrame,
    text_col: str,
    group_cols: str | Sequence[str],
    term_sets: Mapping[str, Sequence[str]],
    *,
    inflections: bool = True,
    chose_col: str | None = None,
) -> pd.DataFrame:
    """Per group and term set, how many rationales use at least one of the set's terms.

    Terms are matched case-insensitively as whole words or phrases. A term is either:

    * plain words separated by single spaces (``personal safety``, ``family``). With
      ``inflections`` each word also matches its inflections, compared through
      ``analysis.stemming.stem``: ``family`` finds "families" and "family's",
      ``value safety`` finds "valuing safety"; without, only the words as written;
    * a regex, any other term (``so(n|ns)``), wrapped as ``\\b(?:term)\\b`` and matched as
      written, so it spells out its own inflections as the paper does: ``pe(t|ts)`` finds "pet"
      and "Pets" but not "competent" or "petition".

    Runs of whitespace in the text (line breaks, double spaces) are collapsed to one space first,
    so a phrase survives line wrapping; the words of a phrase must be separated by whitespace
    only ("stand-up" is not "stand up").

    Missing texts (None, NaN, or only whitespace) are not documents: they are excluded from
    ``n_documents``, so ``share`` is the share of the rationales actually written. Filter rows
    (e.g. to valid decisions) before calling; every row with a text counts. Rows with a missing
    group value are left out.

    Args:
        df: One row per document, e.g. one per decision with its rationale.
        text_col: Column holding the text (str, None or NaN).
        group_cols: Column(s) defining the groups, e.g. ``["scenario", "attribute", "value"]``.
        term_sets: Set name -> terms, e.g. ``load_term_sets(BUNDLED_TERM_SETS["li2025"])``.
        inflections: Plain-word terms also match their words' inflections.
        chose_col: A boolean column: only the texts of rows where it is True are counted (e.g.
            the unit chose Evacuate, as the paper counts "the explanations given by
            female-coded agents to evacuate"); the others' texts are counted in
            ``n_not_chosen``.

    Returns:
        One row per group and term set (groups sorted, sets in the given order): the group
        columns, ``term_set``, ``n_documents`` (texts counted), ``n_matching`` (texts with at
        least one match), ``share`` (``n_matching / n_documents``, NaN when there are no texts)
        and ``occurrences`` (non-overlapping matches of any of the set's terms, leftmost and
        longest first); with ``chose_col``, also ``n_not_chosen`` (texts of rows where it is
        False or missing, not counted).

    Raises:
        ValueError: No group column is given, or a term is not a valid regex.
        TypeError: A non-missing text is not a string.
    """
    keys = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    if not keys:
        raise ValueError("term_counts needs at least one group column")
    matchers = _compile_sets(term_sets, inflections=inflections)
    data = df.dropna(subset=keys)
    texts = _texts(data[text_col], text_col)
    chosen = (
        pd.Series(True, index=data.index)
        if chose_col is None
        else data[chose_col].astype("boolean").fillna(False).astype(bool)
    )

    written = texts.notna()
    per_doc = pd.DataFrame({"n_documents": (written & chosen).astype(int)}, index=data.index)
    if chose_col is not None:
        per_doc["n_not_chosen"] = (written & ~chosen).astype(int)
    present = texts[written & chosen]
    # Positional column names so a set name can never collide with another column.
    for i, matcher in enumerate(matchers.values()):
        occurrences = present.map(matcher.count)
        per_doc[f"occ{i}"] = occurrences.reindex(data.index, fill_value=0).astype(int)
        per_doc[f"hit{i}"] = (per_doc[f"occ{i}"] > 0).astype(int)
    totals = per_doc.groupby([data[k] for k in keys], sort=True, observed=True).sum()

    rows: list[dict[str, Any]] = []
    for group, row in totals.iterrows():
        values = group if isinstance(group, tuple) else (group,)
        n_documents = int(row["n_documents"])
        for i, name in enumerate(matchers):
            matching = int(row[f"hit{i}"])
            rows.append(
                {
                    **dict(zip(keys, values, strict=True)),
                    "term_set": name,
                    "n_documents": n_documents,
                    "n_matching": matching,
                    "share": matching / n_documents if n_documents else float("nan"),
                    "occurrences": int(row[f"occ{i}"]),
                    **({"n_not_chosen": int(row["n_not_chosen"])} if chose_col else {}),
                }
            )
    columns = [*keys, "term_set", "n_documents", "n_matching", "share", "occurrences"]
    return pd.DataFrame(rows, columns=[*columns, *(["n_not_chosen"] if chose_col else [])])


def strip_names(
    texts: pd.Series, names: Iterable[str] = (), own: pd.Series | None = None
) -> tuple[pd.Series, int]:
    """Texts with people's names removed, and how many name words were removed.

    Each name is split into its words ("Maria Gonzalez" -> "Maria", "Gonzalez"); a word of a
    name is removed where it stands as a whole word, with or without a possessive ("Maria's").
    Words of ``names`` (e.g. every agent's name in the run) are matched with their case as
    written, since a name is capitalised and the same word in lower case is usually an ordinary
    word ("Hope", "hope"); words of a row's own name (``own``) are matched in any case.

    Args:
        texts: The texts (str, None or NaN); missing ones stay missing.
        names: Names removed from every text.
        own: Aligned with ``texts``: each row's own name (str or missing).

    Returns:
        The texts without the names (a removed word leaves one space), and the number of
        words removed over all texts.
    """
    everyone = {w for name in names if isinstance(name, str) for w in _WORD.findall(name)}
    removed = 0
    cleaned: list[object] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            cleaned.append(text)
            continue
        mine = own.iloc[i] if own is not None else None
        own_words = {w.lower() for w in _WORD.findall(mine)} if isinstance(mine, str) else set()

        def blank(match: re.Match[str], own_words: set[str] = own_words) -> str:
            nonlocal removed
            word = _POSSESSIVE.sub("", match.group())
            if word in everyone or word.lower() in own_words:
                removed += 1
                return " "
            return match.group()

        cleaned.append(_WORD.sub(blank, text.replace("\u2019", "'")))
    return pd.Series(cleaned, index=texts.index, dtype=object), removed


def tokenize(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters, possibly joined by apostrophes), minus stop words.

    Curly apostrophes count as straight ones, so "don’t" and "don't" are the same word. Digits
    and punctuation separate words. ``STOP_WORDS`` lists the words dropped.
    """
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    return [w for w in words if w not in STOP_WORDS]


def distinctive_terms(
    df: pd.DataFrame,
    text_col: str,
    group_col: str,
    *,
    prior: str = "informative",
    alpha0: float | None = None,
    min_count: int = 5,
    top_n: int = 20,
    fdr: float = 0.05,
    inflections: bool = True,
) -> pd.DataFrame:
    """The words most distinctive of each group's texts, each group against all the others.

    Weighted log-odds ratio with a Dirichlet prior (Monroe, Colaresi & Quinn 2008, eqs. 16-22).
    For word ``w``, group ``g`` and the pooled other groups ``r``, with token counts ``y``,
    token totals ``n`` and prior pseudo-counts ``a_w`` summing to ``a0``::

        delta = log((y_w^g + a_w) / (n^g + a0 - y_w^g - a_w))
              - log((y_w^r + a_w) / (n^r + a0 - y_w^r - a_w))
        var   ~ 1 / (y_w^g + a_w) + 1 / (y_w^r + a_w)
        z     = delta / sqrt(var)

    The two-sided p-value comes from the standard normal; q-values are Benjamini-Hochberg over the
    family of every (group, word) test, whatever its sign, among words with at least
    ``min_count`` tokens in the whole corpus. A word that makes up the whole corpus (e.g. every
    answer is "evacuate") has undefined log-odds; it gets NaN and is not reported.

    Texts are split by ``tokenize`` (lower-case letter words, stop words removed); missing or
    blank texts and rows with a missing group are left out. With ``inflections`` a word's
    inflections are one term (``analysis.stemming.stem``: "child", "children" and "child's"
    are counted together). Remove names first (``strip_names``): an agent's name is as
    distinctive of its group as a word can be, and says nothing about its reasons.

    Args:
        df: One row per document.
        text_col: Column holding the text (str, None or NaN).
        group_col: Column whose values are compared, e.g. ``value``.
        prior: ``informative``: ``a_w = a0 * (corpus count of w) / (corpus tokens)``, shrinking
            each group towards the whole corpus; ``uniform``: ``a_w = a0 / V`` for a vocabulary
            of ``V`` words.
        alpha0: Prior strength ``a0`` (total pseudo-count). ``None`` takes the corpus token count
            for the informative prior (so ``a_w`` equals the corpus count of ``w``, the
            empirical-Bayes default of tidylo) and ``0.01 * V`` for the uniform prior (Monroe et
            al.'s 0.01 per word).
        min_count: Words with fewer tokens in the whole corpus are not tested.
        top_n: Rows kept per group: its words with positive ``z``, most distinctive first.
        fdr: False discovery rate for ``significant`` (``q_value <= fdr``).
        inflections: Count a word's inflections as one term.

    Returns:
        Columns ``group_col``, ``term`` (the term's most frequent form in the corpus),
        ``forms`` (every form counted, most frequent first, comma-separated),
        ``count_group``, ``count_rest`` (token counts),
        ``log_odds`` (delta), ``z``, ``p_value``, ``q_value``, ``significant``; sorted by group,
        then ``z`` descending.

    Raises:
        ValueError: Fewer than two groups have words, or an argument is out of range.
        TypeError: A non-missing text is not a string.
    """
    if prior not in _PRIORS:
        raise ValueError(f"unknown prior `{prior}`; use one of {', '.join(_PRIORS)}")
    if alpha0 is not None and not alpha0 > 0:
        raise ValueError("alpha0 must be positive")
    if min_count < 1 or top_n < 1 or not 0 < fdr < 1:
        raise ValueError("need min_count >= 1, top_n >= 1 and 0 < fdr < 1")

    data = df.dropna(subset=[group_col])
    counters, forms, groups = _term_counts_by_group(data, text_col, group_col, inflections)

    vocabulary = sorted(set().union(*(counters[g] for g in groups)))
    counts = np.array([[counters[g][w] for w in vocabulary] for g in groups], dtype=float)
    corpus = counts.sum(axis=0)
    n_tokens = corpus.sum()
    a0, a = _dirichlet_prior(prior, alpha0, corpus, n_tokens, len(vocabulary))

    tested = corpus >= min_count
    # Each term's forms, most frequent first (ties alphabetical): the first one names it.
    seen = [
        sorted(forms[key], key=lambda w, c=forms[key]: (-c[w], w))
        for key in np.asarray(vocabulary)[tested]
    ]
    frames = []
    for i, group in enumerate(groups):
        frame = _log_odds_frame(counts, i, corpus, tested, (a, a0, n_tokens), seen)
        frame.insert(0, group_col, group)
        frames.append(frame)
    result = pd.concat(frames, ignore_index=True)
    if result.empty:
        return pd.DataFrame(columns=[group_col, *_DISTINCTIVE_COLUMNS])
    p_values = result["p_value"].to_numpy()
    defined = ~np.isnan(p_values)
    q_values = np.full(len(p_values), np.nan)
    if defined.any():
        q_values[defined] = benjamini_hochberg(p_values[defined])
    result["q_value"] = q_values
    result["significant"] = result["q_value"] <= fdr
    result = result[result["z"] > 0].sort_values(
        [group_col, "z", "term"], ascending=[True, False, True], kind="mergesort"
    )
    return result.groupby(group_col, sort=False).head(top_n).reset_index(drop=True)


def _term_counts_by_group(
    data: pd.DataFrame, text_col: str, group_col: str, inflections: bool
) -> tuple[dict[Any, Counter[str]], dict[str, Counter[str]], list[Any]]:
    """Token counts per group and term, each term's forms, and the groups that have words."""
    texts = _texts(data[text_col], text_col)
    counters: dict[Any, Counter[str]] = {}
    forms: dict[str, Counter[str]] = {}
    for group, text in zip(data[group_col], texts, strict=True):
        if isinstance(text, str):
            words = tokenize(text)
            keys = [stem(w) for w in words] if inflections else words
            counters.setdefault(group, Counter()).update(keys)
            for key, word in zip(keys, words, strict=True):
                forms.setdefault(key, Counter())[word] += 1
    groups = sorted(g for g, c in counters.items() if c)
    if len(groups) < 2:
        raise ValueError("distinctive terms need texts from at least two groups")
    return counters, forms, groups


def _dirichlet_prior(
    prior: str, alpha0: float | None, corpus: np.ndarray, n_tokens: float, n_words: int
) -> tuple[float, np.ndarray]:
    """The prior's strength ``a0`` and pseudo-counts ``a_w`` (see :func:`distinctive_terms`)."""
    if prior == "informative":
        a0 = n_tokens if alpha0 is None else float(alpha0)
        a = a0 * corpus / n_tokens
    else:
        a0 = _UNIFORM_PSEUDO_COUNT * n_words if alpha0 is None else float(alpha0)
        a = np.full(n_words, a0 / n_words)
    return a0, a


def _log_odds_frame(
    counts: np.ndarray,
    i: int,
    corpus: np.ndarray,
    tested: np.ndarray,
    prior: tuple[np.ndarray, float, float],
    seen: list[list[str]],
) -> pd.DataFrame:
    """Group ``i``'s tested terms against the other groups: counts, log-odds, z and p."""
    a, a0, n_tokens = prior
    y_g = counts[i, tested]
    y_r = corpus[tested] - y_g
    a_w = a[tested]
    n_g = counts[i].sum()
    n_r = n_tokens - n_g
    # A word that is every token of the corpus has no complement: its log-odds are
    # undefined (inf - inf), so its test is NaN and stays out of the BH family.
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.log((y_g + a_w) / (n_g + a0 - y_g - a_w)) - np.log(
            (y_r + a_w) / (n_r + a0 - y_r - a_w)
        )
    delta[~np.isfinite(delta)] = np.nan
    z = delta / np.sqrt(1 / (y_g + a_w) + 1 / (y_r + a_w))
    frame = pd.DataFrame(
        {
            "term": [shown[0] for shown in seen],
            "forms": [", ".join(shown) for shown in seen],
            "count_group": y_g.astype(int),
            "count_rest": y_r.astype(int),
            "log_odds": delta,
            "z": z,
            "p_value": 2 * special.ndtr(-np.abs(z)),  # the normal upper tail
        }
    )
    return frame


@dataclass(frozen=True)
class _SetMatcher:
    """One term set: its regex terms as one alternation, its plain terms as stemmed phrases."""

    pattern: re.Pattern[str] | None
    phrases: tuple[tuple[str, ...], ...]

    def count(self, text: str) -> int:
        """Non-overlapping matches of any term in ``text``, leftmost and longest first."""
        spans = [m.span() for m in self.pattern.finditer(text)] if self.pattern else []
        if self.phrases:
            spans += _phrase_spans(text, self.phrases)
        taken, end = 0, -1
        for start, stop in sorted(spans, key=lambda span: (span[0], -span[1])):
            if start >= end:
                taken, end = taken + 1, stop
        return taken


def _phrase_spans(text: str, phrases: tuple[tuple[str, ...], ...]) -> list[tuple[int, int]]:
    """Where consecutive words of ``text`` have a phrase's stems, separated by whitespace."""
    words = list(_WORD.finditer(text.replace("\u2019", "'")))
    stems = [stem(w.group()) for w in words]
    spans = []
    for phrase in phrases:
        for i in range(len(words) - len(phrase) + 1):
            if all(stems[i + j] == part for j, part in enumerate(phrase)) and all(
                not text[words[i + j].end() : words[i + j + 1].start()].strip()
                for j in range(len(phrase) - 1)
            ):
                spans.append((words[i].start(), words[i + len(phrase) - 1].end()))
    return spans


def _compile_sets(
    term_sets: Mapping[str, Sequence[str]], *, inflections: bool = False
) -> dict[str, _SetMatcher]:
    """One matcher per set. Regex terms are one case-insensitive alternation, each term
    wrapped in word boundaries; with ``inflections``, plain terms become stemmed phrases."""
    matchers: dict[str, _SetMatcher] = {}
    for name, terms in term_sets.items():
        checked_set(name, terms)
        wrapped, phrases = [], []
        for term in terms:
            checked_term(name, term)
            if inflections and _PLAIN_TERM.fullmatch(term):
                phrases.append(tuple(stem(word) for word in term.split(" ")))
            else:
                wrapped.append(rf"\b(?:{term})\b")
        pattern = re.compile("|".join(wrapped), re.IGNORECASE) if wrapped else None
        matchers[name] = _SetMatcher(pattern, tuple(phrases))
    return matchers


def _texts(column: pd.Series, name: str) -> pd.Series:
    """Texts with whitespace runs collapsed; missing or blank ones as None."""

    def clean(value: object) -> str | None:
        if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
            return None
        if not isinstance(value, str):
            raise TypeError(f"column `{name}` holds a {type(value).__name__}, not text")
        text = _WHITESPACE.sub(" ", value).strip()
        return text or None

    return pd.Series([clean(v) for v in column], index=column.index, dtype=object)
