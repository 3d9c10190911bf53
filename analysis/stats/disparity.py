"""Acceptance-rate disparities between groups of a decisions table (An et al. 2024 and beyond).

An et al. (2024) label hiring emails written for 300 first names as accept / reject / invalid and
compare every demographic group's acceptance rate with the population's by a permutation test
(their appendix C.3), separately for each job role, combining the roles with Fisher's method.
This module does the same for any table of decisions, with every column name a parameter:

* rates per group with Wilson intervals and the number of excluded (invalid) answers;
* the permutation test of each group against the population, with the exchangeable unit either
  the single email (the permutation distribution of a group's count is then hypergeometric, so
  p-values are exact) or the name (names move between groups with all their emails, which is the
  honest unit in a name-swap design: emails written for one name are not independent);
* Fisher / Stouffer combination and the Cochran–Mantel–Haenszel test across strata (roles);
* adjustment over an explicitly declared family (via ``analysis.multiple``);
* impact ratios with the four-fifths rule, beside how often an unbiased model would fail it;
* wide breakdown tables shaped like the paper's Tables 1–4.

Rows count when their outcome is present and not one of ``invalid`` (and, when ``valid`` names a
boolean column, that column is true) and every grouping value is present.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

import numpy as np
import pandas as pd
from scipy import stats

from biasim.analysis.stats import multiple, permutation
from biasim.analysis.stats.parity import (
    ParityTest,
    demographic_parity_difference,
    group_rates,
    parity_test,
)

Columns = str | Sequence[str]

INVALID: tuple[str, ...] = ("invalid",)
_OUTCOME = "__outcome__"
# Stouffer needs finite z-scores; a (mid-)p-value of exactly 0 or 1 would decide alone.
_P_FLOOR = np.finfo(float).tiny
_P_CEIL = 1.0 - np.finfo(float).epsneg
#: A stratum near a threshold gets RESOLUTION x family / alpha permutations: the smallest
#: two-sided adjusted p it can reach is then 2 alpha / RESOLUTION (alpha / 2), and a test beyond
#: every permutation is clearly significant,
#: at four times the work of a 5,000-permutation run of 246 tests where every stratum needs it.
RESOLUTION = 4
# Ratios and rates are fractions k / n; compare with a tolerance so that exact ties do not flip.
_TOL = 1e-12


def _as_list(cols: Columns) -> list[str]:
    return [cols] if isinstance(cols, str) else list(cols)


def _require_columns(df: pd.DataFrame, cols: Sequence[str]) -> None:
    missing = [c for c in dict.fromkeys(cols) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; available columns: {list(df.columns)}")


def _answered(
    df: pd.DataFrame,
    outcome_col: str,
    positive: object,
    valid: str | None,
    invalid: Sequence[object],
) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a usable answer, and rows whose answer is ``positive``."""
    outcome = df[outcome_col]
    hit = (outcome == positive).to_numpy(dtype=bool)
    ok = outcome.notna() & ~outcome.isin(list(invalid))
    if valid is not None:
        ok &= df[valid].fillna(False).astype(bool)
    return ok.to_numpy(dtype=bool), hit


