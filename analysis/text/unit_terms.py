"""Which terms one group's rationales use more, tested with the unit that repeats as the unit.

Monroe et al.'s log-odds z (``terms.distinctive_terms``) counts every token of every text as an
independent draw, so a persona's replicated rationales, or one verbose agent, weigh as many units
as they have tokens: with replicates and personas that differ in their wording, its z rejects far
more often than its level. Here the unit is whatever repeats (a persona, an agent, a letter):

- each unit's usage of a term is the share of its texts that use the term at least once (a
  verbose text counts once; a unit with many texts counts once);
- the group label is a property of the unit, and under "terms do not depend on the group" the
  units' labels are exchangeable within each stratum (e.g. the job, which shapes the wording);
- the statistic is the group's sum of unit usages; its mean and variance under every relabelling
  within strata are exact (sampling without replacement), and the p-value is the normal
  approximation of that permutation distribution. Only terms used by at least ``min_units``
  units are tested, where the approximation holds (the calibration test runs at 3-7 %), and q
  are Benjamini-Hochberg over the tested terms.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
from scipy import special  # not scipy.stats: validating a study imports this module

from biasim.analysis.stats.multiple import benjamini_hochberg
from biasim.analysis.text.stemming import stem
from biasim.analysis.text.terms import tokenize

COLUMNS = [
    "term",
    "forms",
    "units_group",
    "units_rest",
    "using_group",
    "using_rest",
    "share_group",
    "share_rest",
    "difference",
    "z",
    "p_value",
    "q_value",
    "significant",
    "unit",
]


def unit_term_test(
    df: pd.DataFrame,
    text_col: str,
    group_col: str,
    unit_col: str,
    *,
    positive: str,
    strata: str | None = None,
    min_units: int = 10,
    fdr: float = 0.05,
    inflections: bool = True,
) -> pd.DataFrame:
    """Per term, whether units of ``positive`` use it more or less than the other units.

    Args:
        df: One row per text, with ``text_col``, ``group_col``, ``unit_col`` (and ``strata``).
        text_col: The text (names removed first: ``terms.strip_names``).
        group_col: The unit's group; constant within a unit.
        unit_col: What repeats (persona, agent, letter): the exchangeable unit.
        positive: The group compared against all other units.
        strata: Column within whose values labels are exchanged (constant within a unit).
        min_units: Terms used by fewer units are not tested.
        fdr: False discovery rate for ``significant``.
        inflections: Count a word's inflections as one term (``analysis.stemming``).

    Returns:
        One row per tested term (columns :data:`COLUMNS`; ``share_*`` the mean over units of
        their share of texts using the term), sorted by ``z`` descending.

    Raises:
        ValueError: A unit carries two groups or two strata (it could not be the unit).
    """
    data = df.dropna(subset=[group_col, unit_col])
    data = data[data[text_col].map(lambda t: isinstance(t, str) and bool(t.strip()))]
    units = _unit_frame(data, group_col, unit_col, strata)
    usage, vocabulary, forms = _usage(data, text_col, unit_col, units.index, inflections)
    used = (usage > 0).sum(axis=0)
    tested = used >= min_units
    if not tested.any() or units["group"].nunique() < 2:
        return pd.DataFrame(columns=COLUMNS)
    usage = usage[:, tested]
    member = (units["group"] == positive).to_numpy()
    z = _stratified_z(usage, member, pd.factorize(units["stratum"])[0])
    p = 2 * special.ndtr(-np.abs(z))  # the normal upper tail
    defined = ~np.isnan(p)
    q = np.full(p.size, np.nan)
    if defined.any():
        q[defined] = benjamini_hochberg(p[defined])
    terms = np.asarray(vocabulary)[tested]
    table = pd.DataFrame(
        {
            "term": [forms[t].most_common(1)[0][0] for t in terms],
            "forms": [", ".join(w for w, _ in forms[t].most_common()) for t in terms],
            "units_group": int(member.sum()),
            "units_rest": int((~member).sum()),
            "using_group": (usage[member] > 0).sum(axis=0),
            "using_rest": (usage[~member] > 0).sum(axis=0),
            "share_group": usage[member].mean(axis=0),
            "share_rest": usage[~member].mean(axis=0),
            "z": z,
            "p_value": p,
            "q_value": q,
        }
    )
    table["difference"] = table["share_group"] - table["share_rest"]
    table["significant"] = table["q_value"] <= fdr
    table["unit"] = unit_col
    return table[COLUMNS].sort_values(["z", "term"], ascending=[False, True]).reset_index(drop=True)


def _unit_frame(
    data: pd.DataFrame, group_col: str, unit_col: str, strata: str | None
) -> pd.DataFrame:
    """One row per unit: its group and stratum, refusing a unit that carries two of either."""
    frame = data.assign(_s=data[strata] if strata else "all")
    per = frame.groupby(unit_col, sort=True).agg(
        group=(group_col, "first"),
        groups=(group_col, "nunique"),
        stratum=("_s", "first"),
        strata=("_s", "nunique"),
    )
    bad = per[(per["groups"] > 1) | (per["strata"] > 1)]
    if not bad.empty:
        raise ValueError(
            f"`{unit_col}` {bad.index[0]!r} has texts in two values of `{group_col}` or of "
            f"`{strata}`: the group must be a property of the unit"
        )
    return per[["group", "stratum"]].astype(str)


def _usage(
    data: pd.DataFrame, text_col: str, unit_col: str, units: pd.Index, inflections: bool
) -> tuple[np.ndarray, list[str], dict[str, Counter[str]]]:
    """Units x terms: the share of each unit's texts that use each term, and each term's forms."""
    forms: dict[str, Counter[str]] = {}
    sets = []
    for text in data[text_col]:
        words = tokenize(text)
        keys = [stem(w) for w in words] if inflections else words
        for key, word in zip(keys, words, strict=True):
            forms.setdefault(key, Counter())[word] += 1
        sets.append(set(keys))
    vocabulary = sorted(forms)
    column = {t: j for j, t in enumerate(vocabulary)}
    row = {u: i for i, u in enumerate(units)}
    counts = np.zeros((len(units), len(vocabulary)))
    texts = np.zeros(len(units))
    for unit, keys in zip(data[unit_col], sets, strict=True):
        i = row[unit]
        texts[i] += 1
        counts[i, [column[k] for k in keys]] += 1
    return counts / texts[:, None], vocabulary, forms


def _stratified_z(usage: np.ndarray, member: np.ndarray, stratum: np.ndarray) -> np.ndarray:
    """z of the members' sum of usage under relabelling within strata: exact permutation mean
    and variance (a sample of n1 of N without replacement per stratum), normal tail."""
    observed = usage[member].sum(axis=0)
    mean = np.zeros(usage.shape[1])
    variance = np.zeros(usage.shape[1])
    for code in np.unique(stratum):
        inside = stratum == code
        n, n1 = int(inside.sum()), int((member & inside).sum())
        if n < 2 or n1 in (0, n):
            mean += usage[member & inside].sum(axis=0)
            continue
        part = usage[inside]
        mean += n1 * part.mean(axis=0)
        variance += n1 * (n - n1) / (n * (n - 1)) * ((part - part.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (observed - mean) / np.sqrt(variance)
    z[variance <= 0] = np.nan
    return z
