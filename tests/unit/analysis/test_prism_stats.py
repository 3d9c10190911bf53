"""PRISM's posting -> application statistics against scipy and hand formulas, recovery of a
declared shift, and calibration under a paired null."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.studies.prism.stats import (
    arrow,
    fit,
    one_pair_per_posting,
    prism_tables,
    shift_tests,
    variance_tests,
)


def _pairs(n: int, rho: float, rng: np.random.Generator, mean: float = 0.4, sd: float = 0.3):
    """Exchangeable correlated pairs: the null of every paired test here."""
    cov = sd**2 * np.array([[1, rho], [rho, 1]])
    xy = rng.multivariate_normal([mean, mean], cov, size=n)
    return xy[:, 0], xy[:, 1]


def test_fit_removes_dbscan_outliers_and_matches_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.15, 300)
    y = 0.5 * x + rng.normal(0, 0.05, 300)
    far = np.array([[5.0, 5.0], [-5.0, 4.0], [6.0, -6.0], [-6.0, -5.0], [9.0, 0.0]])
    xa, ya = np.r_[x, far[:, 0]], np.r_[y, far[:, 1]]
    filtered = fit(xa, ya)
    assert (filtered.n, filtered.removed) == (300, 5)
    assert filtered.pearson_r == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert filtered.spearman_rho == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert filtered.slope == pytest.approx(np.polyfit(x, y, 1)[0], abs=1e-10)
    assert filtered.slope == pytest.approx(0.5, abs=0.05)
    everything = fit(xa, ya, dbscan=False)
    assert everything.removed == 0
    assert everything.pearson_r == pytest.approx(stats.pearsonr(xa, ya).statistic, abs=1e-12)


def test_shift_statistics_match_the_signed_rank_formula():
    rng = np.random.default_rng(1)
    x, y = _pairs(200, 0.6, rng)
    y = y + 0.02
    got = shift_tests(x, y)
    d = x - y
    ranks = stats.rankdata(np.abs(d))
    w_plus = ranks[d > 0].sum()
    n = len(d)
    z = (w_plus - n * (n + 1) / 4) / np.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    assert got["mean_statistic"] == w_plus
    assert got["mean_p"] == pytest.approx(stats.norm.cdf(z), rel=1e-9)
    assert got["mean_p_opposite"] == pytest.approx(stats.norm.sf(z), rel=1e-9)
    m = np.abs(x) - np.abs(y)
    assert got["magnitude_statistic"] == stats.rankdata(np.abs(m))[m > 0].sum()


def test_levene_one_sided_reading_and_variance_sides():
    rng = np.random.default_rng(2)
    x = rng.normal(0.4, 0.7, 400)
    y = 0.3 + 0.3 * x + rng.normal(0, 0.2, 400)
    got = variance_tests(x, y)
    two_sided = stats.levene(x, y, center="median")
    assert got["levene_statistic"] == pytest.approx(two_sided.statistic, rel=1e-12)
    assert got["levene_p_one_sided"] == pytest.approx(two_sided.pvalue / 2, rel=1e-12)
    swapped = variance_tests(y, x)
    assert swapped["levene_p_one_sided"] == pytest.approx(1 - two_sided.pvalue / 2, rel=1e-12)
    assert got["paired_p"] < 1e-10 < 0.5 < got["paired_p_opposite"]


def test_recovers_a_declared_shift_and_shrinkage():
    rng = np.random.default_rng(3)
    x = rng.normal(0.45, 0.3, 1000)
    # Applications: pulled toward a masculine point (shift up), shrunk (less variance).
    y = 0.6 + 0.4 * (x - 0.45) + rng.normal(0, 0.05, 1000)
    scores = pd.DataFrame({"posting_wfc": x, "application_wfc": y})
    tables = prism_tables(scores, ["wfc"])
    assert tables["arrows"].iloc[0].to_dict() == {
        "dimension": "wfc",
        "mean": "↑",
        "magnitude": "↑",
        "variance": "↓",
    }
    row = tables["fit"].query("dbscan").iloc[0]
    assert row["slope"] == pytest.approx(0.4, abs=0.03)
    assert tables["summary"].iloc[0]["application_mean"] == pytest.approx(0.6, abs=0.01)


def test_missing_scores_are_counted_not_dropped_silently():
    rng = np.random.default_rng(4)
    x, y = _pairs(120, 0.5, rng)
    y[:7] = np.nan
    tables = prism_tables(pd.DataFrame({"posting_psy": x, "application_psy": y}), ["psy"])
    assert tables["summary"].iloc[0][["pairs", "excluded_pairs"]].tolist() == [113, 7]


def test_arrow_is_a_two_sided_test_reporting_its_direction():
    assert arrow(0.02, 0.98) == "↑"
    assert arrow(0.97, 0.01) == "↓"
    assert arrow(0.03, 0.97) == "–"


@pytest.mark.slow
def test_calibration_under_a_paired_null():
    # Postings and applications correlated as in the paper (r ~ 0.45-0.78), no shift: every
    # paired test must reject 3-7 % at alpha 0.05.
    rng = np.random.default_rng(20240515)
    reps, alpha = 2000, 0.05
    rejections = {"mean": 0, "magnitude": 0, "mean_arrow": 0, "paired_variance": 0}
    for _ in range(reps):
        x, y = _pairs(150, 0.65, rng)
        shift = shift_tests(x, y)
        rejections["mean"] += shift["mean_p"] < alpha
        rejections["magnitude"] += shift["magnitude_p"] < alpha
        rejections["mean_arrow"] += arrow(shift["mean_p"], shift["mean_p_opposite"]) != "–"
        rejections["paired_variance"] += variance_tests(x, y)["paired_p"] < alpha
    rates = {k: v / reps for k, v in rejections.items()}
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates


@pytest.mark.slow
def test_levene_is_calibrated_for_independent_samples_only():
    rng = np.random.default_rng(7)
    reps = 2000
    independent = paired = 0
    for _ in range(reps):
        x, y = _pairs(150, 0.0, rng)
        independent += variance_tests(x, y)["levene_p_one_sided"] < 0.05
        x, y = _pairs(150, 0.65, rng)
        paired += variance_tests(x, y)["levene_p_one_sided"] < 0.05
    assert 0.03 <= independent / reps <= 0.07
    # Why the paired test is reported beside it: on correlated pairs Levene rejects too rarely.
    assert paired / reps < 0.03


def test_figures_3_and_5_are_written(tmp_path):
    from biasim.analysis.studies.prism.figures import plot_histograms, plot_scatter_density

    rng = np.random.default_rng(8)
    x, y = _pairs(200, 0.6, rng)
    x[:2] += 9  # two far outliers for DBSCAN to mark
    scores = pd.DataFrame(
        {"posting_psy": x, "application_psy": y, "posting_gsc": y, "application_gsc": x}
    )
    tables = prism_tables(scores, ["psy", "gsc"])
    fig3 = plot_scatter_density(scores, tables["fit"], ["psy", "gsc"], tmp_path / "fig3.png")
    fig5 = plot_histograms(scores, ["psy", "gsc"], tmp_path / "fig5.png")
    assert (tmp_path / "fig3.png").stat().st_size > 10_000
    assert (tmp_path / "fig5.png").stat().st_size > 10_000
    first = fig3.axes[0]
    assert first.get_title() == "Psychological cues"
    removed = int(tables["fit"].query("dimension == 'psy' and dbscan")["removed"].iloc[0])
    assert removed >= 2
    assert f"removed = {removed}" in first.texts[0].get_text()
    assert [t.get_text() for t in fig5.axes[0].get_legend().get_texts()] == [
        "Job postings (n = 200)",
        "Applications (n = 200)",
    ]


def _applications(n: int, k: int, rng: np.random.Generator) -> pd.DataFrame:
    """k applications to each of n postings, under the null of no shift of any kind.

    Each posting has a tone t; its score is t + e, each application's t + u + v with u shared
    by the posting's applications. Var(u) + Var(v) / k = Var(e), so a posting's score and the
    mean of its applications are exchangeable given t (same centre, spread and magnitude).
    """
    sd, sd_v = 0.3, 0.4
    tone = rng.normal(0.4, 0.5, n)
    posting = tone + rng.normal(0, sd, n)
    shared = rng.normal(0, np.sqrt(sd**2 - sd_v**2 / k), n)
    application = (tone + shared)[:, None] + rng.normal(0, sd_v, (n, k))
    return pd.DataFrame(
        {
            "posting": np.repeat(np.arange(n), k),
            "posting_psy": np.repeat(posting, k),
            "application_psy": application.ravel(),
            "excluded": None,
        }
    )


@pytest.mark.slow
def test_one_pair_per_posting_is_calibrated_where_every_application_is_not():
    # Several applications answer one posting: as pairs they share the posting's score and its
    # shared deviation, so treating each as an independent pair over-rejects; one pair per
    # posting (the mean of its applications) is calibrated for every paired test.
    rng = np.random.default_rng(15)
    reps, alpha = 2000, 0.05
    per_posting = {"mean": 0, "magnitude": 0, "paired_variance": 0}
    per_application = 0
    for _ in range(reps):
        pairs = _applications(60, 5, rng)
        one = one_pair_per_posting(pairs, ["posting"], ["psy"])
        assert one["applications"].eq(5).all()
        x, y = one["posting_psy"].to_numpy(), one["application_psy"].to_numpy()
        shift = shift_tests(x, y)
        per_posting["mean"] += shift["mean_p"] < alpha
        per_posting["magnitude"] += shift["magnitude_p"] < alpha
        per_posting["paired_variance"] += variance_tests(x, y)["paired_p"] < alpha
        naive = shift_tests(pairs["posting_psy"].to_numpy(), pairs["application_psy"].to_numpy())
        per_application += naive["mean_p"] < alpha
    rates = {k: v / reps for k, v in per_posting.items()}
    assert all(0.03 <= r <= 0.07 for r in rates.values()), rates
    assert per_application / reps > 0.10


def test_one_pair_per_posting_leaves_excluded_applications_out_of_the_mean():
    pairs = pd.DataFrame(
        {
            "posting": ["a", "a", "a", "b"],
            "posting_psy": [1.0, 1.0, 1.0, 2.0],
            "application_psy": [0.5, 1.5, np.nan, np.nan],
            "excluded": [None, None, "application: no scored token", "application not answered"],
        }
    )
    one = one_pair_per_posting(pairs, ["posting"], ["psy"]).set_index("posting")
    assert one.loc["a", "application_psy"] == 1.0 and one.loc["a", "applications"] == 2
    assert np.isnan(one.loc["b", "application_psy"]) and one.loc["b", "applications"] == 0
    assert one.loc["b", "posting_psy"] == 2.0
