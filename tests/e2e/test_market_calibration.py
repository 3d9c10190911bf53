"""The market's policy test checked end to end: studies run by the engine (``biasim run``'s
in-process route), read by the ``market_effects`` kind, over many seeds (issue 46's done-when:
a policy with no true effect flags <= 7 % of families over 30 seeds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import biasim
from tests import pipeline_studies
from tests.market_studies import market

#: ``same`` is the base's reading under another name (its own calls, the same truth): no true
#: effect. ``redacted`` hides the names, so the managers' preference cannot act: a real effect.
POLICIES = {
    "same": {"stages": {"offer": {"author": "name"}}},
    "redacted": {"stages": {"offer": {"author": "redacted"}}},
}
#: Managers favour their own gender 3 to 1 and men 8 to 1 where they see the name. With pools
#: of 4 a pick stays uncertain, so the null's two trajectories differ in their counts (a
#: near-certain pick, 20 to 1 in pools of 2, ties most replicates' changes at 0: p near 1).
TRUTH = {"by": "gender", "in_group": 3.0, "weights": {"male": 8.0}}
SEEDS = 30
POOL = 4


def policy_p_values(tmp_path: Path) -> dict[str, list[float]]:
    """Each policy's p-value in each of :data:`SEEDS` runs of the small market (10 replicate
    markets of 6 cycles, pools of :data:`POOL` applicants, the study seed the run's seed), as
    the run's summary.json has it."""
    data = market(
        policies=POLICIES,
        cycles=6,
        market={"replicates": 10},
        analyses=[{"kind": "market_effects", "name": "effects"}],
    )
    data["roles"]["manager"]["synthetic"]["selected"] = TRUTH
    data["market"]["applicants"]["per_cycle"] = POOL
    data["stages"][1]["reads"]["size"] = POOL
    path = pipeline_studies.write(tmp_path / "market.yaml", data)
    found: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    for seed in range(SEEDS):
        out = tmp_path / f"seed{seed}"
        biasim.run(path, out=out, seed=seed)
        summary = json.loads((out / "summary.json").read_text())
        effects = next(a for a in summary["analyses"] if a["name"] == "effects")
        for test in effects["tests"]:
            assert test["unit"] == "replicate market" and test["n_units"] == 10, test
            found[test["policy"]].append(test["p_value"])
    return found


@pytest.mark.slow
def test_a_policy_without_effect_flags_few_families_and_one_with_an_effect_most(
    tmp_path: Path,
) -> None:
    """30 seeds, each a ``biasim run`` of 10 replicate markets whose managers (drawn from each
    trajectory's own workforce) favour their own group and men. A **family** is one seed's
    run: the set of its policies' tests that have no true effect, here the one test of
    ``same`` (unit: the replicate market, exact over the 1,024 sign flips); the family is
    flagged when any of its tests has p < 0.05. At most 7 % of the 30 families may be flagged
    (2 of 30); the same runs' ``redacted``, which removes the preference, is flagged in most
    of them (power; at least 70 %). Printed here: 3.3 % (1 of 30) and 80 %."""
    p = policy_p_values(tmp_path)
    null_rate = float(np.mean(np.array(p["same"]) < 0.05))
    power = float(np.mean(np.array(p["redacted"]) < 0.05))
    print(f"families flagged: {null_rate:.1%} of {SEEDS}; redaction flagged: {power:.1%}")
    assert null_rate <= 0.07, p["same"]
    assert power >= 0.7, p["redacted"]
