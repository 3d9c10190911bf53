"""The EEOC adverse-impact columns (29 CFR 1607.4(D)) against independent oracles: Fisher's p
summed from hypergeometric terms, the z from statsmodels, Katz's interval written out, and
hand-worked shortfalls and one-person flips."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportions_ztest

from biasim.analysis.audit.eeoc import (
    eeoc_columns,
    flip_changes_conclusion,
    ratio_interval,
    shortfall,
    two_sd_z,
)
from biasim.analysis.audit.presets import EEOC, AuditContext


def _fisher_oracle(k: int, n: int, k_ref: int, n_ref: int) -> float:
    """Two-sided Fisher p: the hypergeometric probabilities no larger than the observed one."""
    total, selected = n + n_ref, k + k_ref

    def prob(x: int) -> float:
        return math.comb(n, x) * math.comb(n_ref, selected - x) / math.comb(total, selected)

    observed = prob(k)
    support = range(max(0, selected - n_ref), min(n, selected) + 1)
    return sum(p for x in support if (p := prob(x)) <= observed * (1 + 1e-7))


def _table(rows: list[tuple[str, int, int]], excluded: set[str] = frozenset()) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["sex", "n", "n_selected"])
    frame["excluded"] = frame["sex"].isin(excluded)
    return frame


def test_every_column_equals_its_oracle() -> None:
    out = eeoc_columns(_table([("F", 40, 12), ("M", 50, 25)]), [], ["sex"]).set_index("sex")
    female = out.loc["F"]
    assert female["reference"] == "M"
    assert female["fisher_p"] == pytest.approx(_fisher_oracle(12, 40, 25, 50), rel=1e-9)
    z, _ = proportions_ztest([12, 25], [40, 50])
    assert female["two_sd_z"] == pytest.approx(z)
    se = math.sqrt(1 / 12 - 1 / 40 + 1 / 25 - 1 / 50)
    ratio = (12 / 40) / (25 / 50)
    assert female["impact_ratio_ci_low"] == pytest.approx(ratio * math.exp(-1.959964 * se))
    assert female["impact_ratio_ci_high"] == pytest.approx(ratio * math.exp(1.959964 * se))
    # 4/5 of 0.5 is 0.4: 16 of 40, 4 more than the 12 selected.
    assert female["shortfall"] == 4
    male = out.loc["M"]
    assert (male["impact_ratio_ci_low"], male["impact_ratio_ci_high"]) == (1.0, 1.0)
    assert pd.isna(male["fisher_p"]) and male["shortfall"] == 0


def test_shortfall_and_the_one_person_flip_by_hand() -> None:
    assert shortfall(20, 100, 0.5) == 20
    assert shortfall(40, 100, 0.5) == 0  # exactly 4/5 is not under it
    # 39/100 against 50/100 is 0.78: one more selection makes 0.80, no longer under 4/5.
    assert flip_changes_conclusion([(39, 100), (50, 100)], 0) is True
    assert flip_changes_conclusion([(30, 100), (50, 100)], 0) is False
    # 40/100 is at 4/5: one fewer puts it under.
    assert flip_changes_conclusion([(40, 100), (50, 100)], 0) is True
    # The highest group losing one can make the other the highest: recomputed, not assumed.
    assert flip_changes_conclusion([(50, 100), (50, 100)], 1) is False


def test_intervals_and_z_at_the_edges() -> None:
    low, high = ratio_interval(0, 20, 10, 20)
    assert low < high < 1  # none selected: the corrected interval stays finite
    assert math.isnan(two_sd_z(0, 10, 0, 10))


def test_excluded_rows_and_strata_are_kept_apart() -> None:
    table = _table([("F", 40, 12), ("M", 50, 25), ("X", 1, 1)], excluded={"X"})
    table = pd.concat([table.assign(job="a"), table.assign(job="b", n_selected=[20, 25, 0])])
    out = eeoc_columns(table.reset_index(drop=True), ["job"], ["sex"])
    assert set(out.loc[out["job"] == "a", "reference"].dropna()) == {"M"}
    assert out.loc[(out["job"] == "b") & (out["sex"] == "F"), "reference"].item() == "F"
    assert out.loc[out["sex"] == "X", "fisher_p"].isna().all()
    assert out.loc[out["sex"] == "X", "reference"].isna().all()


def test_repeated_applicants_get_no_p_and_a_note() -> None:
    tables = {"sex": _table([("F", 40, 12), ("M", 50, 25)])}
    context = AuditContext(by=[], categories={"sex": ["sex"]}, repeated=3, unit_note="x")
    out, notes = EEOC.extend(tables, context)
    assert out["sex"]["fisher_p"].isna().all() and out["sex"]["two_sd_z"].isna().all()
    assert out["sex"]["shortfall"].tolist() == [4, 0]
    assert any("3 applicant(s) were decided more than once" in n for n in notes)
