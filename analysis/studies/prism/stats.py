"""Posting -> application statistics of PRISM scores (Ding et al. 2024, Section 5 and A.6).

Per dimension, with X the posting scores and Y the application scores of the same pairs:

* :func:`fit` - Pearson r, slope, intercept and Spearman rho of Y on X, after the authors'
  DBSCAN outlier removal (eps 0.5, min_samples 30, the count removed reported) or without it;
* :func:`shift_tests` - one-sided Wilcoxon signed-rank tests of the mean shift (H1: mu_X <
  mu_Y, applications more masculine) and of the magnitude shift (H1: |X| < |Y|, further from
  neutral), each with the opposite one-sided p;
* :func:`variance_tests` - the paper's Brown-Forsythe Levene test with its one-sided reading
  (p/2 when the posting variance is the larger, 1 - p/2 otherwise), and beside it a paired
  Brown-Forsythe test (signed-rank test on the pairs' absolute deviations from the medians):
  Levene's test assumes independent samples, and a posting and its application are not;
* :func:`arrows` - Table 1's arrows: the direction a test finds at two-sided level alpha;
* :func:`one_pair_per_posting` - several applications to one posting made one pair, so the
  tests, which take pairs as independent, see each posting once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats

DBSCAN_EPS = 0.5
DBSCAN_MIN_SAMPLES = 30
#: Fewest pairs a fit is reported on.
MIN_FIT = 3


@dataclass(frozen=True)
class Fit:
    """Linear fit and correlations of application on posting scores."""

    n: int
    removed: int
    pearson_r: float
    pearson_p: float
    slope: float
    intercept: float
    spearman_rho: float
    spearman_p: float


def dbscan_inliers(
    x: np.ndarray, y: np.ndarray, eps: float = DBSCAN_EPS, min_samples: int = DBSCAN_MIN_SAMPLES
) -> np.ndarray:
    """The authors' outlier filter: points DBSCAN puts in some cluster (label != -1)."""
    from sklearn.cluster import DBSCAN

    labels = DBSCAN(eps=eps, min_samples=min_samples).fit(np.column_stack([x, y])).labels_
    return labels != -1


def fit(x: np.ndarray, y: np.ndarray, dbscan: bool = True) -> Fit:
    """Correlation and regression of ``y`` (applications) on ``x`` (postings).

    Args:
        x: Posting scores.
        y: Application scores of the same pairs.
        dbscan: Drop DBSCAN outliers first (the paper's Figure 3); False fits every pair.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = dbscan_inliers(x, y) if dbscan else np.ones(len(x), bool)
    xs, ys = x[keep], y[keep]
    if len(xs) < MIN_FIT or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        # A line through fewer than 3 points, or a constant side, has no correlation to report
        # (DBSCAN with min_samples 30 keeps nothing of a small study).
        nan = float("nan")
        return Fit(len(xs), int((~keep).sum()), nan, nan, nan, nan, nan, nan)
    line = stats.linregress(xs, ys)
    rho = stats.spearmanr(xs, ys)
    return Fit(
        n=int(keep.sum()),
        removed=int((~keep).sum()),
        pearson_r=float(line.rvalue),
        pearson_p=float(line.pvalue),
        slope=float(line.slope),
        intercept=float(line.intercept),
        spearman_rho=float(rho.statistic),
        spearman_p=float(rho.pvalue),
    )


def _signed_rank(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Wilcoxon signed-rank statistic and one-sided p for H1: a < b, and for H1: a > b
    (NaN when no pair differs: the test has nothing to rank)."""
    if not np.any(a != b):
        return float("nan"), float("nan"), float("nan")
    less = stats.wilcoxon(a, b, alternative="less")
    greater = stats.wilcoxon(a, b, alternative="greater")
    return float(less.statistic), float(less.pvalue), float(greater.pvalue)


