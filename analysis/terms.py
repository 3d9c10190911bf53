"""Key terms and distinctive words in the rationales agents give for their decisions.

Two views of the text behind the decisions (Li, Shirado & Das 2025, sections 5.2 and 5.5):

* ``term_counts`` counts the rationales that use a named set of key terms, as the paper counts
  agents ("Among the 100 Asian-coded agents, 80 included terms ... such as 'personal safety'").
  The paper's sets live in ``data/li2025_terms.yaml`` (``DEFAULT_TERM_SETS``).
* ``distinctive_terms`` scans the whole vocabulary for the words that most separate one group's
  rationales from all the others': the weighted log-odds ratio with an informative Dirichlet
  prior of Monroe, Colaresi & Quinn (2008, "Fightin' Words", eqs. 16-22), tested over the family
  of all (group, word) pairs with Benjamini-Hochberg.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from .multiple import benjamini_hochberg

DEFAULT_TERM_SETS: Path = Path(__file__).resolve().parent / "data" / "li2025_terms.yaml"

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
_WHITESPACE = re.compile(r"\s+")
_PRIORS = ("informative", "uniform")
# Monroe et al.'s uninformative prior puts 0.01 pseudo-counts on every word.
_UNIFORM_PSEUDO_COUNT = 0.01

_DISTINCTIVE_COLUMNS = [
    "term",
    "count_group",
    "count_rest",
    "log_odds",
    "z",
    "p_value",
    "q_value",
    "significant",
]


def load_term_sets(path: str | Path = DEFAULT_TERM_SETS) -> dict[str, list[str]]:
    """Read named regex term sets from YAML.

    The file maps each set name to ``{source: <quoted origin>, terms: [<regex>, ...]}``; every
    set must say where its terms come from.

    Args:
        path: YAML file; defaults to the paper's sets in ``DEFAULT_TERM_SETS``.

    Returns:
        Set name -> list of regex terms, in file order.

    Raises:
        ValueError: The file is malformed, a set lacks ``source`` or ``terms``, or a term is not a
            valid regex (the message names the set and the term).
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected a mapping of term-set names to {{source, terms}}")
    term_sets: dict[str, list[str]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) != {"source", "terms"}:
            raise ValueError(f"{path}: term set `{name}` needs exactly the keys source and terms")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise ValueError(f"{path}: term set `{name}` needs a non-empty source")
        terms = entry["terms"]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError(f"{path}: term set `{name}`: terms must be a list of strings")
        term_sets[str(name)] = list(terms)
    _compile_sets(term_sets)
    return term_sets