def _encode(data: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """An integer code per row and the sorted distinct combinations of ``cols`` it indexes."""
    combined = np.zeros(len(data), dtype=np.int64)
    values = []
    for col in cols:
        codes, uniques = pd.factorize(data[col], sort=True)
        combined = combined * len(uniques) + codes
        values.append(uniques)
    # Mixed-radix codes of per-column sorted codes sort like the value tuples.
    codes, present = pd.factorize(combined, sort=True)
    levels: dict[str, object] = {}
    rest = np.asarray(present, dtype=np.int64)
    for col, uniques in reversed(list(zip(cols, values, strict=True))):
        levels[col] = uniques.take(rest % len(uniques))
        rest = rest // len(uniques)
    return codes.astype(np.int64), pd.DataFrame({c: levels[c] for c in cols})


def acceptance_rates(
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """Rate of ``positive`` per group with Wilson intervals, excluded answers and the population.

    Rates come from ``analysis.parity.group_rates`` (the one definition of a rate); this adds how
    many answers of each group were excluded as invalid, and the population rate. A group whose
    every answer was invalid is kept, with ``n = 0`` and a missing rate.

    Args:
        df: One row per decision.
        group_cols: Column(s) defining the groups, e.g. ``["race", "gender"]``.
        outcome_col: Column holding the decision.
        positive: The decision whose rate is measured, e.g. ``"accept"``.
        valid: Optional boolean column; rows where it is false are excluded.
        invalid: Outcome values that mark an unusable answer (excluded and counted).

    Returns:
        One row per group, sorted: the group columns, ``n`` (valid answers), ``k`` (positive
        decisions), ``rate``, ``ci_low``, ``ci_high`` (95 % Wilson), ``n_excluded`` and
        ``population_rate`` (``sum(k) / sum(n)``, the same on every row).
    """
    keys = _as_list(group_cols)
    _require_columns(df, [*keys, outcome_col, *([valid] if valid else [])])
    if "valid" in keys:
        raise ValueError("a grouping column may not be called `valid`; rename it first")
    answered, _ = _answered(df, outcome_col, positive, valid, invalid)
    frame = df[keys].assign(**{_OUTCOME: df[outcome_col], "valid": answered})
    rates = group_rates(frame, keys, _OUTCOME, positive)
    keyed = frame[keys].notna().all(axis=1).to_numpy()
    excluded = frame[keyed & ~answered].groupby(keys, sort=True).size().rename("n_excluded")
    out = rates.merge(excluded.reset_index(), on=keys, how="outer").sort_values(keys)
    out = out.reset_index(drop=True)
    for col in ("n", "k", "n_excluded"):
        out[col] = out[col].fillna(0).astype(np.int64)
    out["population_rate"] = out["k"].sum() / out["n"].sum()
    return out[[*keys, "n", "k", "rate", "ci_low", "ci_high", "n_excluded", "population_rate"]]


def permutation_vs_population(
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    unit: str = "name",
    unit_col: str = "name",
    n_permutations: int = 5000,
    seed: int = 0,
    stratum_col: str | None = None,
    method: str = "auto",
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
    alpha: float = 0.05,
    family_size: int | None = None,
) -> pd.DataFrame:
    """Permutation test of each group's rate against the population's (An et al. 2024, C.3).

    The statistic is ``d = rate(group) - rate(population)``; identity labels are permuted over
    the population (within each stratum when ``stratum_col`` is given) with group sizes fixed.

    * ``unit="email"``: rows are exchangeable. A group's permuted positive count is then exactly
      hypergeometric, so ``method="auto"`` (or ``"exact"``) computes exact tails with
      ``scipy.stats.hypergeom``; ``method="monte_carlo"`` permutes rows instead.
    * ``unit="name"``: whole names (``unit_col``) move between groups, each keeping all its
      answers, so the many emails written for one name count as one draw. Monte Carlo with
      ``n_permutations`` shuffles; each name must belong to exactly one group (in every stratum).

    Monte Carlo p-values are ``(1 + b) / (1 + B)``, counting the observed labelling as one
    permutation, so they are never 0. ``p_greater`` is P(d' >= d) (the paper's direction, ties
    included), ``p_less`` is P(d' <= d) and ``p_two_sided = min(1, 2 min(p_greater, p_less))``.

    Significance must stay reachable after adjustment over the family (``family_size`` tests,
    by default every row returned): a stratum where some two-sided p is below ``2 alpha`` gets
    ``ceil(RESOLUTION family_size / alpha)`` permutations in all when ``n_permutations`` is
    fewer, so the smallest attainable two-sided adjusted p is ``2 alpha / RESOLUTION``.
    ``smallest_p`` is the smallest two-sided p the design allows at all (names are few:
    ``2 / C(units, units in group)``); a family whose smallest ``smallest_p`` times its size
    is not below ``alpha`` cannot reach significance whatever the data.

    Args:
        df: One row per decision.
        group_cols: Column(s) defining the groups.
        outcome_col: Column holding the decision.
        positive: The decision whose rate is tested.
        unit: ``"name"`` or ``"email"``: what is exchangeable under the null.
        unit_col: Column identifying the name when ``unit="name"``.
        n_permutations: Monte Carlo permutations per stratum.
        seed: Seed of the permutations (each stratum gets its own spawned stream).
        stratum_col: Optional column (e.g. the job role) to test within each of its levels.
        method: ``"auto"``, ``"exact"`` (``unit="email"`` only) or ``"monte_carlo"``.
        valid: Optional boolean column; rows where it is false are excluded.
        invalid: Outcome values that mark an unusable answer (excluded).
        alpha: Level the adjusted p-values will be compared with.
        family_size: Tests in the adjustment family (default: the rows returned).

    Returns:
        One row per (stratum, group) with answers: ``[stratum_col]``, the group columns, ``n``,
        ``k``, ``rate``, ``population_rate``, ``d``, ``p_greater``, ``p_less``, ``p_two_sided``,
        ``method`` (``"exact"`` or ``"monte_carlo"``), ``n_permutations`` (0 when exact) and
        ``smallest_p``.
    """
    keys = _as_list(group_cols)
    _check_population_test(unit, method, n_permutations)
    exact = unit == "email" and method != "monte_carlo"
    extra = ([stratum_col] if stratum_col else []) + ([unit_col] if unit == "name" else [])
    _require_columns(df, [*keys, outcome_col, *extra, *([valid] if valid else [])])
    answered, hit = _answered(df, outcome_col, positive, valid, invalid)
    use = answered & df[keys + extra].notna().all(axis=1).to_numpy()
    data, hit = df.loc[use, list(dict.fromkeys(keys + extra))], hit[use].astype(np.int64)
    cells = _cells(data, hit, keys, stratum_col)
    if exact:
        tails = _exact_tails(cells)
    else:
        tails = _monte_carlo_tails(
            data, hit, cells, unit, unit_col, n_permutations, seed, alpha, family_size
        )
    return _population_table(cells, stratum_col, tails, exact)


def _check_population_test(unit: str, method: str, n_permutations: int) -> None:
    """Refuse a unit, method or permutation count :func:`permutation_vs_population` lacks."""
    if unit not in ("name", "email"):
        raise ValueError(f"unknown unit `{unit}`; use name or email")
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"unknown method `{method}`; use auto, exact or monte_carlo")
    if method == "exact" and unit == "name":
        raise ValueError("exact p-values exist for unit='email' only; use method='monte_carlo'")
    if n_permutations < 1:
        raise ValueError("n_permutations must be at least 1")


class _Cells(NamedTuple):
    """Answers counted by (stratum, group): codes per row, labels, and the counts."""

    s: np.ndarray  # stratum code of each row
    g: np.ndarray  # group code of each row
    groups: pd.DataFrame
    strata: pd.DataFrame
    n_sg: np.ndarray  # answers per (stratum, group)
    k_sg: np.ndarray  # positive answers per (stratum, group)
    big_n: np.ndarray  # answers per stratum
    big_k: np.ndarray  # positive answers per stratum


def _cells(data: pd.DataFrame, hit: np.ndarray, keys: list[str], stratum_col: str | None) -> _Cells:
    """The rows coded by stratum and group, with answers and positives counted per cell."""
    g, groups = _encode(data, keys)
    if stratum_col:
        s, strata = _encode(data, [stratum_col])
    else:
        s, strata = np.zeros(len(data), dtype=np.int64), pd.DataFrame(index=[0])
    n_groups, n_strata = len(groups), len(strata)
    cell = s * n_groups + g
    n_sg = np.bincount(cell, minlength=n_strata * n_groups).reshape(n_strata, n_groups)
    k_sg = np.bincount(cell, weights=hit, minlength=n_strata * n_groups)
    k_sg = k_sg.round().astype(np.int64).reshape(n_strata, n_groups)
    big_n, big_k = n_sg.sum(axis=1), k_sg.sum(axis=1)
    return _Cells(s, g, groups, strata, n_sg, k_sg, big_n, big_k)


class _Tails(NamedTuple):
    """Per (stratum, group) tail p-values, draws per stratum and the smallest reachable p."""

    p_greater: np.ndarray
    p_less: np.ndarray
    drawn: np.ndarray
    smallest: np.ndarray


def _exact_tails(cells: _Cells) -> _Tails:
    """Hypergeometric tails: rows exchangeable, group sizes fixed within each stratum."""
    n_sg, k_sg, big_n, big_k = cells.n_sg, cells.k_sg, cells.big_n, cells.big_k
    total, successes = big_n[:, None], big_k[:, None]
    p_greater = stats.hypergeom.sf(k_sg - 1, total, successes, n_sg)
    p_less = stats.hypergeom.cdf(k_sg, total, successes, n_sg)
    drawn = np.zeros(len(cells.strata), dtype=np.int64)
    smallest = permutation.smallest_p(big_n[:, None], n_sg)
    return _Tails(p_greater, p_less, drawn, smallest)


def _monte_carlo_tails(
    data: pd.DataFrame,
    hit: np.ndarray,
    cells: _Cells,
    unit: str,
    unit_col: str,
    n_permutations: int,
    seed: int,
    alpha: float,
    family_size: int | None,
) -> _Tails:
    """Monte Carlo tails ``(1 + b) / (1 + B)``, with enough draws to reach significance after
    adjustment over the family."""
    n_sg = cells.n_sg
    tests = int((n_sg > 0).sum()) if family_size is None else family_size
    extend_to = int(np.ceil(RESOLUTION * tests / alpha))
    greater, less, drawn, smallest = _monte_carlo(
        data,
        unit,
        unit_col,
        cells.s,
        cells.g,
        hit,
        len(cells.groups),
        len(cells.strata),
        n_permutations,
        seed,
        extend_to,
        alpha,
    )
    p_greater = (greater + 1) / (drawn[:, None] + 1)
    p_less = (less + 1) / (drawn[:, None] + 1)
    return _Tails(p_greater, p_less, drawn, smallest)


def _population_table(
    cells: _Cells, stratum_col: str | None, tails: _Tails, exact: bool
) -> pd.DataFrame:
    """One row per (stratum, group) with answers: counts, rates, d and the tail p-values."""
    n_sg, k_sg, big_n, big_k = cells.n_sg, cells.k_sg, cells.big_n, cells.big_k
    p_greater, p_less, drawn, smallest = tails
    si, gi = np.nonzero(n_sg)
    out = cells.groups.iloc[gi].reset_index(drop=True)
    if stratum_col:
        out.insert(0, stratum_col, cells.strata[stratum_col].to_numpy()[si])
    out["n"], out["k"] = n_sg[si, gi], k_sg[si, gi]
    out["rate"] = out["k"] / out["n"]
    out["population_rate"] = big_k[si] / big_n[si]
    out["d"] = out["rate"] - out["population_rate"]
    out["p_greater"] = np.minimum(np.asarray(p_greater, dtype=float)[si, gi], 1.0)
    out["p_less"] = np.minimum(np.asarray(p_less, dtype=float)[si, gi], 1.0)
    out["p_two_sided"] = np.minimum(1.0, 2 * np.minimum(out["p_greater"], out["p_less"]))
    out["method"] = "exact" if exact else "monte_carlo"
    out["n_permutations"] = drawn[si]
    out["smallest_p"] = np.asarray(smallest, dtype=float)[si, gi]
    return out


def _monte_carlo(
    data: pd.DataFrame,
    unit: str,
    unit_col: str,
    s: np.ndarray,
    g: np.ndarray,
    hit: np.ndarray,
    n_groups: int,
    n_strata: int,
    n_permutations: int,
    seed: int,
    extend_to: int,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Permutation tail counts per (stratum, group), the permutations drawn per stratum and the
    smallest p-value each test could reach.

    A stratum where some test's two-sided p is below ``2 alpha`` after ``n_permutations`` draws
    is near or past a threshold that an adjustment may move down: it gets ``extend_to`` draws
    in all, so that resolution, not Monte Carlo granularity, decides.
    """
    if unit == "email":
        s_u, g_u, n_u, k_u = s, g, np.ones_like(hit), hit
    else:
        cell_unit, s_u, n_u, k_u, group_of = permutation.unit_cells(data, unit_col, g, s, hit)
        g_u = group_of[cell_unit]
    shape = (n_strata, n_groups)
    greater, less = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    smallest = np.ones(shape)
    drawn = np.zeros(n_strata, dtype=np.int64)
    order = np.argsort(s_u, kind="stable")
    bounds = np.searchsorted(s_u[order], np.arange(n_strata + 1))
    streams = np.random.SeedSequence(seed).spawn(n_strata)
    for stratum in range(n_strata):
        idx = order[bounds[stratum] : bounds[stratum + 1]]
        present, local = np.unique(g_u[idx], return_inverse=True)
        rng = np.random.default_rng(streams[stratum])
        args = (n_u[idx], k_u[idx], local, present.size)
        up, down = permutation.tail_counts(*args, n_permutations, rng)
        drawn[stratum] = n_permutations
        nearest = 2 * (np.minimum(up, down) + 1) / (n_permutations + 1)
        if extend_to > n_permutations and (nearest < 2 * alpha).any():
            more_up, more_down = permutation.tail_counts(*args, extend_to - n_permutations, rng)
            up, down, drawn[stratum] = up + more_up, down + more_down, extend_to
        greater[stratum, present], less[stratum, present] = up, down
        sizes = np.bincount(local, minlength=present.size)
        smallest[stratum, present] = permutation.smallest_p(idx.size, sizes)
    return greater, less, drawn, smallest


def joint_vs_population(
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    unit_col: str | None,
    stratum_col: str | None = None,
    reference: Sequence[object] | None = None,
    n_permutations: int = 5000,
    seed: int = 0,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """Each group against the population (or ``reference``), one test across all strata.

    The unit (``unit_col``, e.g. the name; single answers when None) keeps its group label in
    every stratum, so one relabelling of units serves all strata at once: the test stays at its
    level when the same names answer in every role, where combining per-stratum p-values
    (Fisher, Stouffer, CMH) does not. See ``analysis.permutation.joint_permutation_test`` for the
    statistic (the excess rate ``d`` over what the group's strata give).

    Args:
        df: One row per decision.
        group_cols: Column(s) defining the groups.
        outcome_col: Column holding the decision.
        positive: The decision whose rate is tested.
        unit_col: Column naming the exchangeable unit; None makes each answer a unit.
        stratum_col: Optional stratum column (e.g. the job role).
        reference: Values of the group columns of the group every other group is compared
            with; None compares each group with the population.
        n_permutations: Monte Carlo relabellings.
        seed: Seed of the relabellings.
        valid: Optional boolean column; rows where it is false are excluded.
        invalid: Outcome values that mark an unusable answer (excluded).

    Returns:
        One row per compared group, as ``joint_permutation_test`` returns it, plus
        ``compared_with`` (``population`` or the reference group's label).
    """
    keys = _as_list(group_cols)
    extra = [c for c in (stratum_col, unit_col) if c]
    _require_columns(df, [*keys, outcome_col, *extra, *([valid] if valid else [])])
    answered, hit = _answered(df, outcome_col, positive, valid, invalid)
    use = answered & df[keys + extra].notna().all(axis=1).to_numpy()
    data = df.loc[use, list(dict.fromkeys(keys + extra))].reset_index(drop=True)
    unit = unit_col or "__answer__"
    if unit_col is None:
        data[unit] = np.arange(len(data))
    g, groups = _encode(data, keys)
    s = _encode(data, [stratum_col])[0] if stratum_col else np.zeros(len(data), dtype=np.int64)
    if not stratum_col:
        blocks = None
    elif unit_col is None:  # each answer is a unit, and its stratum its block
        blocks = pd.Series(s, index=data[unit].to_numpy())
    else:
        blocks = _asked_blocks(df, keys, unit_col, stratum_col)
    code = None
    if reference is not None:
        wanted = tuple(reference)
        found = [i for i, row in enumerate(groups.itertuples(index=False)) if tuple(row) == wanted]
        if not found:
            raise ValueError(
                f"reference group {list(wanted)} not found; groups: {_group_labels(groups)}"
            )
        code = found[0]
    out = permutation.joint_permutation_test(
        data,
        g,
        groups,
        s,
        hit[use].astype(np.int64),
        unit_col=unit,
        reference=code,
        n_permutations=n_permutations,
        seed=seed,
        blocks=blocks,
    )
    out["compared_with"] = "population" if code is None else _group_labels(groups)[code]
    return out


def _asked_blocks(df: pd.DataFrame, keys: list[str], unit_col: str, stratum_col: str) -> pd.Series:
    """Blocks of units asked in the same strata, from every row with its keys, answered or
    not (``analysis.permutation.signature_blocks``)."""
    asked = df[df[[*keys, unit_col, stratum_col]].notna().all(axis=1)]
    return permutation.signature_blocks(asked[unit_col], asked[stratum_col])


def adjust_both_sides(table: pd.DataFrame, method: str) -> pd.DataFrame:
    """Adjust ``p_greater`` and ``p_less`` as one family (every group, both directions).

    The paper marks a group above average by one one-sided test and below average by the other;
    adjusting both directions together keeps the chance of any false mark at the level.

    Returns:
        A copy with ``p_greater_adjusted`` and ``p_less_adjusted``.
    """
    out = table.copy()
    both = np.r_[out["p_greater"].to_numpy(dtype=float), out["p_less"].to_numpy(dtype=float)]
    adjusted = np.full(both.shape, np.nan)
    finite = ~np.isnan(both)
    adjusted[finite] = multiple.adjust(both[finite], method)
    out["p_greater_adjusted"], out["p_less_adjusted"] = np.split(adjusted, 2)
    return out


def adjust_joint(table: pd.DataFrame, method: str) -> pd.DataFrame:
    """Adjust a joint test's table (:func:`joint_vs_population`): ``p_adjusted`` over the
    two-sided tests and ``p_greater_adjusted`` / ``p_less_adjusted`` over both directions.

    Two groups against their population are one contrast: "a above average" and "b below
    average" are the same relabellings with the same p-value. Adjusting them as two tests (four
    one-sided ones) would run the contrast at alpha / 2; the family holds the distinct tests.
    """
    mirrored = len(table) == 2 and (table.get("compared_with") == "population").all()
    if not mirrored:
        return adjust_both_sides(adjust_family(table, "p_two_sided", method), method)
    out = table.copy()
    out["p_adjusted"] = out["p_two_sided"].to_numpy(dtype=float)  # a family of one test
    first = out.iloc[[0]]
    one = adjust_both_sides(first, method)
    greater, less = float(one["p_greater_adjusted"].iloc[0]), float(one["p_less_adjusted"].iloc[0])
    out["p_greater_adjusted"], out["p_less_adjusted"] = [greater, less], [less, greater]
    return out


def units_recurring(df: pd.DataFrame, unit_col: str, stratum_col: str) -> int:
    """How many units (names) answer in more than one stratum: strata are then not independent."""
    _require_columns(df, [unit_col, stratum_col])
    per_unit = df.dropna(subset=[unit_col, stratum_col]).groupby(unit_col)[stratum_col].nunique()
    return int((per_unit > 1).sum())


def unreachable_families(tables: dict[str, pd.DataFrame], alpha: float = 0.05) -> list[str]:
    """Families (name -> tests with ``smallest_p``) that cannot reach significance after
    adjustment whatever the data: their smallest attainable p times their size is >= alpha."""
    notes = []
    for name, table in tables.items():
        if table.empty or "smallest_p" not in table.columns:
            continue
        best = float(table["smallest_p"].min()) * len(table)
        if best >= alpha:
            notes.append(
                f"{name}: no test of this family can be significant after adjustment over its "
                f"{len(table)} tests (smallest attainable p x {len(table)} = {min(best, 1):.3g}); "
                "more units per group are needed"
            )
    return notes


def combine_pvalues_across(
    tests: pd.DataFrame,
    stratum_col: str,
    group_cols: Columns,
    *,
    method: str = "fisher",
    p_col: str = "p_greater",
    weight_col: str | None = "n",
) -> pd.DataFrame:
    """Combine each group's per-stratum p-values into one (Fisher as in the paper, or Stouffer).

    Fisher: ``X = -2 sum(log p)`` against chi-square with ``2m`` degrees of freedom. Stouffer:
    ``Z = sum(w z) / sqrt(sum(w**2))`` with ``z = Phi^-1(1 - p)`` and ``w = sqrt(weight_col)``
    (equal weights when ``weight_col`` is None). Permutation p-values are discrete: Stouffer uses
    their mid-p, ``(1 + p_greater - p_less) / 2`` for the greater side (ties count half), when
    the table holds both sides, so a stratum without information (every answer alike: both
    sides 1) gets ``z = 0`` instead of an extreme score. A p-value of 0 is raised to the
    smallest float for Fisher's logarithm.

    Both assume the strata are independent. That fails when the same names (personas,
    replicates) answer in several strata: use :func:`joint_vs_population` there.

    Args:
        tests: One row per (stratum, group), e.g. from ``permutation_vs_population``.
        stratum_col: The stratum column; each (stratum, group) must occur once.
        group_cols: Column(s) defining the groups.
        method: ``"fisher"`` or ``"stouffer"``.
        p_col: The one-sided p-values to combine (``p_greater`` or ``p_less``).
        weight_col: Stouffer weights are the square roots of this column.

    Returns:
        One row per group: the group columns, ``n_strata``, ``statistic`` (X or Z), ``p_value``
        and ``method``.
    """
    keys = _as_list(group_cols)
    if method not in ("fisher", "stouffer"):
        raise ValueError(f"unknown combination `{method}`; use fisher or stouffer")
    weighted = method == "stouffer" and weight_col is not None
    _require_columns(tests, [stratum_col, *keys, p_col, *([weight_col] if weighted else [])])
    if tests.duplicated([stratum_col, *keys]).any():
        raise ValueError(f"each ({stratum_col}, group) must occur once in the tests table")
    p = tests[p_col].to_numpy(dtype=float)
    frame = tests[keys].copy()
    if method == "fisher":
        frame["_a"], frame["_b"] = -2 * np.log(np.maximum(p, _P_FLOOR)), 0.0
    else:
        sides = {"p_greater", "p_less"}
        if p_col in sides and sides <= set(tests.columns):
            other = tests[(sides - {p_col}).pop()].to_numpy(dtype=float)
            p = (1 + p - other) / 2
        p = np.clip(p, _P_FLOOR, _P_CEIL)
        w = np.sqrt(tests[weight_col].to_numpy(dtype=float)) if weighted else np.ones(p.size)
        frame["_a"], frame["_b"] = w * stats.norm.isf(p), w**2
    sums = frame.groupby(keys, sort=True).agg(
        n_strata=("_a", "size"), _a=("_a", "sum"), _b=("_b", "sum")
    )
    if method == "fisher":
        statistic = sums["_a"].to_numpy()
        p_value = stats.chi2.sf(statistic, 2 * sums["n_strata"].to_numpy())
    else:
        statistic = sums["_a"].to_numpy() / np.sqrt(sums["_b"].to_numpy())
        p_value = stats.norm.sf(statistic)
    out = sums[["n_strata"]].reset_index()
    out["statistic"], out["p_value"], out["method"] = statistic, p_value, method
    return out


def papers_stratum_fisher_test(
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    stratum_col: str,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """An et al.'s test behind Table 1's marks (appendix C.3): each group against the population
    by an email-level permutation test within each stratum (role), the strata's one-sided
    p-values combined by Fisher's method, unadjusted.

    Emails are the exchangeable unit, so each stratum's test is exact (hypergeometric; mid-p,
    ties counted half). Its level holds only when emails are independent and strata share no
    unit: when the same names write in every role, a name's own propensity counts in every
    email and every role, and the combined p-value is far too small (the calibrated test is
    :func:`joint_vs_population`, which relabels each name once across all roles).

    Returns:
        One row per group: the group columns, ``n``, ``k``, ``rate``, ``population_rate``,
        ``d`` (pooled over the strata), ``n_strata``, ``p_greater`` and ``p_less`` (Fisher over
        the strata's one-sided p-values) and ``p_marked``: the side ``d`` points to, the p
        behind the paper's blue (above) and red (below) marks.
    """
    keys = _as_list(group_cols)
    by_stratum = permutation_vs_population(
        df,
        keys,
        outcome_col,
        positive,
        unit="email",
        stratum_col=stratum_col,
        method="exact",
        valid=valid,
        invalid=invalid,
    )
    # Mid-p (ties counted half): the paper's P(d' > d) leaves ties out and Fisher's method
    # then rejects too often, counting them in too seldom (2.5 % per side at 5 % in the
    # calibration test); half of each keeps the level when emails are independent.
    tie = by_stratum["p_greater"] + by_stratum["p_less"] - 1.0
    by_stratum["p_mid_greater"] = by_stratum["p_greater"] - tie / 2
    by_stratum["p_mid_less"] = by_stratum["p_less"] - tie / 2
    sides = [
        combine_pvalues_across(
            by_stratum, stratum_col, keys, method="fisher", p_col=f"p_mid_{side}"
        )
        .rename(columns={"p_value": f"p_{side}"})
        .drop(columns=["statistic", "method"])
        for side in ("greater", "less")
    ]
    out = sides[0].merge(sides[1].drop(columns="n_strata"), on=keys)
    pooled = by_stratum.groupby(keys, sort=True)[["n", "k"]].sum().reset_index()
    out = pooled.merge(out, on=keys)
    out["rate"] = out["k"] / out["n"]
    out["population_rate"] = out["k"].sum() / out["n"].sum()
    out["d"] = out["rate"] - out["population_rate"]
    out["p_marked"] = out["p_greater"].where(out["d"] > 0, out["p_less"])
    columns = [*keys, "n", "k", "rate", "population_rate", "d", "n_strata"]
    return out[[*columns, "p_greater", "p_less", "p_marked"]]


def cmh_test(
    df: pd.DataFrame,
    stratum_col: str,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    correction: bool = False,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """Cochran–Mantel–Haenszel test of each group against the rest, stratified.

    Each stratum gives a 2x2 table (this group / the rest x positive / not). The pooled odds
    ratio is Mantel–Haenszel's ``sum(a d / t) / sum(b c / t)``; the statistic is
    ``(|sum(a - E a)| - c)^2 / sum(Var a)`` on one degree of freedom, with ``c = 0.5`` when
    ``correction`` is set. Strata with fewer than two answers carry no information and are left
    out; a stratum without the group contributes nothing.

    Returns:
        One row per group: the group columns, ``n_strata`` (strata where the group answered),
        ``odds_ratio``, ``statistic`` and ``p_value``.
    """
    keys = _as_list(group_cols)
    _require_columns(df, [stratum_col, *keys, outcome_col, *([valid] if valid else [])])
    answered, hit = _answered(df, outcome_col, positive, valid, invalid)
    use = answered & df[[stratum_col, *keys]].notna().all(axis=1).to_numpy()
    data = df.loc[use, [stratum_col, *keys]]
    g, groups = _encode(data, keys)
    s, strata = _encode(data, [stratum_col])
    n_groups, n_strata = len(groups), len(strata)
    cell = s * n_groups + g
    size = n_strata * n_groups
    n = np.bincount(cell, minlength=size).reshape(n_strata, n_groups).astype(float)
    a = np.bincount(cell, weights=hit[use], minlength=size).reshape(n_strata, n_groups)
    t, m1 = n.sum(axis=1, keepdims=True), a.sum(axis=1, keepdims=True)
    keep = (t >= 2).ravel()
    n, a, t, m1 = n[keep], a[keep], t[keep], m1[keep]
    b, c = n - a, m1 - a
    d = (t - m1) - b
    expected = (n * m1 / t).sum(axis=0)
    variance = (n * (t - n) * m1 * (t - m1) / (t**2 * (t - 1))).sum(axis=0)
    shift = np.maximum(np.abs(a.sum(axis=0) - expected) - (0.5 if correction else 0.0), 0.0)
    # Complete separation (a group always or never accepted) is a legitimate result: the
    # Mantel-Haenszel odds ratio is then inf or 0. With no variance at all (every answer the
    # same in every stratum) the test is undefined: NaN, kept out of adjustment families.
    with np.errstate(divide="ignore", invalid="ignore"):
        odds_ratio = (a * d / t).sum(axis=0) / (b * c / t).sum(axis=0)
        statistic = np.where(variance > 0, shift**2 / variance, np.nan)
    out = groups.copy()
    out["n_strata"] = (n > 0).sum(axis=0)
    out["odds_ratio"], out["statistic"] = odds_ratio, statistic
    out["p_value"] = stats.chi2.sf(statistic, 1)
    return out


def adjust_family(
    table: pd.DataFrame,
    p_col: str,
    method: str = "holm",
    family_cols: Columns | None = None,
) -> pd.DataFrame:
    """Add ``p_adjusted``: ``p_col`` adjusted over a declared family (``analysis.multiple``).

    Args:
        table: One row per test.
        p_col: The p-values to adjust.
        method: ``holm``, ``bh`` or ``none``.
        family_cols: The whole table is one family when None; otherwise each combination of
            these columns' values is its own family (e.g. ``"role"``: groups within a role).

    Returns:
        A copy of ``table`` with a ``p_adjusted`` column. A test that could not be computed
        (NaN p-value, e.g. a stratum where every answer is the same) is not a member of the
        family and stays NaN.
    """
    _require_columns(table, [p_col, *(_as_list(family_cols) if family_cols else [])])
    out = table.copy()

    def adjusted(p: pd.Series) -> np.ndarray:
        values = p.to_numpy(dtype=float)
        result = np.full(values.shape, np.nan)
        finite = ~np.isnan(values)
        result[finite] = multiple.adjust(values[finite], method)
        return result

    if family_cols is None:
        out["p_adjusted"] = adjusted(out[p_col])
    else:
        out["p_adjusted"] = out.groupby(_as_list(family_cols), sort=False)[p_col].transform(
            adjusted
        )
    return out


def impact_ratios(
    rates_table: pd.DataFrame,
    *,
    threshold: float = 0.8,
    n_simulations: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Impact ratios and the four-fifths rule, beside how often chance alone fails the rule.

    The impact ratio is a group's rate over the highest group rate; the four-fifths rule flags
    ratios below ``threshold``. Under no bias every group's count is Binomial(n_g, pooled rate);
    simulating that shows how often an unbiased model would be flagged at these sample sizes.
    When every rate is 0 all ratios are 1 (nobody is selected less often than anyone else).

    Args:
        rates_table: One row per group with ``n`` and ``k`` (e.g. ``acceptance_rates``); groups
            without answers are ignored.
        threshold: The rule's ratio (0.8 for four-fifths).
        n_simulations: Draws of the no-bias distribution.
        seed: Seed of those draws.

    Returns:
        The rows of ``rates_table`` with ``n > 0``, plus ``rate``, ``impact_ratio``,
        ``four_fifths_flag`` (ratio < threshold), ``p_flag_by_chance`` (share of no-bias draws
        flagging this group) and, the same on every row, ``p_any_flag_by_chance`` (share of
        draws flagging any group) and ``min_ratio_p05`` (5th percentile of the smallest ratio).
    """
    _require_columns(rates_table, ["n", "k"])
    out = rates_table[rates_table["n"] > 0].reset_index(drop=True)
    if out.empty:
        raise ValueError("impact ratios need at least one group with answers")
    n = out["n"].to_numpy(dtype=np.int64)
    k = out["k"].to_numpy(dtype=np.int64)
    out["rate"] = k / n
    out["impact_ratio"] = _ratios(out["rate"].to_numpy()[None, :])[0]
    out["four_fifths_flag"] = out["impact_ratio"] < threshold - _TOL
    rng = np.random.default_rng(seed)
    simulated = _ratios(rng.binomial(n, k.sum() / n.sum(), size=(n_simulations, n.size)) / n)
    flagged = simulated < threshold - _TOL
    out["p_flag_by_chance"] = flagged.mean(axis=0)
    out["p_any_flag_by_chance"] = float(flagged.any(axis=1).mean())
    out["min_ratio_p05"] = float(np.quantile(simulated.min(axis=1), 0.05))
    return out


def impact_ratios_by_stratum(
    df: pd.DataFrame,
    stratum_col: str,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    threshold: float = 0.8,
    n_simulations: int = 10_000,
    seed: int = 0,
    invalid: Sequence[object] = INVALID,
    unit_col: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`acceptance_rates` and :func:`impact_ratios` within each stratum (e.g. job).

    With ``unit_col`` the chances of a flag relabel whole units within each stratum
    (:func:`unit_flag_chance`), as a unit answering several times in a stratum (templates,
    replicates) makes the binomial chance far too small.

    Returns:
        ``(rates, ratios)``, each with ``stratum_col`` first; a stratum without any valid
        answer has rates (``n = 0``) but no impact ratios.
    """
    _require_columns(df, [stratum_col])
    rates, ratios = [], []
    for stratum, part in df.groupby(stratum_col, sort=True):
        table = acceptance_rates(part, group_cols, outcome_col, positive, invalid=invalid)
        rates.append(table.assign(**{stratum_col: stratum}))
        if (table["n"] > 0).any():
            found = impact_ratios(
                table, threshold=threshold, n_simulations=n_simulations, seed=seed
            )
            if unit_col:
                found = unit_flag_chance(
                    found, part, group_cols, outcome_col, positive, unit_col,
                    threshold=threshold, n_permutations=n_simulations, seed=seed, invalid=invalid,
                )  # fmt: skip
            ratios.append(found.assign(**{stratum_col: stratum}))

    def first(tables: list[pd.DataFrame]) -> pd.DataFrame:
        if not tables:
            return pd.DataFrame(columns=[stratum_col])
        out = pd.concat(tables, ignore_index=True)
        return out[[stratum_col, *[c for c in out.columns if c != stratum_col]]]

    return first(rates), first(ratios)


def _ratios(rates: np.ndarray) -> np.ndarray:
    """Each row's rates over that row's maximum (1 where the maximum is 0)."""
    top = rates.max(axis=1, keepdims=True)
    return np.divide(rates, top, out=np.ones_like(rates, dtype=float), where=top > 0)


def _group_labels(groups: pd.DataFrame) -> list[str]:
    return [" ".join(map(str, row)) for row in groups.itertuples(index=False)]


def rate_breakdown(
    df: pd.DataFrame,
    row_col: str,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    *,
    row_order: Sequence[object] | None = None,
    tests: pd.DataFrame | None = None,
    p_col: str = "p_two_sided",
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """A wide table of rates in % like An et al.'s Tables 1–4: one row per level of ``row_col``.

    For the paper's Table 1 put a subset label in ``row_col`` (e.g. concatenate the 7-role rows
    labelled "7 roles" with all rows labelled "all 41"); Table 2 uses the education level,
    Table 3 the qualification level, Table 4 the role.

    Significance markers come from ``tests`` (one row per (``row_col`` level, group), holding
    ``p_col``: per-row permutation tests, or combined p-values with the row label added):
    ``"†"`` when p < 0.01, ``"*"`` when p < 0.05, followed by ``"+"`` when the group's rate is
    above the row's average and ``"-"`` when below (the paper's blue and red); empty otherwise.

    Args:
        df: One row per decision.
        row_col: Column whose levels become the rows.
        group_cols: Column(s) defining the groups (the columns of the table).
        outcome_col: Column holding the decision.
        positive: The decision whose rate is shown.
        row_order: Rows to show, in this order (levels not listed are left out).
        tests: Optional tests table for the markers.
        p_col: Column of ``tests`` holding the p-value behind the markers.
        valid: Optional boolean column; rows where it is false are excluded.
        invalid: Outcome values that mark an unusable answer (excluded).

    Returns:
        ``row_col``, one column per group labelled by its values joined with spaces (e.g.
        ``"White female"``; rate in %), ``max_difference`` (highest minus lowest group rate,
        percentage points), ``average`` (the row's pooled rate in %), ``n`` (valid answers in
        the row) and, with ``tests``, one ``"<label> sig"`` marker column per group.
    """
    keys = _as_list(group_cols)
    rates = acceptance_rates(
        df, [row_col, *keys], outcome_col, positive, valid=valid, invalid=invalid
    )
    rates = rates[rates["n"] > 0]
    groups = rates[keys].drop_duplicates().sort_values(keys).reset_index(drop=True)
    labels = _group_labels(groups)
    label_of = dict(zip(map(tuple, groups.to_numpy()), labels, strict=True))
    rates = rates.assign(_label=[label_of[tuple(r)] for r in rates[keys].to_numpy()])
    wide = rates.pivot(index=row_col, columns="_label", values="rate")[labels] * 100
    totals = rates.groupby(row_col)[["n", "k"]].sum()
    if row_order is not None:
        unknown = [r for r in row_order if r not in wide.index]
        if unknown:
            raise ValueError(f"row_order levels {unknown} not found in `{row_col}`")
        wide, totals = wide.loc[list(row_order)], totals.loc[list(row_order)]
    wide["max_difference"] = wide[labels].max(axis=1) - wide[labels].min(axis=1)
    wide["average"] = 100 * totals["k"] / totals["n"]
    wide["n"] = totals["n"]
    if tests is not None:
        _require_columns(tests, [row_col, *keys, p_col])
        marked = tests.assign(_label=[label_of.get(tuple(r)) for r in tests[keys].to_numpy()])
        p = marked.pivot_table(index=row_col, columns="_label", values=p_col, aggfunc="first")
        p = p.reindex(index=wide.index, columns=labels)
        for label in labels:
            level = np.where(p[label] < 0.01, "†", np.where(p[label] < 0.05, "*", ""))
            side = np.where(wide[label] > wide["average"], "+", "-")
            wide[f"{label} sig"] = np.where(level != "", np.char.add(level, side), "")
    wide.columns.name = None
    return wide.reset_index()


def disparity_report(
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    *,
    positive: object,
    unit_col: str | None = None,
    stratum_col: str | None = None,
    reference: Sequence[object] | None = None,
    n_permutations: int = 5000,
    adjust: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
    threshold: float = 0.8,
    n_simulations: int = 10_000,
    require_positive: bool = True,
) -> dict[str, pd.DataFrame | float | list[str]]:
    """Every disparity statistic of this module for one decisions table.

    Which tests run depends on what is exchangeable, and the report says so in ``notes``:

    * With ``unit_col`` (names), the DPD and every group test permute whole units; with strata,
      ``joint`` relabels each unit once for all strata. Fisher, Stouffer and CMH assume
      independent strata, so they are computed only when no unit answers in two strata.
    * Without ``unit_col`` answers are the units: the DPD's binomial null and the exact
      hypergeometric tests apply, and strata are independent by that assumption.

    Families for ``adjust`` (``holm``, ``bh`` or ``none``), declared here: ``permutation``
    adjusts ``p_two_sided`` over the groups; ``joint`` adjusts ``p_two_sided`` over the groups
    and both one-sided p-values together (the paper's above / below marks);
    ``permutation_by_stratum`` over every (stratum, group) test; ``combined`` over groups x both
    one-sided alternatives, separately for Fisher and Stouffer; ``cmh`` over the groups;
    ``reference`` over the groups compared.

    Args:
        df: One row per decision.
        group_cols: Column(s) defining the groups.
        outcome_col: Column holding the decision.
        positive: The decision whose rate is analysed.
        unit_col: Column naming the exchangeable unit (e.g. the first name); permutation tests
            use whole units when given, single rows (exact hypergeometric) otherwise.
        stratum_col: Optional stratum (e.g. role): adds per-stratum tests, the joint test
            across strata, and (independent strata only) Fisher, Stouffer and CMH.
        reference: Group values (one per group column) to compare every other group with,
            besides the comparison with the population.
        n_permutations: Monte Carlo permutations (per stratum; more where an adjusted p-value
            needs them, see :func:`permutation_vs_population`).
        adjust: Multiplicity adjustment.
        alpha: Level of the tests (the DPD flag, reachability of adjusted p-values).
        seed: Seed of every random draw.
        valid: Optional boolean column; rows where it is false are excluded.
        invalid: Outcome values that mark an unusable answer (excluded and counted).
        threshold: Impact-ratio threshold (four-fifths).
        n_simulations: Draws for the parity and impact-ratio chance distributions.
        require_positive: Refuse a table where ``positive`` never occurs: with labels typed by
            hand that is nearly always a misspelt label. A study whose labels are fixed passes
            False, because a model that never accepts anyone is a finding (every rate 0).

    Returns:
        ``rates`` (``acceptance_rates``), ``population_rate``, ``n_valid``, ``n_excluded``,
        ``dpd``, ``dpd_p_value``, ``dpd_threshold`` and ``dpd_test`` (which null),
        ``test_unit`` and ``test_units`` (what every test relabels, and how many answered),
        ``impact_ratios``, ``p_any_flag_by_chance``, ``min_ratio_p05``, ``flag_chance_unit``
        (what the flag chances resample: ``unit_col``'s units via :func:`unit_flag_chance`, or
        ``answer``: binomial draws), ``permutation``,
        ``notes`` (what each test assumes, and families that cannot reach significance); with
        a stratum also ``permutation_by_stratum`` and ``joint``, and with independent strata
        ``combined`` (its columns plus ``alternative`` and ``p_adjusted``) and ``cmh``; with a
        reference also ``reference``.

    Raises:
        ValueError: A named column is missing, a unit occurs in two groups, or (with
            ``require_positive``) ``positive`` never occurs in the outcome.
    """
    keys = _as_list(group_cols)
    named = [
        outcome_col,
        *([unit_col] if unit_col else []),
        *([stratum_col] if stratum_col else []),
    ]
    _require_columns(df, [*keys, *named, *([valid] if valid else [])])
    if require_positive and not (df[outcome_col] == positive).any():
        _refuse_absent_positive(df, outcome_col, positive)
    common = {"valid": valid, "invalid": invalid}
    asked = _Asked(df, keys, outcome_col, positive, unit_col, stratum_col, common)
    rates = acceptance_rates(df, keys, outcome_col, positive, **common)
    answered = rates[rates["n"] > 0]
    notes: list[str] = []
    report: dict[str, pd.DataFrame | float | list[str]] = {
        "rates": rates,
        "population_rate": float(rates["population_rate"].iloc[0]) if len(rates) else np.nan,
        "n_valid": int(rates["n"].sum()),
        "n_excluded": int(rates["n_excluded"].sum()),
        "dpd": demographic_parity_difference(answered["rate"]) if len(answered) else np.nan,
        "notes": notes,
    }
    if answered.empty:
        return _nothing_to_test(report, notes)
    report.update(_tested_units(asked))
    if len(answered) >= 2:
        _dpd_test(report, notes, asked, answered, alpha, n_simulations, seed)
    report.update(_impact_ratio_summary(rates, threshold, n_simulations, seed, asked))
    perm = {
        "unit": "name" if unit_col else "email",
        "unit_col": unit_col or "name",
        "n_permutations": n_permutations,
        "seed": seed,
        "alpha": alpha,
        **common,
    }
    overall = permutation_vs_population(df, keys, outcome_col, positive, **perm)
    report["permutation"] = adjust_family(overall, "p_two_sided", adjust)
    families = {"permutation": overall}
    joint = {"unit_col": unit_col, "n_permutations": n_permutations, "seed": seed, **common}
    if stratum_col:
        _stratum_tests(report, families, notes, asked, (perm, joint), adjust)
    if reference is not None:
        versus = joint_vs_population(
            df, keys, outcome_col, positive, stratum_col=stratum_col, reference=reference, **joint
        )
        report["reference"] = adjust_family(versus, "p_two_sided", adjust)
        families["reference"] = versus
    if "joint" in report:
        # Both one-sided p-values form the family; each can reach half the two-sided floor.
        one_sided = report["joint"].assign(smallest_p=report["joint"]["smallest_p"] / 2)
        families["joint"] = pd.concat([one_sided] * 2)
    notes.extend(unreachable_families(families, alpha))
    return report


def _refuse_absent_positive(df: pd.DataFrame, outcome_col: str, positive: object) -> NoReturn:
    """Refuse a table where ``positive`` never occurs: nearly always a misspelt label."""
    seen = sorted(map(str, df[outcome_col].dropna().unique()))
    shown = ", ".join(seen[:20]) + (" ..." if len(seen) > 20 else "")
    raise ValueError(
        f"outcome column `{outcome_col}` never takes the positive value {positive!r}; "
        f"values seen: {shown or 'none'}"
    )


def _nothing_to_test(
    report: dict[str, pd.DataFrame | float | list[str]], notes: list[str]
) -> dict[str, pd.DataFrame | float | list[str]]:
    """The report of a table without one valid answer: empty tests, and a note saying why."""
    # Every answer invalid is a finding (the model never wrote a usable decision), not an
    # error: the report says so and tests nothing.
    notes.append("no group has a valid answer: nothing to test")
    empty = pd.DataFrame()
    report.update(
        impact_ratios=empty,
        p_any_flag_by_chance=np.nan,
        min_ratio_p05=np.nan,
        permutation=empty,
    )
    return report


def _tested_units(asked: _Asked) -> dict[str, str | int]:
    """The unit every test of the report relabels and how many of them gave a valid answer:
    the names (``unit_col``) or, without one, each answer (``email``)."""
    df, outcome = asked.df, asked.df[asked.outcome_col]
    valid = outcome.notna() & ~outcome.isin(list(asked.common["invalid"]))
    if asked.common["valid"]:
        valid &= df[asked.common["valid"]].astype("boolean").fillna(False)
    if asked.unit_col is None:
        return {"test_unit": "email", "test_units": int(valid.sum())}
    return {"test_unit": asked.unit_col, "test_units": int(df.loc[valid, asked.unit_col].nunique())}


@dataclass(frozen=True)
class _Asked:
    """What :func:`disparity_report` was asked about, as its tests need it."""

    df: pd.DataFrame
    keys: list[str]
    outcome_col: str
    positive: object
    unit_col: str | None
    stratum_col: str | None
    common: dict  # the valid / invalid arguments every rate shares


def _dpd_test(
    report: dict[str, pd.DataFrame | float | list[str]],
    notes: list[str],
    asked: _Asked,
    answered: pd.DataFrame,
    alpha: float,
    n_simulations: int,
    seed: int,
) -> None:
    """The DPD's test into the report: permuting whole units when there is a unit column,
    under the binomial null (answers independent) otherwise."""
    df, keys, outcome_col, positive = asked.df, asked.keys, asked.outcome_col, asked.positive
    unit_col, stratum_col, common = asked.unit_col, asked.stratum_col, asked.common
    if unit_col:
        parity = _unit_parity(
            df,
            keys,
            outcome_col,
            positive,
            unit_col,
            stratum_col,
            common,
            alpha,
            n_simulations,
            seed,
        )
        if parity is None:
            notes.append(f"fewer than two groups have a {unit_col}: the DPD is not tested")
        else:
            # The statistic tested: over rows with a unit (all rows in a built study).
            report["dpd"] = parity.dpd
            report["dpd_test"] = f"permutation of {unit_col} labels"
    else:
        parity = parity_test(
            answered["n"], answered["k"], alpha=alpha, n_simulations=n_simulations, seed=seed
        )
        report["dpd_test"] = "binomial null (answers independent)"
    if parity is not None:
        report["dpd_p_value"], report["dpd_threshold"] = parity.p_value, parity.threshold


def _impact_ratio_summary(
    rates: pd.DataFrame, threshold: float, n_simulations: int, seed: int, asked: _Asked
) -> dict[str, pd.DataFrame | float | list[str] | str]:
    """Impact ratios and the chance an unbiased decision-maker is flagged for some group: with
    a unit, by relabelling whole units (:func:`unit_flag_chance`), else binomial draws."""
    report: dict[str, pd.DataFrame | float | list[str] | str] = {}
    ratios = impact_ratios(rates, threshold=threshold, n_simulations=n_simulations, seed=seed)
    if asked.unit_col:
        ratios = unit_flag_chance(
            ratios,
            asked.df,
            asked.keys,
            asked.outcome_col,
            asked.positive,
            asked.unit_col,
            stratum_col=asked.stratum_col,
            threshold=threshold,
            n_permutations=n_simulations,
            seed=seed,
            **asked.common,
        )
    report["impact_ratios"] = ratios
    report["flag_chance_unit"] = (
        str(ratios["flag_chance_unit"].iloc[0]) if asked.unit_col else "answer"
    )
    report["p_any_flag_by_chance"] = float(ratios["p_any_flag_by_chance"].iloc[0])
    report["min_ratio_p05"] = float(ratios["min_ratio_p05"].iloc[0])
    return report


def _stratum_tests(
    report: dict[str, pd.DataFrame | float | list[str]],
    families: dict[str, pd.DataFrame],
    notes: list[str],
    asked: _Asked,
    options: tuple[dict, dict],
    adjust: str,
) -> None:
    """Per-stratum and joint tests into the report, and Fisher, Stouffer and CMH when no unit
    answers in two strata."""
    df, keys, outcome_col, positive = asked.df, asked.keys, asked.outcome_col, asked.positive
    unit_col, stratum_col, common = asked.unit_col, asked.stratum_col, asked.common
    assert stratum_col is not None
    perm, joint = options
    by_stratum = permutation_vs_population(
        df, keys, outcome_col, positive, stratum_col=stratum_col, **perm
    )
    report["permutation_by_stratum"] = adjust_family(by_stratum, "p_two_sided", adjust)
    families["permutation_by_stratum"] = by_stratum
    across = joint_vs_population(df, keys, outcome_col, positive, stratum_col=stratum_col, **joint)
    report["joint"] = adjust_joint(across, adjust)
    recurring = units_recurring(df, unit_col, stratum_col) if unit_col else 0
    if recurring:
        notes.append(
            f"{recurring} {unit_col} values answer in several {stratum_col} strata, so the "
            "strata are not independent: Fisher, Stouffer and CMH are left out; the joint "
            f"test relabels each {unit_col} once for all strata."
        )
    else:
        combined = pd.concat(
            [
                combine_pvalues_across(
                    by_stratum, stratum_col, keys, method=how, p_col=f"p_{side}"
                ).assign(alternative=side)
                for how in ("fisher", "stouffer")
                for side in ("greater", "less")
            ],
            ignore_index=True,
        )
        report["combined"] = adjust_family(combined, "p_value", adjust, family_cols="method")
        cmh = cmh_test(df, stratum_col, keys, outcome_col, positive, **common)
        report["cmh"] = adjust_family(cmh, "p_value", adjust)
        notes.append(
            "Fisher, Stouffer and CMH combine strata as independent"
            + (
                f" (no {unit_col} answers in two strata)."
                if unit_col
                else ": answers are the units, as declared (no unit column)."
            )
        )


def _unit_parity(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    positive: object,
    unit_col: str,
    stratum_col: str | None,
    common: dict,
    alpha: float,
    n_permutations: int,
    seed: int,
) -> ParityTest | None:
    """The DPD test with units as the draws, relabelled within same-strata blocks (None when
    fewer than two groups have a unit)."""
    sums = _unit_sums(df, keys, outcome_col, positive, unit_col, stratum_col, common)
    if sums is None:
        return None
    return permutation.parity_permutation_test(
        sums.n,
        sums.k,
        sums.group,
        block_u=sums.block,
        alpha=alpha,
        n_permutations=n_permutations,
        seed=seed,
    )


@dataclass(frozen=True)
class _UnitSums:
    """Answers ``n`` and hits ``k`` per unit, its group code (indexing ``groups``) and block."""

    n: np.ndarray
    k: np.ndarray
    group: np.ndarray
    block: np.ndarray
    groups: pd.DataFrame


def _unit_sums(
    df: pd.DataFrame,
    keys: list[str],
    outcome_col: str,
    positive: object,
    unit_col: str,
    stratum_col: str | None,
    common: dict,
) -> _UnitSums | None:
    """Each unit's valid answers and hits over every stratum, with the blocks of units asked
    in the same strata (None when fewer than two groups have a unit)."""
    answered, hit = _answered(df, outcome_col, positive, common["valid"], common["invalid"])
    extra = [unit_col, *([stratum_col] if stratum_col else [])]
    use = answered & df[keys + extra].notna().all(axis=1).to_numpy()
    data = df.loc[use, list(dict.fromkeys(keys + extra))]
    g, groups = _encode(data, keys)
    if len(groups) < 2:
        return None
    s = _encode(data, [stratum_col])[0] if stratum_col else np.zeros(len(data), dtype=np.int64)
    cell_unit, _, n, k, group_of = permutation.unit_cells(
        data, unit_col, g, s, hit[use].astype(np.int64)
    )
    units = group_of.size
    return _UnitSums(
        n=np.bincount(cell_unit, weights=n, minlength=units).astype(np.int64),
        k=np.bincount(cell_unit, weights=k, minlength=units).astype(np.int64),
        group=group_of,
        block=permutation.unit_blocks(
            data, unit_col, _asked_blocks(df, keys, unit_col, stratum_col) if stratum_col else None
        ),
        groups=groups,
    )


def flag_chance_basis(unit: str | None) -> str:
    """What a printed four-fifths chance resampled (``flag_chance_unit`` of a report)."""
    if not unit or unit == "answer":
        # Conditional on independence: with a unit that repeats (a name deciding 10 times) it
        # printed 2.7 % where 15 % of null tables flagged.
        return "answers as independent binomials: conditional on independent answers"
    return f"relabelling whole units: {unit}"


def unit_flag_chance(
    ratios: pd.DataFrame,
    df: pd.DataFrame,
    group_cols: Columns,
    outcome_col: str,
    positive: object,
    unit_col: str,
    *,
    stratum_col: str | None = None,
    threshold: float = 0.8,
    n_permutations: int = 10_000,
    seed: int = 0,
    valid: str | None = None,
    invalid: Sequence[object] = INVALID,
) -> pd.DataFrame:
    """The four-fifths "chance of a flag" of :func:`impact_ratios` with units as the draws.

    The binomial draws of :func:`impact_ratios` treat answers as independent. When a unit (a
    name, a persona with its replicates) answers many times with its own propensity, the group
    rates vary far more than binomially: a flag chance of 0.01 % was printed where 32.5 % of
    no-bias data sets were flagged. Here the units' group labels are relabelled whole (within
    blocks of units asked in the same strata), each relabelling's group rates give impact
    ratios, and the chances are the shares of relabellings that flag. Averaged over no-bias
    data sets this is the rate at which they are flagged (units exchangeable under the null).

    Returns:
        A copy of ``ratios`` whose ``p_flag_by_chance``, ``p_any_flag_by_chance`` and
        ``min_ratio_p05`` come from the relabellings, with ``flag_chance_unit`` (``unit_col``)
        and ``flag_chance_units`` (how many units). Unchanged, with the unit ``"answer"``, when
        fewer than two groups have a unit.
    """
    keys = _as_list(group_cols)
    common = {"valid": valid, "invalid": invalid}
    sums = _unit_sums(df, keys, outcome_col, positive, unit_col, stratum_col, common)
    out = ratios.copy()
    if sums is None:
        return out.assign(flag_chance_unit="answer", flag_chance_units=int(out["n"].sum()))
    rates = permutation.rate_permutation_null(
        sums.n, sums.k, sums.group, block_u=sums.block, n_permutations=n_permutations, seed=seed
    )
    # Every unit has an answer and a relabelling keeps each group's units: no rate is NaN.
    simulated = _ratios(rates)
    flagged = simulated < threshold - _TOL
    row = out[keys].merge(sums.groups.reset_index(), on=keys, how="left")["index"]
    found = row.notna().to_numpy()
    chance = np.full(len(out), np.nan)
    chance[found] = flagged.mean(axis=0)[row[found].astype(int)]
    out["p_flag_by_chance"] = chance
    out["p_any_flag_by_chance"] = float(flagged.any(axis=1).mean())
    out["min_ratio_p05"] = float(np.quantile(simulated.min(axis=1), 0.05))
    return out.assign(flag_chance_unit=unit_col, flag_chance_units=int(sums.group.size))
