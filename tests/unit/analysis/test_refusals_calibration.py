"""Calibration of the refusal checks under simulated nulls that keep the design's structure:
names with 5 answers each and a name propensity (sd 1 on the logit), no group effect.

* MNAR: half of group B's rejections become refusals. The valid-only test then calls B
  favoured in most data sets; a claim that survives the exclusion bounds must not (<= 7 %,
  Monte Carlo error of a 5 % rate over 500 data sets: about 1 point).
* Validity: refusal propensity varies by name (sd 1) but not by group; the validity test,
  names relabelled as a whole, rejects 3-7 %.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import refusals

pytestmark = pytest.mark.slow

N_STUDIES = 500
NAMES, REPS, ALPHA = 40, 5, 0.05


def null_study(rng: np.random.Generator, mnar: bool) -> pd.DataFrame:
    group = np.repeat(["A", "B"], NAMES * REPS)
    name = np.repeat(np.arange(2 * NAMES), REPS)
    propensity = np.repeat(rng.normal(0.0, 1.0, 2 * NAMES), REPS)
    accept = rng.random(group.size) < 1 / (1 + np.exp(-propensity))
    outcome = np.where(accept, "accept", "reject").astype(object)
    if mnar:
        refused = (group == "B") & ~accept & (rng.random(group.size) < 0.5)
    else:
        refusal = np.repeat(rng.normal(-2.0, 1.0, 2 * NAMES), REPS)
        refused = rng.random(group.size) < 1 / (1 + np.exp(-refusal))
    outcome[refused] = "refused"
    return pd.DataFrame({"group": group, "name": name, "decision": outcome})


def test_mnar_refusals_do_not_make_group_b_favoured_or_group_a_flagged() -> None:
    rng = np.random.default_rng(2027)
    naive = bounded = flagged = dpd_claims = 0
    for i in range(N_STUDIES):
        df = null_study(rng, mnar=True)
        common = {"invalid": ["refused"], "unit_col": "name", "n_permutations": 100, "seed": i}
        groups = refusals.group_bounds(df, ["group"], "decision", "accept", **common)
        b = groups.set_index("group").loc["B"]
        naive += b["direction"] == "higher"
        bounded += bool(b["direction_holds"]) and b["direction"] == "higher"
        flagged += bool(groups.set_index("group").loc["A", "flag_holds"])
        bounds = refusals.exclusion_bounds(df, ["group"], "decision", "accept", **common)
        dpd_claims += not refusals.bounds_include_parity(bounds, ALPHA)
    assert naive / N_STUDIES > 0.5  # the failure the bounds guard against
    assert bounded / N_STUDIES <= 0.07
    assert flagged / N_STUDIES <= 0.07
    assert dpd_claims / N_STUDIES <= 0.07


def test_validity_test_by_name_holds_its_level_under_name_heterogeneity() -> None:
    rng = np.random.default_rng(11)
    rejected = 0
    for i in range(N_STUDIES):
        df = null_study(rng, mnar=False)
        found = refusals.validity_test(
            df,
            ["group"],
            "decision",
            invalid=["refused"],
            unit_col="name",
            n_permutations=200,
            seed=i,
        )
        rejected += found["validity_p_value"] < ALPHA
    assert 0.03 <= rejected / N_STUDIES <= 0.07