def term_counts(
    df: pd.DataFrame,
    text_col: str,
    group_cols: str | Sequence[str],
    term_sets: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """Per group and term set, how many rationales use at least one of the set's terms.

    Each term is a regex matched case-insensitively as a whole word or phrase: it is wrapped as
    ``\\b(?:term)\\b``, so ``pe(t|ts)`` finds "pet" and "Pets" but not "competent" or
    "petition". Runs of whitespace in the text (line breaks, double spaces) are collapsed to one
    space first, so a phrase term such as ``personal safety`` survives line wrapping.

    Missing texts (None, NaN, or only whitespace) are not documents: they are excluded from
    ``n_documents``, so ``share`` is the share of the rationales actually written. Filter rows
    (e.g. to valid decisions) before calling; every row with a text counts. Rows with a missing
    group value are left out.

    Args:
        df: One row per document, e.g. one per decision with its rationale.
        text_col: Column holding the text (str, None or NaN).
        group_cols: Column(s) defining the groups, e.g. ``["scenario", "attribute", "value"]``.
        term_sets: Set name -> regex terms; defaults to ``load_term_sets()``.

    Returns:
        One row per group and term set (groups sorted, sets in the given order): the group
        columns, ``term_set``, ``n_documents`` (texts present), ``n_matching`` (texts with at
        least one match), ``share`` (``n_matching / n_documents``, NaN when there are no texts)
        and ``occurrences`` (non-overlapping matches of any of the set's terms, leftmost first).

    Raises:
        ValueError: No group column is given, or a term is not a valid regex.
        TypeError: A non-missing text is not a string.
    """
    keys = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    if not keys:
        raise ValueError("term_counts needs at least one group column")
    patterns = _compile_sets(load_term_sets() if term_sets is None else term_sets)
    data = df.dropna(subset=keys)
    texts = _texts(data[text_col], text_col)

    per_doc = pd.DataFrame({"n_documents": texts.notna().astype(int)}, index=data.index)
    present = texts.dropna()
    # Positional column names so a set name can never collide with another column.
    for i, pattern in enumerate(patterns.values()):
        occurrences = present.map(lambda text, p=pattern: sum(1 for _ in p.finditer(text)))
        per_doc[f"occ{i}"] = occurrences.reindex(data.index, fill_value=0).astype(int)
        per_doc[f"hit{i}"] = (per_doc[f"occ{i}"] > 0).astype(int)
    totals = per_doc.groupby([data[k] for k in keys], sort=True, observed=True).sum()

    rows: list[dict[str, Any]] = []
    for group, row in totals.iterrows():
        values = group if isinstance(group, tuple) else (group,)
        n_documents = int(row["n_documents"])
        for i, name in enumerate(patterns):
            matching = int(row[f"hit{i}"])
            rows.append(
                {
                    **dict(zip(keys, values, strict=True)),
                    "term_set": name,
                    "n_documents": n_documents,
                    "n_matching": matching,
                    "share": matching / n_documents if n_documents else float("nan"),
                    "occurrences": int(row[f"occ{i}"]),
                }
            )
    columns = [*keys, "term_set", "n_documents", "n_matching", "share", "occurrences"]
    return pd.DataFrame(rows, columns=columns)


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
    blank texts and rows with a missing group are left out.

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

    Returns:
        Columns ``group_col``, ``term``, ``count_group``, ``count_rest`` (token counts),
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
    texts = _texts(data[text_col], text_col)
    counters: dict[Any, Counter[str]] = {}
    for group, text in zip(data[group_col], texts, strict=True):
        if isinstance(text, str):
            counters.setdefault(group, Counter()).update(tokenize(text))
    groups = sorted(g for g, c in counters.items() if c)
    if len(groups) < 2:
        raise ValueError("distinctive terms need texts from at least two groups")

    vocabulary = sorted(set().union(*(counters[g] for g in groups)))
    counts = np.array([[counters[g][w] for w in vocabulary] for g in groups], dtype=float)
    corpus = counts.sum(axis=0)
    n_tokens = corpus.sum()
    if prior == "informative":
        a0 = n_tokens if alpha0 is None else float(alpha0)
        a = a0 * corpus / n_tokens
    else:
        a0 = _UNIFORM_PSEUDO_COUNT * len(vocabulary) if alpha0 is None else float(alpha0)
        a = np.full(len(vocabulary), a0 / len(vocabulary))

    tested = corpus >= min_count
    frames = []
    for i, group in enumerate(groups):
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
                "term": np.asarray(vocabulary)[tested],
                "count_group": y_g.astype(int),
                "count_rest": y_r.astype(int),
                "log_odds": delta,
                "z": z,
                "p_value": 2 * stats.norm.sf(np.abs(z)),
            }
        )
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


def _compile_sets(term_sets: Mapping[str, Sequence[str]]) -> dict[str, re.Pattern[str]]:
    """One case-insensitive alternation per set, each term wrapped in word boundaries."""
    patterns: dict[str, re.Pattern[str]] = {}
    for name, terms in term_sets.items():
        if isinstance(terms, str) or not terms:
            raise ValueError(f"term set `{name}` needs a non-empty list of terms")
        wrapped = []
        for term in terms:
            try:
                bare = re.compile(term)
            except re.error as err:
                raise ValueError(f"term set `{name}`: invalid regex `{term}`: {err}") from err
            # A term matching the empty string would "match" every document.
            if bare.fullmatch(""):
                raise ValueError(f"term set `{name}`: term `{term}` matches the empty string")
            wrapped.append(rf"\b(?:{term})\b")
        patterns[name] = re.compile("|".join(wrapped), re.IGNORECASE)
    return patterns


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
