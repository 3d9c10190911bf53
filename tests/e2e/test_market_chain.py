"""The simulated market against its closed form: the mean composition per cycle over replicate
seeds matches the Markov chain's expected trajectory within the replicates' standard error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.engine.runner import RunOptions, execute, prepare
from tests import pipeline_studies
from tests.market_chain import expected_trajectory, transition_matrix
from tests.market_studies import market

#: A manager favours its own group 3 to 1, and every manager men 4 to 1: the composition
#: drifts from its start by more than 4 standard errors of the replicates' mean (a symmetric
#: truth would leave the mean flat, and a market whose hires never joined would pass it).
TRUTH = {"by": "gender", "in_group": 3.0, "weights": {"male": 4.0}}
N, M, CYCLES, REPLICATES = 4, 20, 8, 80


#: A policy that acts as the base: its trajectory draws its own applicants from the people it
#: does not employ, so it is the same chain.
SAME = {"same": {"stages": {"offer": {"author": "name"}}}}


def simulated_women(tmp_path: Path) -> dict[str, np.ndarray]:
    """Per trajectory (the base and :data:`SAME`), women in the workforce at the end of each
    cycle, one row per replicate seed."""
    data = market(cycles=CYCLES, policies=SAME)
    data["roles"]["manager"]["synthetic"]["selected"] = TRUTH
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    rows: dict[str, list[np.ndarray]] = {"base": [], "same": []}
    for seed in range(REPLICATES):
        out = tmp_path / f"seed{seed}"
        execute(prepare(RunOptions(study=str(path), out=out, seed=seed, throwaway=True)))
        table = pd.read_csv(out / "market.csv")
        for policy, found in rows.items():
            women = table[
                (table["group"] == "female") & (table["cycle"] > 0) & (table["policy"] == policy)
            ]
            found.append(women.sort_values("cycle")["workforce"].to_numpy())
    return {policy: np.array(found) for policy, found in rows.items()}


def test_the_chain_is_a_chain() -> None:
    matrix = transition_matrix(N, M, TRUTH["in_group"], TRUTH["weights"])
    assert np.allclose(matrix.sum(axis=1), 1.0) and (matrix >= 0).all()
    # Without any preference the expected composition stays where it started.
    means, _ = expected_trajectory(N, M, 1.0, {}, CYCLES)
    assert np.allclose(means, N / 2)


@pytest.mark.slow
def test_the_simulated_market_follows_its_markov_chain(tmp_path: Path) -> None:
    means, variances = expected_trajectory(N, M, TRUTH["in_group"], TRUTH["weights"], CYCLES)
    # The truth moves the mean by several standard errors: the check can fail.
    assert N / 2 - means[-1] > 4 * np.sqrt(variances[-1] / REPLICATES)
    for policy, women in simulated_women(tmp_path).items():
        assert women.shape == (REPLICATES, CYCLES), policy
        # Each cycle's mean over replicates, against the exact mean, in units of the
        # replicates' standard error (4 SE per cycle: a false alarm in 8 cycles of one
        # trajectory has probability < 0.001).
        se = women.std(axis=0, ddof=1) / np.sqrt(REPLICATES)
        z = (women.mean(axis=0) - means) / se
        assert np.all(np.abs(z) < 4), (policy, women.mean(axis=0), means, z)
        # The spread too: the sample variance against the chain's, within a loose bound.
        assert np.all(np.abs(women.var(axis=0, ddof=1) / variances - 1) < 0.5), policy
