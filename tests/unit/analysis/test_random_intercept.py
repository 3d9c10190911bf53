"""The closed-form random-intercept REML fit against two independent oracles: statsmodels'
``MixedLM`` where its optimizer converges, and the REML likelihood written with dense
matrices (V = sigma^2 I + tau^2 Z Z')."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import optimize

from biasim.analysis.stats.random_intercept import fit_random_intercept


def _data(seed: int, clusters: int, per: int, tau: float):
    rng = np.random.default_rng(seed)
    c = np.repeat(np.arange(clusters), per)
    x = rng.integers(0, 2, len(c)).astype(float)
    y = 0.3 * x + rng.normal(0, tau, clusters)[c] + rng.normal(0, 1, len(c))
    return y, np.column_stack([np.ones_like(x), x]), c


def _dense_reml(y, x, c):
    """REML by brute force: the restricted likelihood of (sigma^2, tau^2) maximised with
    Nelder-Mead on the log scale, from the dense covariance matrix."""
    same = (c[:, None] == c[None, :]).astype(float)

    def deviance(logs):
        v = np.exp(logs[0]) * np.eye(len(y)) + np.exp(logs[1]) * same
        vi = np.linalg.inv(v)
        a = x.T @ vi @ x
        beta = np.linalg.solve(a, x.T @ vi @ y)
        r = y - x @ beta
        return np.linalg.slogdet(v)[1] + np.linalg.slogdet(a)[1] + r @ vi @ r

    best = optimize.minimize(
        deviance,
        [0.0, -1.0],
        method="Nelder-Mead",
        options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000},
    )
    s2, t2 = np.exp(best.x)
    vi = np.linalg.inv(s2 * np.eye(len(y)) + t2 * same)
    cov = np.linalg.inv(x.T @ vi @ x)
    return cov @ x.T @ vi @ y, np.sqrt(np.diag(cov)), t2, s2


@pytest.mark.parametrize(
    ("seed", "clusters", "per", "tau"), [(1, 8, 12, 0.5), (2, 5, 30, 1.0), (3, 12, 4, 0.3)]
)
def test_equals_the_dense_reml_fit(seed, clusters, per, tau) -> None:
    y, x, c = _data(seed, clusters, per, tau)
    fit = fit_random_intercept(y, x, c)
    beta, se, t2, s2 = _dense_reml(y, x, c)
    assert fit.params == pytest.approx(beta, rel=1e-4, abs=1e-6)
    assert fit.bse == pytest.approx(se, rel=1e-4)
    assert fit.cluster_variance == pytest.approx(t2, rel=1e-3)
    assert fit.residual_variance == pytest.approx(s2, rel=1e-4)


def test_equals_statsmodels_where_its_optimizer_converges() -> None:
    y, x, c = _data(4, 10, 20, 0.6)
    frame = pd.DataFrame({"y": y, "x": x[:, 1], "c": c})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.mixedlm("y ~ x", frame, groups="c").fit(reml=True)
    fit = fit_random_intercept(y, x, c)
    assert fit.params == pytest.approx(ref.fe_params.to_numpy(), rel=1e-5)
    assert fit.cluster_variance == pytest.approx(float(ref.cov_re.iloc[0, 0]), rel=1e-4)
    # statsmodels' standard errors come from the observed information, cross terms with the
    # variance included; the two agree to well under 1 % at this size.
    assert fit.bse == pytest.approx(ref.bse_fe.to_numpy(), rel=1e-2)
    assert fit.pvalues[1] == pytest.approx(float(ref.pvalues["x"]), rel=0.05)


def test_clusters_that_do_not_differ_give_the_least_squares_fit() -> None:
    y, x, _ = _data(5, 1, 40, 0.0)
    y, x = np.tile(y, 3), np.tile(x, (3, 1))  # three clusters with identical data
    c = np.repeat(np.arange(3), 40)
    fit = fit_random_intercept(y, x, c)
    ols = np.linalg.lstsq(x, y, rcond=None)[0]
    assert fit.on_boundary and fit.cluster_variance == 0.0
    assert fit.params == pytest.approx(ols, rel=1e-10)
    assert not fit_random_intercept(*_data(6, 8, 20, 1.0)).on_boundary
