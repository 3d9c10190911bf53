"""The beta regression with a random intercept per cluster (seed 000's Table 8 model) against an
independent oracle (its marginal likelihood integrated by `scipy.integrate.quad`, cluster by
cluster), its gradient against finite differences, and its estimates against a simulated truth."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

from biasim.analysis.stats.beta_mixed import _loglik_and_gradient, fit_beta_mixed, loglik


def _simulate(seed: int, jobs: int, per: int, effect: float, sigma: float = 0.5, phi: float = 20):
    rng = np.random.default_rng(seed)
    job = np.repeat(np.arange(jobs), per)
    x = rng.integers(0, 2, job.size).astype(float)
    mu = special.expit(1.0 + effect * x + rng.normal(0, sigma, jobs)[job])
    y = np.clip(rng.beta(mu * phi, (1 - mu) * phi), 1e-6, 1 - 1e-6)
    return y, np.column_stack([np.ones_like(x), x]), job


def _quad_loglik(theta, y, x, job) -> float:
    beta, phi, sigma = theta[:2], np.exp(theta[2]), np.exp(theta[3])
    total = 0.0
    for j in np.unique(job):
        yj, xj = y[job == j], x[job == j]

        def density(b, yj=yj, xj=xj):
            mu = special.expit(xj @ beta + b)
            return np.sum(stats.beta.logpdf(yj, mu * phi, (1 - mu) * phi))

        shift = density(0.0)
        value, _ = integrate.quad(
            lambda b, f=density, s=shift: np.exp(f(b) - s) * stats.norm.pdf(b, scale=sigma),
            -6 * sigma,
            6 * sigma,
            limit=200,
        )
        total += np.log(value) + shift
    return total


@pytest.mark.parametrize("per", [3, 40])
def test_the_marginal_likelihood_is_the_integral(per: int) -> None:
    y, x, job = _simulate(0, jobs=8, per=per, effect=0.3)
    theta = np.array([0.9, 0.2, np.log(15.0), np.log(0.6)])
    assert loglik(theta, y, x, job) == pytest.approx(_quad_loglik(theta, y, x, job), abs=1e-4)


def test_the_gradient_is_the_likelihoods() -> None:
    y, x, job = _simulate(1, jobs=10, per=20, effect=0.3)
    theta = np.array([0.8, 0.2, np.log(15.0), np.log(0.4)])
    _, gradient = _loglik_and_gradient(theta, y, x, job)
    step = 1e-6
    numeric = [
        (loglik(theta + e, y, x, job) - loglik(theta - e, y, x, job)) / (2 * step)
        for e in np.eye(4) * step
    ]
    assert gradient == pytest.approx(numeric, rel=1e-5, abs=1e-5)


def test_a_simulated_truth_is_recovered() -> None:
    y, x, job = _simulate(2, jobs=40, per=50, effect=0.3, sigma=0.5, phi=20)
    fit = fit_beta_mixed(y, x, job)
    assert fit.converged
    assert abs(fit.params[1] - 0.3) < 3 * fit.bse[1]
    assert fit.sigma == pytest.approx(0.5, abs=0.15) and fit.phi == pytest.approx(20, rel=0.1)


@pytest.mark.slow
def test_the_wald_interval_covers_the_truth() -> None:
    # The standard error from the observed information is that of the estimate: over 60
    # data sets of 10 jobs x 20 scores the 95 % Wald interval covers the true effect in 90-100 %.
    covered = 0
    for seed in range(60):
        y, x, job = _simulate(100 + seed, jobs=10, per=20, effect=0.3)
        fit = fit_beta_mixed(y, x, job)
        covered += abs(fit.params[1] - 0.3) < 1.96 * fit.bse[1]
    assert 54 <= covered <= 60


def test_a_response_at_the_bounds_is_refused() -> None:
    y, x, job = _simulate(3, jobs=3, per=4, effect=0.0)
    y[0] = 1.0
    with pytest.raises(ValueError, match="strictly inside"):
        fit_beta_mixed(y, x, job)
