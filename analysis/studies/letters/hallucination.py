"""Hallucination bias (Wan et al. 2023, section 3.3): style of the hallucinated part of a letter
against the whole letter.

A letter sentence (split on ".", "?" or "!") is hallucinated when an NLI cross-encoder does not
find it entailed by the biography. The hallucinated sentences are scored on a style dimension
like whole letters, and the authors test, one-sided with Student's t-test, amplification for
the first group (hallucinated > full) and for the second (full > hallucinated). Both shares come
from the same letter, so :func:`hallucination_tests` adds the paired t-test on each letter's
difference, which the independent test ignores (it is conservative there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.text.letter_style import sentence_shares, style_shares
from biasim.analysis.text.letter_text import nli_sentences
from biasim.analysis.text.nli_scorer import NliScorer, pair_text
from biasim.analysis.text.scorers import ScoreCache, TextScorer, cached_scores

NO_HALLUCINATION = "no hallucinated sentence"


def hallucinated_sentences(
    letters: Sequence[str],
    bios: Sequence[str],
    nli: NliScorer,
    cache: ScoreCache | None = None,
) -> tuple[list[list[str]], pd.DataFrame]:
    """Each letter's sentences the NLI model does not find entailed by its biography.

    Returns:
        The hallucinated sentences per letter, and a frame with ``n_sentences``,
        ``n_hallucinated`` and ``n_contradicted`` per letter.
    """
    per_letter = [nli_sentences(t) for t in letters]
    pairs = [pair_text(b, s) for b, ss in zip(bios, per_letter, strict=True) for s in ss]
    table, _ = cached_scores(nli, pairs, cache)
    flags = table.values
    out, counts, start = [], [], 0
    for ss in per_letter:
        own = flags[start : start + len(ss)]
        start += len(ss)
        out.append([s for s, f in zip(ss, own[:, 0], strict=True) if f == 1])
        counts.append((len(ss), int(own[:, 0].sum()), int(own[:, 1].sum())))
    return out, pd.DataFrame(counts, columns=["n_sentences", "n_hallucinated", "n_contradicted"])


def hallucination_shares(
    letters: Sequence[str],
    hallucinated: Sequence[Sequence[str]],
    scorer: TextScorer,
    cache: ScoreCache | None = None,
) -> pd.DataFrame:
    """Per letter, the style share of the full letter and of its hallucinated sentences.

    The hallucinated sentences are scored as the authors' classifier saw their re-joined
    text: each piece with "." appended.
    """
    full, _ = style_shares(letters, scorer, cache)
    hal, _ = sentence_shares([[f"{s}." for s in ss] for ss in hallucinated], scorer, cache)
    excluded = [
        NO_HALLUCINATION if len(ss) == 0 else e
        for ss, e in zip(hallucinated, hal["excluded"], strict=True)
    ]
    return pd.DataFrame({"full": full["share"], "hallucinated": hal["share"], "excluded": excluded})


def hallucination_tests(
    frame: pd.DataFrame, group_col: str, groups: tuple[str, str]
) -> list[dict[str, float | str]]:
    """The authors' amplification tests and their paired versions.

    Args:
        frame: Per letter ``full`` and ``hallucinated`` shares and ``group_col``; letters with
            a NaN share are left out.
        group_col: Column of the groups.
        groups: ``(first, second)``: H1 hallucinated > full for the first group, full >
            hallucinated for the second (the paper: male, female).

    Returns:
        One record per group: direction, means, letters, Student's t and p (the paper's,
        independent samples) and the paired t and p.
    """
    rows = []
    for group, sign in ((groups[0], 1.0), (groups[1], -1.0)):
        part = frame[(frame[group_col] == group)].dropna(subset=["full", "hallucinated"])
        hal, full = part["hallucinated"].to_numpy(float), part["full"].to_numpy(float)
        a, b = (hal, full) if sign > 0 else (full, hal)
        enough = len(part) > 1
        student = stats.ttest_ind(a, b, alternative="greater") if enough else None
        paired = stats.ttest_rel(a, b, alternative="greater") if enough else None
        rows.append(
            {
                "group": group,
                "h1": "hallucinated > full" if sign > 0 else "full > hallucinated",
                "mean_hallucinated": float(hal.mean()) if len(hal) else np.nan,
                "mean_full": float(full.mean()) if len(full) else np.nan,
                "letters": len(part),
                "t_student": float(student.statistic) if student else np.nan,
                "p_student": float(student.pvalue) if student else np.nan,
                "t_paired": float(paired.statistic) if paired else np.nan,
                "p_paired": float(paired.pvalue) if paired else np.nan,
            }
        )
    return rows
