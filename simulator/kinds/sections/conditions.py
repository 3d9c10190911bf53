"""How ``condition_differences`` tests whether the disparity differs between the levels of
its ``condition`` factor (``analysis.conditions``), e.g. a persona ablation."""

from __future__ import annotations

from biasim.simulator.kinds.base import AnalysisContext
from biasim.simulator.kinds.lazy import conditions, pd


def condition_differences(
    ctx: AnalysisContext,
    rows: pd.DataFrame,
    *,
    condition: str,
    unit_col: str,
    whole_units: bool,
    case_cols: list[str],
    n_permutations: int,
    adjust: str,
    alpha: float,
) -> tuple[pd.DataFrame | None, list[str], str | None]:
    """Test every case for a difference in DPD between the levels of ``condition`` (all at
    once, then each pair): the tests (None with fewer than two levels, or refused), the
    levels present, and why they were refused (or None). ``rows``: the kind's decisions
    (``value``, ``_hit``) with ``unit_col``, the unit every test of the kind reads
    (``units.design_units``): the persona without its condition and replicate, whose answers'
    condition labels are relabelled among themselves, or (``whole_units``) the name shared by
    every persona drawn with it, whose conditions are relabelled whole (its personas differ,
    so its answers are not exchangeable)."""
    study = ctx.study
    answered = rows[rows["_hit"].notna() & rows[unit_col].notna()]
    present = set(answered[condition])
    levels = [level for level in study.design.factors[condition] if level in present]
    if len(levels) < 2:
        return None, levels, None
    in_groups = answered.groupby([*case_cols, unit_col], sort=False)["value"].nunique()
    if (in_groups > 1).any():
        refused = (
            f"a {unit_col} answers in more than one group of a case (e.g. "
            f"{in_groups[in_groups > 1].index[0][-1]}): its condition labels cannot be "
            "relabelled without moving answers between groups"
        )
        return None, levels, refused
    tests = conditions.condition_difference_tests(
        answered.assign(_hit=answered["_hit"].astype(bool)),
        condition_col=condition,
        conditions=levels,
        case_cols=case_cols,
        group_col="value",
        outcome_col="_hit",
        match_col=unit_col,
        whole_units=whole_units,
        n_permutations=n_permutations,
        adjust=adjust,
        alpha=alpha,
        seed=study.seed,
    )
    # The unit: the kind's, matched across the levels, whose condition labels are relabelled.
    return tests.assign(unit=unit_col, n_units=tests["n_matched"]), levels, None