def shift_tests(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The paper's mean and magnitude shift tests (Tables 3 and 4).

    Returns:
        ``mean_statistic``, ``mean_p`` (H1: X < Y, applications more masculine),
        ``mean_p_opposite`` (H1: X > Y), and the same three for ``magnitude`` (|X| vs |Y|).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    out: dict[str, float] = {}
    for name, (a, b) in {"mean": (x, y), "magnitude": (np.abs(x), np.abs(y))}.items():
        statistic, p, p_opposite = _signed_rank(a, b)
        out |= {f"{name}_statistic": statistic, f"{name}_p": p, f"{name}_p_opposite": p_opposite}
    return out


def variance_tests(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The paper's Levene (Brown-Forsythe) test and the paired Brown-Forsythe test.

    Returns:
        ``levene_statistic``, ``levene_p`` (two-sided), ``levene_p_one_sided`` (H1:
        postings spread more, read as the authors: p/2 when the postings' mean absolute
        deviation from their median, the quantity the test compares, is larger, else 1 - p/2);
        ``paired_p`` (H1: postings' absolute deviations from their median exceed the
        applications'), ``paired_p_opposite``; and both sample variances.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    var_x, var_y = _sd(x) ** 2, _sd(y) ** 2
    dev_x, dev_y = np.abs(x - np.median(x)), np.abs(y - np.median(y))
    if np.ptp(dev_x) == 0 and np.ptp(dev_y) == 0:
        # Each side's absolute deviations constant: Levene's F divides by zero.
        statistic = p = float("nan")
    else:
        levene = stats.levene(x, y, center="median")
        statistic, p = float(levene.statistic), float(levene.pvalue)
    _, p_smaller_x, p_larger_x = _signed_rank(dev_x, dev_y)
    return {
        "levene_statistic": statistic,
        "levene_p": p,
        # Brown-Forsythe's F is the squared t of the absolute deviations from the medians: its
        # one-sided direction is theirs, which the sample variances need not share.
        "levene_p_one_sided": p / 2 if dev_x.mean() > dev_y.mean() else 1 - p / 2,
        "paired_p": p_larger_x,
        "paired_p_opposite": p_smaller_x,
        "var_postings": var_x,
        "var_applications": var_y,
    }


def arrow(p_up: float, p_down: float, alpha: float = 0.05) -> str:
    """Table 1's arrow from two opposite one-sided p-values, each at alpha / 2.

    That is a two-sided test at ``alpha`` reporting its direction: ``↑`` when the application
    side is significantly larger, ``↓`` when smaller, ``–`` when neither.
    """
    if p_up < alpha / 2:
        return "↑"
    if p_down < alpha / 2:
        return "↓"
    return "–"


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _sd(values: np.ndarray) -> float:
    return float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def prism_tables(
    scores: pd.DataFrame,
    dims: list[str],
    posting: str = "posting",
    application: str = "application",
    alpha: float = 0.05,
) -> dict[str, pd.DataFrame]:
    """Every table of the paper's analysis from paired scores.

    Args:
        scores: One row per pair with columns ``<posting>_<dim>`` and ``<application>_<dim>``.
        dims: Dimensions to report.
        posting: Column prefix of the posting (input) scores.
        application: Column prefix of the application (output) scores.
        alpha: Level of Table 1's arrows.

    Returns:
        ``summary`` (Table 2: mean, magnitude, sd per side), ``fit`` (DBSCAN-filtered and
        unfiltered), ``shift`` (Tables 3-4), ``variance`` (Table 5 with the paired test) and
        ``arrows`` (Table 1). Pairs missing either score are left out of a dimension and
        counted in ``summary.excluded_pairs``.
    """
    summary, fits, shifts, variances, table1 = [], [], [], [], []
    for dim in dims:
        pair = scores[[f"{posting}_{dim}", f"{application}_{dim}"]]
        complete = pair.dropna()
        x, y = complete.iloc[:, 0].to_numpy(float), complete.iloc[:, 1].to_numpy(float)
        summary.append(
            {
                "dimension": dim,
                "pairs": len(complete),
                "excluded_pairs": len(pair) - len(complete),
                "posting_mean": _mean(x),
                "posting_magnitude": _mean(np.abs(x)),
                "posting_sd": _sd(x),
                "application_mean": _mean(y),
                "application_magnitude": _mean(np.abs(y)),
                "application_sd": _sd(y),
            }
        )
        for filtered in (True, False):
            fits.append({"dimension": dim, "dbscan": filtered, **asdict(fit(x, y, filtered))})
        shift = shift_tests(x, y)
        shifts.append({"dimension": dim, **shift})
        variance = variance_tests(x, y)
        variances.append({"dimension": dim, **variance})
        table1.append(
            {
                "dimension": dim,
                "mean": arrow(shift["mean_p"], shift["mean_p_opposite"], alpha),
                "magnitude": arrow(shift["magnitude_p"], shift["magnitude_p_opposite"], alpha),
                # Variance up = applications vary more than postings.
                "variance": arrow(variance["paired_p_opposite"], variance["paired_p"], alpha),
            }
        )
    return {
        "summary": pd.DataFrame(summary),
        "fit": pd.DataFrame(fits),
        "shift": pd.DataFrame(shifts),
        "variance": pd.DataFrame(variances),
        "arrows": pd.DataFrame(table1),
    }


def one_pair_per_posting(
    pairs: pd.DataFrame, keys: list[str], columns: Sequence[str]
) -> pd.DataFrame:
    """One pair per posting: its scores and the mean of its applications' scores.

    The tests take pairs as independent; several applications to one posting are not (they
    share the posting), so a posting counts once, as in the paper (one application each).

    Args:
        pairs: One row per application with ``posting_<column>``, ``application_<column>``
            and ``excluded`` (None when the pair has both scores).
        keys: Columns identifying a posting (e.g. the model and the posting).
        columns: Score columns (without the side prefix).

    Returns:
        ``keys``, the posting's scores, its scored applications' mean scores and
        ``applications``, how many scored applications the mean is over (excluded ones are
        left out of it; a posting with none has NaN application scores).
    """
    scored = pairs[pairs["excluded"].isna()]
    postings = pairs.groupby(keys, sort=False)[[f"posting_{c}" for c in columns]].first()
    means = scored.groupby(keys, sort=False)[[f"application_{c}" for c in columns]].mean()
    counts = scored.groupby(keys, sort=False).size().rename("applications")
    out = postings.join(means).join(counts).reset_index()
    out["applications"] = out["applications"].fillna(0).astype(int)
    return out
