"""Stage-by-stage disparities of a selection pipeline (apply, screen, shortlist, hire).

Applicants write letters; a screener reads pools of letters and shortlists some; a manager reads
the shortlist and picks one. A disparity at the end can come from any stage, so this module
reports every stage separately and shows how the stages compound:

* :func:`stage_table`: per stage and group, who entered and who advanced, impact ratios, the
  DPD and its test of "advancement is independent of group". Within a pool exactly ``k``
  candidates advance, so pool members are not independent: the permutation test shuffles group
  labels within each pool, keeping every pool's number advancing and its size;
* :func:`compounding`: the end-to-end impact ratio as the product of the stage ratios
  (:func:`stage_and_compounding_tables` gives both tables of a group from one check of the
  candidates);
* :func:`position_table`, :func:`first_position_test`, :func:`choice_rates`: whether a reader
  favours a position in the list shown (a position effect would masquerade as a group effect
  wherever groups are not shown in balanced positions).

Inputs are plain DataFrames with these columns:

* candidates: one row per candidate per stage entered: ``candidate`` (id), ``stage``, one
  column per persona attribute (e.g. ``race``, ``gender``; each call analyses one, so combine
  them into one column for intersections), ``advanced`` (bool) and, optionally, ``cluster``
  (the pool whose evaluation decided the advancement; missing when each candidate was judged
  alone) and, for the stages passed as ``pairs``, ``author`` (whose document was shown: a pair
  shows each of its two authors once in each order, one row per showing) and, where one
  person applies several times (a labour market's cycles), ``person``: then the test's unit is
  the person (see :func:`stage_table`);
* readings: one row per (evaluation, shown position): ``evaluation`` (id), ``position``
  (1-based), ``size`` (documents shown in that evaluation), ``k`` (how many the reader had to
  pick), ``chosen`` (bool) and the attribute columns.

Counterfactual name swaps (one document read under two names) are in ``analysis.counterfactual``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biasim.analysis.stats import multiple
from biasim.analysis.stats.parity import dpd_from_counts

CANDIDATE, STAGE, ADVANCED, CLUSTER = "candidate", "stage", "advanced", "cluster"
#: Optional column: who applied, where one person applies more than once (a market's cycles).
PERSON = "person"
AUTHOR = "author"
READING_COLUMNS: tuple[str, ...] = ("evaluation", "position", "size", "k", "chosen")
# Rates are fractions k / n; compare with a tolerance so that exact ties do not flip.
_TOL = 1e-12
# Pools up to this size are shuffled by the vectorised sampler below (its loop runs once per
# position in the largest pool); bigger blocks, such as all candidates judged alone, are drawn
# whole from the multivariate hypergeometric distribution instead.
_SMALL_BLOCK = 64
# Blocks whose outcomes (the group counts among their picks) are at most this many, and fewer
# than the rows of the blocks of their kind, are drawn per kind (composition and picks) instead
# of one by one; see `_by_kind`.
_MAX_OUTCOMES = 512
# What one outcome of a kind costs per permutation (a binomial draw) in rows of the selection
# walk (a uniform each, vectorised): measured 4-16 at 100,000 candidates in pools of 3 and 8
# over 3, 6 and 12 groups.
_OUTCOME_COST = 16
# Elements of a (permutations x pools) working array handled at once: 4 Mi float32 = 16 MiB.
_CHUNK_ELEMENTS = 1 << 22


def _require_columns(df: pd.DataFrame, cols: Sequence[str]) -> None:
    missing = [c for c in dict.fromkeys(cols) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; available columns: {list(df.columns)}")


def _as_bool(values: pd.Series, name: str) -> np.ndarray:
    """A boolean column as a bool array; a missing or non-boolean value is an error."""
    if values.isna().any():
        raise ValueError(f"`{name}` has missing values; every row needs True or False")
    if values.dtype != bool and not values.isin([0, 1]).all():
        bad = values[~values.isin([0, 1])].iloc[0]
        raise ValueError(f"`{name}` must be boolean (or 0/1); found {bad!r}")
    return values.to_numpy().astype(bool)


def _adjust_finite(p_values: np.ndarray, method: str) -> np.ndarray:
    """Adjust the finite p-values as one family; an undefined test (NaN) is no member."""
    out = np.full(p_values.shape, np.nan)
    finite = ~np.isnan(p_values)
    out[finite] = multiple.adjust(p_values[finite], method)
    return out


def _check_candidates(
    candidates: pd.DataFrame, stage: np.ndarray, g: np.ndarray, group: str
) -> np.ndarray:
    """Each row's candidate as a code; a candidate with two rows at one stage, or whose group
    changes between stages, is refused (over the codes: on string ids pandas' own checks took a
    tenth of a second each)."""
    who = pd.factorize(candidates[CANDIDATE])[0]
    twice = pd.Series(who * (int(stage.max(initial=0)) + 1) + stage).duplicated().to_numpy()
    if twice.any():
        dup = candidates.iloc[int(np.flatnonzero(twice)[0])]
        raise ValueError(f"candidate {dup[CANDIDATE]!r} has several rows at stage {dup[STAGE]!r}")
    lowest = np.full(int(who.max(initial=-1)) + 1, np.iinfo(np.int64).max)
    highest = np.full_like(lowest, -1)
    np.minimum.at(lowest, who, g)
    np.maximum.at(highest, who, g)
    if (lowest != highest).any():
        raise ValueError(f"a candidate changes `{group}` between stages")
    return who


class _Pipeline:
    """Validated candidates table: per-row stage and group codes, and the (stage, group) counts."""

    def __init__(
        self,
        candidates: pd.DataFrame,
        stages: Sequence[str],
        group: str,
        values: Sequence[object] | None = None,
    ) -> None:
        if isinstance(stages, str) or len(stages) == 0:
            raise ValueError("stages must be a non-empty list of stage names in pipeline order")
        self.stages = list(stages)
        if len(set(self.stages)) != len(self.stages):
            raise ValueError(f"stages repeat a name: {self.stages}")
        _require_columns(candidates, [CANDIDATE, STAGE, group, ADVANCED])
        # Stages and groups are read once each, as codes (every pass over 100,000 string
        # values costs milliseconds, and this runs per group for every table).
        stage_code, stage_names = pd.factorize(candidates[STAGE])
        unknown = sorted(map(str, set(stage_names) - set(self.stages)))
        if unknown or (stage_code < 0).any():
            # A stage left out of the list would silently drop its candidates.
            raise ValueError(f"stage values not in `stages`: {unknown or ['<missing>']}")
        group_code, group_names = pd.factorize(candidates[group])
        if (group_code < 0).any():
            raise ValueError(f"`{group}` has missing values; every candidate needs a group")
        if candidates[CANDIDATE].isna().any():
            raise ValueError(f"`{CANDIDATE}` has missing values")
        self.group = group
        self.stage = pd.Index(self.stages).get_indexer(stage_names)[stage_code].astype(np.int64)
        # Groups known from elsewhere (the writers) stay in the tables with 0 entered, also
        # when none of them reached any stage.
        self.values = pd.Index(sorted(set(group_names) | set(values or ())))
        self.g = self.values.get_indexer(group_names)[group_code].astype(np.int64)
        self.who = _check_candidates(candidates, self.stage, self.g, group)
        self.advanced = _as_bool(candidates[ADVANCED], ADVANCED)
        if CLUSTER in candidates.columns:
            self.cluster = candidates[CLUSTER].to_numpy(dtype=object)
        else:
            self.cluster = np.full(len(candidates), None, dtype=object)
        self.person: np.ndarray | None = None
        if PERSON in candidates.columns:
            if candidates[PERSON].isna().any():
                raise ValueError(f"`{PERSON}` has missing values")
            self.person = pd.factorize(candidates[PERSON])[0]
        n_s, n_g = len(self.stages), len(self.values)
        cell = self.stage * n_g + self.g
        self.entered = np.bincount(cell, minlength=n_s * n_g).reshape(n_s, n_g)
        self.passed = np.bincount(cell[self.advanced], minlength=n_s * n_g).reshape(n_s, n_g)

    def rates(self) -> np.ndarray:
        """Advanced / entered per (stage, group); NaN where nobody of the group entered."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.passed / self.entered

    def nested(self) -> bool:
        """Whether each stage's entrants are exactly the previous stage's advanced candidates."""
        for s in range(1, len(self.stages)):
            entrants = np.unique(self.who[self.stage == s])
            advanced = np.unique(self.who[(self.stage == s - 1) & self.advanced])
            if not np.array_equal(entrants, advanced):
                return False
        return True


def stage_table(
    candidates: pd.DataFrame,
    stages: Sequence[str],
    group: str,
    *,
    n_permutations: int = 2000,
    seed: int = 0,
    adjust: str = "holm",
    method: str = "auto",
    threshold: float = 0.8,
    values: Sequence[object] | None = None,
    pairs: Sequence[str] = (),
) -> pd.DataFrame:
    """Who entered and who advanced at each stage, per group, with a test per stage.

    The test of each stage has H0 "advancement is independent of group" and the DPD (highest
    minus lowest group rate among groups that entered) as statistic:

    * ``permutation_within_pool``: group labels are permuted within each pool (``cluster``),
      so every pool keeps its size, how many of each group it read and how many advanced; only
      who advanced is left to chance. Candidates judged alone (no pool, or a pool of one)
      together form one more block. Blocks whose outcome cannot change (nobody or everybody
      advances, or one group only) stay fixed. Permuting labels within a pool is the same as
      advancing a uniformly random subset of the observed size; that is how it is drawn,
      vectorised over permutations: blocks of one kind (composition and picks) together, as
      multinomial counts of the kind's few outcomes; blocks with too many outcomes one by one
      (each large block's group counts straight from the multivariate hypergeometric
      distribution);
    * ``permutation``: the same with the whole stage as one block (nobody judged in a pool);
    * ``concordant_pairs`` (the stages in ``pairs``): the unit is the pair. Each pair shows its
      two authors in both orders; both showings of an author share its document's quality, so
      they are not independent and shuffling labels among a pair's four showings rejects a
      true null too often (16 % under applicant-quality heterogeneity). Instead whole authors
      swap group labels within their pair: a pair split 1-1 (the position decided) or whose
      authors share a group never changes the statistic, and a pair picked alike in both
      orders gives its picks to either group with probability 1/2 -- the sign test on
      concordant pairs (``analysis.association.consistent_pair_test``) with the DPD as
      statistic, so that it also serves groups the pairs do not differ in;
    * ``permutation_of_persons`` (``person`` given: one person applied several times, as in a
      labour market whose rejected applicants apply again): whole persons swap group labels,
      each person's applications moving together. Labels shuffled within a pool would treat a
      person's repeated applications as independent draws of the group, though a reader's
      liking of the person (name, letter) comes back with every application: under person-
      level differences that test rejects a true null too often (tests/unit/analysis/
      test_pipeline_persons.py). The null is that the group has no effect on who applies, is
      read or advances, so the persons' labels are exchangeable;
    * ``fisher_exact``: with ``method="auto"``, nobody judged in a pool and exactly two groups
      that entered, Fisher's exact two-sided test of the 2 x 2 table (no Monte Carlo error);
    * ``none``: fewer than two groups entered; p is NaN and the stage is no family member.

    Monte Carlo p-values are ``(1 + #{T' >= T - 1e-12}) / (1 + n_permutations)``, counting the
    observed labelling as one permutation. ``p_adjusted`` adjusts the stages' p-values as one
    family.

    Args:
        candidates: One row per candidate per stage entered (see the module docstring).
        stages: The stage names in pipeline order; every ``stage`` value must be listed.
        group: The group column, e.g. ``"race"`` (combine columns into one for intersections).
        n_permutations: Monte Carlo permutations per stage.
        seed: Seed of the permutations (each stage gets its own spawned stream).
        adjust: ``holm``, ``bh`` or ``none`` (``analysis.multiple``).
        method: ``"auto"`` (Fisher where it applies) or ``"permutation"`` (always permute).
        threshold: Impact-ratio threshold of the four-fifths rule.
        values: Group values to report besides those in ``candidates`` (0 entered where
            absent), e.g. every writer's group when no evaluation of a stage was valid.
        pairs: Stages read as pairs shown in both orders (``cluster`` the pair, ``author``
            needed): tested by ``concordant_pairs``.

    Returns:
        One row per (stage, group value), stages in pipeline order and values sorted: ``stage``,
        ``group`` (the column name), ``value``, ``entered``, ``advanced``, ``rate``
        (advanced / entered; NaN when nobody entered), ``cumulative_rate`` (advanced here / the
        group's entrants at the first stage), ``impact_ratio`` (rate over the stage's highest
        rate; 1 when every rate is 0), ``four_fifths`` (ratio below ``threshold``), and, the same
        on every row of a stage, ``dpd``, ``test``, ``n_permutations`` (0 unless permuted),
        ``unit`` and ``n_units`` (what the test relabels: ``pool``, ``pair``, ``person`` or
        ``candidate``, and how many), ``p_value`` and ``p_adjusted``.

    Raises:
        ValueError: A column is missing, a stage is not listed, a group, candidate or advanced
            value is missing, a candidate has two rows at a stage or changes group, or an
            argument is invalid.
    """
    options = _StageOptions(n_permutations, seed, adjust, method, threshold, tuple(pairs))
    return _stage_table(_Pipeline(candidates, stages, group, values), candidates, options)


def stage_and_compounding_tables(
    candidates: pd.DataFrame,
    stages: Sequence[str],
    group: str,
    *,
    n_permutations: int = 2000,
    seed: int = 0,
    adjust: str = "holm",
    values: Sequence[object] | None = None,
    pairs: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`stage_table` and :func:`compounding` of one group (arguments as theirs), from
    one check of ``candidates``: each checks the whole table, twice per group otherwise."""
    options = _StageOptions(n_permutations, seed, adjust, "auto", 0.8, tuple(pairs))
    pipe = _Pipeline(candidates, stages, group, values)
    return _stage_table(pipe, candidates, options), _compounding(pipe)


@dataclass(frozen=True)
class _StageOptions:
    """How :func:`stage_table` tests and flags each stage (checked when made)."""

    n_permutations: int
    seed: int
    adjust: str
    method: str
    threshold: float
    pairs: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.method not in ("auto", "permutation"):
            raise ValueError(f"unknown method `{self.method}`; use auto or permutation")
        if self.n_permutations < 1:
            raise ValueError("n_permutations must be at least 1")


def _stage_table(pipe: _Pipeline, candidates: pd.DataFrame, opts: _StageOptions) -> pd.DataFrame:
    rates = pipe.rates()
    n_s, n_g = rates.shape
    streams = np.random.SeedSequence(opts.seed).spawn(n_s)
    dpd = np.full(n_s, np.nan)
    p_value = np.full(n_s, np.nan)
    tests = np.full(n_s, "none", dtype=object)
    unit = np.full(n_s, "none", dtype=object)
    n_units = np.zeros(n_s, dtype=np.int64)
    used = np.zeros(n_s, dtype=np.int64)
    for s in range(n_s):
        present = np.flatnonzero(pipe.entered[s] > 0)
        if present.size == 0:
            continue
        dpd[s] = dpd_from_counts(pipe.passed[s, present], pipe.entered[s, present])
        if present.size < 2:
            continue
        p_value[s], tests[s], used[s], (unit[s], n_units[s]) = _stage_test(
            pipe,
            candidates,
            s,
            present,
            dpd[s],
            paired=pipe.stages[s] in opts.pairs,
            method=opts.method,
            n_permutations=opts.n_permutations,
            rng=np.random.default_rng(streams[s]),
        )
    adjusted = _adjust_finite(p_value, opts.adjust)
    si = np.repeat(np.arange(n_s), n_g)  # the stage of each row of the table
    out = _rates_table(pipe, rates, pipe.group)
    out["four_fifths"] = (out["impact_ratio"] < opts.threshold - _TOL).to_numpy(dtype=bool)
    out["dpd"], out["test"], out["n_permutations"] = dpd[si], tests[si], used[si]
    out["unit"], out["n_units"] = unit[si], n_units[si]
    out["p_value"], out["p_adjusted"] = p_value[si], adjusted[si]
    return out


def _rates_table(pipe: _Pipeline, rates: np.ndarray, group: str) -> pd.DataFrame:
    """One row per (stage, group value): entered, advanced, the rate, the cumulative rate and
    the impact ratio (see :func:`stage_table`)."""
    n_s, n_g = rates.shape
    top = np.nanmax(np.where(pipe.entered > 0, rates, np.nan), axis=1, initial=-np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        impact = np.where(
            top[:, None] > 0, rates / top[:, None], np.where(np.isnan(rates), np.nan, 1.0)
        )
        cumulative = pipe.passed / pipe.entered[0]
    si, gi = np.divmod(np.arange(n_s * n_g), n_g)
    return pd.DataFrame(
        {
            "stage": np.asarray(pipe.stages, dtype=object)[si],
            "group": group,
            "value": pipe.values.take(gi),
            "entered": pipe.entered[si, gi],
            "advanced": pipe.passed[si, gi],
            "rate": rates[si, gi],
            "cumulative_rate": cumulative[si, gi],
            "impact_ratio": impact[si, gi],
        }
    )


def _stage_test(
    pipe: _Pipeline,
    candidates: pd.DataFrame,
    s: int,
    present: np.ndarray,
    observed: float,
    *,
    paired: bool,
    method: str,
    n_permutations: int,
    rng: np.random.Generator,
) -> tuple[float, str, int, tuple[str, int]]:
    """The p-value of stage ``s``'s DPD (``observed``, among the groups ``present``), the
    test's name, the permutations it drew and its unit (what it relabels, how many: see
    :func:`stage_table`)."""
    rows = pipe.stage == s
    local = np.searchsorted(present, pipe.g[rows])
    if pipe.person is not None and not paired:
        null, persons = _person_dpd(
            local, pipe.person[rows], pipe.advanced[rows], n_permutations, rng
        )
        p = (1 + np.count_nonzero(null >= observed - _TOL)) / (1 + n_permutations)
        return p, "permutation_of_persons", n_permutations, ("person", persons)
    if paired:
        null = _pair_swap_dpd(
            local, pipe, candidates, rows, pipe.entered[s, present], n_permutations, rng
        )
        p = (1 + np.count_nonzero(null >= observed - _TOL)) / (1 + n_permutations)
        pairs = ("pair", int(pd.unique(pipe.cluster[rows]).size))
        return p, "concordant_pairs", n_permutations, pairs
    pooled = _pooled(pipe.cluster[rows])
    if method == "auto" and present.size == 2 and not pooled.any():
        from scipy import stats  # here: most pipelines pool, and it takes most of a second

        a, b = pipe.passed[s, present], pipe.entered[s, present]
        p = stats.fisher_exact(np.column_stack([a, b - a])).pvalue
        return p, "fisher_exact", 0, ("candidate", int(rows.sum()))
    block = np.zeros(pooled.size, dtype=np.int64)
    # Pool ids count from 1; block 0 holds every candidate judged alone.
    block[pooled] = pd.factorize(pipe.cluster[rows][pooled])[0] + 1
    null = _within_block_dpd(
        local,
        block,
        pipe.advanced[rows],
        pipe.entered[s, present],
        n_permutations,
        rng,
    )
    p = (1 + np.count_nonzero(null >= observed - _TOL)) / (1 + n_permutations)
    if not pooled.any():
        return p, "permutation", n_permutations, ("candidate", int(rows.sum()))
    # Labels move within a pool only: the pools (each candidate judged alone is its own).
    blocks = int(pd.unique(pipe.cluster[rows][pooled]).size) + int((~pooled).sum())
    return p, "permutation_within_pool", n_permutations, ("pool", blocks)


def _person_dpd(
    g: np.ndarray,
    person: np.ndarray,
    advanced: np.ndarray,
    n_permutations: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int]:
    """DPD of ``n_permutations`` relabellings that permute the group codes ``g`` among the
    persons (codes ``person``), each person's rows keeping one label; and the persons.

    Raises:
        ValueError: A person's rows carry different groups.
    """
    code, inverse = np.unique(person, return_inverse=True)
    label = np.zeros(code.size, dtype=np.int64)
    label[inverse] = g
    if (label[inverse] != g).any():
        raise ValueError("a person's applications carry different groups")
    entries = np.bincount(inverse, minlength=code.size).astype(float)
    picks = np.bincount(inverse, weights=advanced, minlength=code.size)
    n_groups = int(g.max()) + 1
    entered = np.empty((n_permutations, n_groups))
    passed = np.empty((n_permutations, n_groups))
    chunk = max(1, _CHUNK_ELEMENTS // max(code.size * n_groups, 1))
    for done in range(0, n_permutations, chunk):
        n_rows = min(chunk, n_permutations - done)
        shuffled = rng.permuted(np.broadcast_to(label, (n_rows, code.size)), axis=1)
        member = shuffled[:, :, None] == np.arange(n_groups)
        entered[done : done + n_rows] = np.einsum("rpg,p->rg", member, entries)
        passed[done : done + n_rows] = np.einsum("rpg,p->rg", member, picks)
    return dpd_from_counts(passed, entered), int(code.size)


def _pair_swap_dpd(
    g: np.ndarray,
    pipe: _Pipeline,
    candidates: pd.DataFrame,
    rows: np.ndarray,
    entered: np.ndarray,
    n_permutations: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """DPD of ``n_permutations`` relabellings that swap the two authors' groups within each
    pair with probability 1/2 (``rows``: the stage's showings; ``g``: their group codes).

    Both authors of a pair are shown equally often (every evaluation shows both), so a swap
    keeps every group's entrants and moves only picks: group ``g_u`` trades author ``u``'s
    picks for ``v``'s, and ``g_v`` the reverse.
    """
    advanced = pipe.advanced[rows]
    per_author = _pair_authors(g, pipe.cluster[rows], candidates, rows, advanced)
    g_u, g_v = per_author["g"].to_numpy()[0::2], per_author["g"].to_numpy()[1::2]
    p_u, p_v = per_author["picked"].to_numpy()[0::2], per_author["picked"].to_numpy()[1::2]
    observed = np.bincount(g, weights=advanced, minlength=entered.size)
    moves = np.flatnonzero((g_u != g_v) & (p_u != p_v))
    change = np.zeros((moves.size, entered.size))
    change[np.arange(moves.size), g_u[moves]] = p_v[moves] - p_u[moves]
    change[np.arange(moves.size), g_v[moves]] = p_u[moves] - p_v[moves]
    counts = np.empty((n_permutations, entered.size))
    chunk = max(1, _CHUNK_ELEMENTS // max(moves.size, 1))
    for done in range(0, n_permutations, chunk):
        n_rows = min(chunk, n_permutations - done)
        swapped = rng.random((n_rows, moves.size)) < 0.5
        counts[done : done + n_rows] = observed + swapped @ change
    return dpd_from_counts(counts, entered)


def _pair_authors(
    g: np.ndarray, pair: np.ndarray, candidates: pd.DataFrame, rows: np.ndarray, picked: np.ndarray
) -> pd.DataFrame:
    """Per (pair, author), sorted, two rows per pair: the group code and how often picked."""
    if AUTHOR not in candidates.columns or candidates[AUTHOR].iloc[rows].isna().any():
        raise ValueError(f"a pair stage needs `{AUTHOR}` (whose document was shown) on every row")
    frame = pd.DataFrame(
        {"pair": pair, "author": candidates[AUTHOR].to_numpy()[rows], "g": g, "picked": picked}
    )
    keys = frame.groupby(["pair", "author"], sort=True)
    if (keys["g"].nunique() > 1).any():
        raise ValueError("an author's showings carry different groups")
    per_author = keys.agg(g=("g", "first"), picked=("picked", "sum"))
    sizes = per_author.groupby(level="pair").size()
    if (sizes != 2).any():
        raise ValueError(f"pair `{sizes[sizes != 2].index[0]}` does not show exactly two authors")
    return per_author


def _pooled(cluster: np.ndarray) -> np.ndarray:
    """Rows judged in a pool of two or more: a pool of one is a candidate judged alone."""
    pooled = ~pd.isna(cluster)
    codes = pd.factorize(cluster[pooled])[0]
    pooled[pooled] = np.bincount(codes)[codes] > 1
    return pooled


def _within_block_dpd(
    g: np.ndarray,
    block: np.ndarray,
    advanced: np.ndarray,
    entered: np.ndarray,
    n_permutations: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """DPD of ``n_permutations`` relabellings of group codes ``g`` within each block.

    Every group ``0 .. len(entered) - 1`` must own a row. Only each group's advanced count per
    permutation matters, and within a block it is the count among a uniformly random subset of
    the block's rows of the observed size, however the labels are shuffled.
    """
    n_groups = entered.size
    n_blocks = int(block.max()) + 1
    composition = np.bincount(block * n_groups + g, minlength=n_blocks * n_groups).reshape(
        n_blocks, n_groups
    )
    size = composition.sum(axis=1)
    picks = np.bincount(block, weights=advanced, minlength=n_blocks).round().astype(np.int64)
    fixed = (picks == 0) | (picks == size) | (composition.max(axis=1) == size)
    # A fixed block advances picks/size of each of its groups: all, none, or its only group.
    base = (composition[fixed] * picks[fixed, None] // np.maximum(size[fixed, None], 1)).sum(axis=0)
    counts = np.broadcast_to(base.astype(np.float64), (n_permutations, n_groups)).copy()
    drawn = ~fixed
    by_kind = _cheaper_by_kind(composition, picks, size, drawn)
    if by_kind.size:
        counts += _by_kind(composition[by_kind], picks[by_kind], n_permutations, rng)
        drawn[by_kind] = False
    small = np.flatnonzero(drawn & (size <= _SMALL_BLOCK))
    if small.size:
        counts += _sample_small_blocks(g, block, small, size, picks, n_groups, n_permutations, rng)
    for b in np.flatnonzero(drawn & (size > _SMALL_BLOCK)):
        counts += rng.multivariate_hypergeometric(composition[b], picks[b], size=n_permutations)
    return dpd_from_counts(counts, entered)


def _cheaper_by_kind(
    composition: np.ndarray, picks: np.ndarray, size: np.ndarray, drawn: np.ndarray
) -> np.ndarray:
    """The drawn blocks whose kind is cheaper to draw whole: its outcomes are at most
    :data:`_MAX_OUTCOMES` and, weighted by :data:`_OUTCOME_COST`, fewer than the rows of its
    blocks, which the block-by-block routes draw one at a time. (With many groups nearly every
    pool is its own kind with dozens of outcomes: drawn by kind, 12,500 pools of 8 over 12
    groups took 14 s instead of 0.7 s.)"""
    chosen = np.flatnonzero(drawn)
    if not chosen.size:
        return chosen
    _, kind, members = np.unique(
        np.column_stack([composition[chosen], picks[chosen]]),
        axis=0,
        return_inverse=True,
        return_counts=True,
    )
    # An upper bound on a block's outcomes: the picks of a group can be 0 .. min(c, k).
    bound = np.prod(np.minimum(composition[chosen], picks[chosen, None]) + 1.0, axis=1)
    rows = members[kind.ravel()] * size[chosen]
    return chosen[(bound <= _MAX_OUTCOMES) & (bound * _OUTCOME_COST <= rows)]


def _by_kind(
    composition: np.ndarray, picks: np.ndarray, n_permutations: int, rng: np.random.Generator
) -> np.ndarray:
    """Each group's count among the picks of all these blocks, per permutation, drawn per kind.

    Blocks of one kind (the same group composition and number of picks) are independent draws
    of one small distribution: a block advances group counts ``x`` with the multivariate
    hypergeometric probability ``prod C(c_i, x_i) / C(size, picks)``. So how many blocks of a
    kind land on each outcome is multinomial, and the kind's total is that many times each
    outcome: one multinomial draw per kind and permutation, however many blocks share it.
    """
    kinds, members = np.unique(np.column_stack([composition, picks]), axis=0, return_counts=True)
    outcomes = [_outcomes(kind[:-1], int(kind[-1])) for kind in kinds]
    width = max(len(probability) for _, probability in outcomes)
    n_groups = composition.shape[1]
    pvals = np.zeros((len(kinds), width))
    vectors = np.zeros((len(kinds), width, n_groups))
    for i, (vector, probability) in enumerate(outcomes):
        pvals[i, : len(probability)] = probability
        vectors[i, : len(vector)] = vector
    counts = np.zeros((n_permutations, n_groups))
    # The multinomial counts are int64: a chunk of them takes up to 32 MiB.
    chunk = max(1, _CHUNK_ELEMENTS // (len(kinds) * width))
    for done in range(0, n_permutations, chunk):
        n_rows = min(chunk, n_permutations - done)
        landed = rng.multinomial(members, pvals, size=(n_rows, len(kinds)))
        counts[done : done + n_rows] = np.einsum("pkw,kwg->pg", landed, vectors)
    return counts


def _outcomes(composition: np.ndarray, picks: int) -> tuple[np.ndarray, np.ndarray]:
    """Every vector of group counts a block of ``composition`` can advance with ``picks``
    picks, and its multivariate hypergeometric probability (summing to 1)."""
    vectors: list[tuple[int, ...]] = [()]
    left = int(composition.sum())
    for c in composition.tolist():
        left -= c
        vectors = [
            (*v, x)
            for v in vectors
            for x in range(min(c, picks - sum(v)) + 1)
            if picks - sum(v) - x <= left  # the groups after this one can still take the rest
        ]
    total = math.comb(int(composition.sum()), picks)
    weights = [
        math.prod(math.comb(c, x) for c, x in zip(composition.tolist(), v, strict=True))
        for v in vectors
    ]
    probability = np.array([w / total for w in weights])
    return np.array(vectors, dtype=np.float64), probability / probability.sum()


def _sample_small_blocks(
    g: np.ndarray,
    block: np.ndarray,
    chosen_blocks: np.ndarray,
    size: np.ndarray,
    picks: np.ndarray,
    n_groups: int,
    n_permutations: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each group's count among a random ``picks``-subset of every chosen block, per permutation.

    Selection sampling (Knuth's algorithm S), vectorised over permutations and blocks: walking
    through a block's rows, row ``j`` is taken with probability ``remaining picks / remaining
    rows``, which yields a uniformly random subset of exactly ``picks`` rows. Blocks are sorted
    by size, largest first, so step ``j`` works on a prefix: the blocks with a row ``j``.
    """
    order = chosen_blocks[np.argsort(-size[chosen_blocks], kind="stable")]
    sizes = size[order]
    rank = np.full(block.max() + 1, -1, dtype=np.int64)
    rank[order] = np.arange(order.size)
    rows = np.flatnonzero(rank[block] >= 0)
    rows = rows[np.argsort(rank[block[rows]], kind="stable")]
    # Position of each row within its block, for the one-hot label matrix of each step.
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    within = np.arange(rows.size) - np.repeat(start, sizes)
    steps = int(sizes[0])
    active = np.array([np.count_nonzero(sizes > j) for j in range(steps)])
    # float32 halves the memory traffic of the hot loop: its sums of 0/1 stay exact below 2**24
    # blocks, and its 2**-24 uniform grid shifts a selection probability by less than 1e-7.
    dtype = np.float32 if order.size < (1 << 24) else np.float64
    onehots = []
    for j in range(steps):
        labels = g[rows[within == j]]  # block order, as rows were sorted by block rank
        hot = np.zeros((active[j], n_groups), dtype=dtype)
        hot[np.arange(active[j]), labels] = 1
        onehots.append(hot)
    counts = np.zeros((n_permutations, n_groups))
    chunk = max(1, _CHUNK_ELEMENTS // order.size)
    for done in range(0, n_permutations, chunk):
        n_rows = min(chunk, n_permutations - done)
        remaining = np.broadcast_to(picks[order].astype(dtype), (n_rows, order.size)).copy()
        part = np.zeros((n_rows, n_groups))
        for j in range(steps):
            width = active[j]
            chance = remaining[:, :width] / (sizes[:width] - j).astype(dtype)
            taken = (rng.random((n_rows, width), dtype=dtype) < chance).astype(dtype)
            remaining[:, :width] -= taken
            part += taken @ onehots[j]
        counts[done : done + n_rows] = part
    return counts


def compounding(
    candidates: pd.DataFrame,
    stages: Sequence[str],
    group: str,
    *,
    values: Sequence[object] | None = None,
) -> pd.DataFrame:
    """The end-to-end impact ratio decomposed into one ratio per stage.

    The reference is the group with the highest end-to-end rate (advanced at the last stage
    over entrants at the first; ties go to the first value in sorted order). A group's ratio at
    a stage is its stage rate (advanced / entered there) over the reference's. When the
    entrants of every stage are exactly the previous stage's advanced candidates, stage rates
    telescope and the product of the stage ratios equals the end-to-end ratio; this is checked
    numerically for each group (``identity_holds``). It fails when candidates join or leave
    between stages, which ``nested`` reports for the whole table. A stage a group did not enter
    has a NaN ratio and contributes no factor to the product (its end-to-end rate is then 0 by
    an earlier stage's ratio of 0 when the table is nested).

    A stage nobody entered although the stage before advanced someone (no valid answer at
    all) leaves the end-to-end rate undefined -- nobody was read there, which is not the same
    as nobody advancing -- so the end-to-end
    rate, its ratio and the product are NaN, ``identity_holds`` is False and ``undefined``
    names the stage.

    Args:
        candidates: One row per candidate per stage entered (see the module docstring).
        stages: The stage names in pipeline order.
        group: The group column.
        values: Group values to report besides those in ``candidates`` (needed when no
            candidate entered any stage).

    Returns:
        One row per group value, sorted: ``group`` (the column name), ``value``, ``entered``
        (at the first stage), ``advanced`` (at the last), ``end_to_end_rate``, ``reference``
        (bool), ``end_to_end_ratio``, one ``entered_<stage>`` and one ``ratio_<stage>`` per
        stage, ``product`` (of the stage ratios), ``identity_holds`` (``product`` equals
        ``end_to_end_ratio`` to ``rtol=1e-12``; both undefined, as when every end-to-end rate
        is 0, counts as holding), ``nested`` and ``undefined`` (why the decomposition is
        undefined, empty when it is not; both the same on every row).

    Raises:
        ValueError: As :func:`stage_table`, or no candidate and no ``values``: no group to
            report.
    """
    return _compounding(_Pipeline(candidates, stages, group, values))


def _compounding(pipe: _Pipeline) -> pd.DataFrame:
    group = pipe.group
    if len(pipe.values) == 0:
        raise ValueError(
            f"no candidate entered any stage and no group values were given for `{group}`"
        )
    rates = pipe.rates()
    # Unread: nobody entered although the stage before advanced someone (or it is the first).
    # A stage after one that advanced nobody is empty by the pipeline, and its 0 is a result.
    offered = np.concatenate([[1], pipe.passed[:-1].sum(axis=1)])
    empty = [
        stage
        for stage, n, m in zip(pipe.stages, pipe.entered.sum(axis=1), offered, strict=True)
        if n == 0 and m > 0
    ]
    first, last = pipe.entered[0], pipe.passed[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        end_to_end = np.full(len(first), np.nan) if empty else last / first
        ref = int(np.nanargmax(end_to_end)) if not np.isnan(end_to_end).all() else 0
        e2e_ratio = end_to_end / end_to_end[ref]
        ratios = rates / rates[:, [ref]]
    out = pd.DataFrame(
        {
            "group": group,
            "value": pipe.values,
            "entered": first,
            "advanced": last,
            "end_to_end_rate": end_to_end,
            "reference": np.arange(len(pipe.values)) == ref,
            "end_to_end_ratio": e2e_ratio,
        }
    )
    for s, stage in enumerate(pipe.stages):
        out[f"entered_{stage}"] = pipe.entered[s]
    for s, stage in enumerate(pipe.stages):
        out[f"ratio_{stage}"] = ratios[s]
    factors = np.where(pipe.entered == 0, 1.0, ratios)
    out["product"] = np.nan if empty else np.prod(factors, axis=0)
    out["identity_holds"] = (not empty) & np.isclose(
        out["product"], e2e_ratio, rtol=1e-12, atol=0.0, equal_nan=True
    )
    out["nested"] = pipe.nested()
    out["undefined"] = "; ".join(f"no valid answer at stage `{s}` (0 entered)" for s in empty)
    return out


@dataclass(frozen=True)
class CheckedReadings:
    """Readings checked once for several of :func:`position_table`, :func:`first_position_test`
    and :func:`choice_rates` (each checks a plain DataFrame itself: a tenth of a second per
    stage at 100,000 applicants). Make them with :meth:`of`."""

    frame: pd.DataFrame

    @classmethod
    def of(cls, readings: pd.DataFrame, groups: Sequence[str] = ()) -> CheckedReadings:
        """``readings`` checked, with the ``groups`` columns kept for :func:`choice_rates`.

        Raises:
            ValueError: As the functions that read them.
        """
        return cls(_readings(readings, groups))


def _checked(readings: pd.DataFrame | CheckedReadings, extra: Sequence[str] = ()) -> pd.DataFrame:
    if isinstance(readings, CheckedReadings):
        _require_columns(readings.frame, list(extra))
        return readings.frame
    return _readings(readings, extra)


def _readings(readings: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Checked readings: positions within 1..size, k within 0..size, one size and k per
    evaluation, one row per (evaluation, position)."""
    evaluation, position, size, k, chosen = READING_COLUMNS
    _require_columns(readings, [*READING_COLUMNS, *extra])
    for col in (evaluation, position, size, k):
        if readings[col].isna().any():
            raise ValueError(f"`{col}` has missing values")
    data = readings[list(dict.fromkeys([*READING_COLUMNS, *extra]))].copy()
    data[chosen] = _as_bool(data[chosen], chosen)
    if data.duplicated([evaluation, position]).any():
        raise ValueError("an evaluation has several rows for one position")
    if data.drop_duplicates([evaluation, size, k])[evaluation].duplicated().any():
        raise ValueError("an evaluation has more than one `size` or `k`")
    if ((data[position] < 1) | (data[position] > data[size])).any():
        raise ValueError("positions are 1-based and must not exceed `size`")
    if ((data[k] < 0) | (data[k] > data[size])).any():
        raise ValueError("`k` must lie between 0 and `size`")
    return data


def position_table(readings: pd.DataFrame | CheckedReadings) -> pd.DataFrame:
    """How often each shown position is chosen, per evaluation format (size, k).

    Without a position effect every position is chosen with probability ``k / size``.

    Args:
        readings: One row per (evaluation, shown position) (see the module docstring).

    Returns:
        One row per (``size``, ``k``, ``position``), sorted: ``n`` (showings), ``chosen``,
        ``rate``, ``chance`` (``k / size``) and ``ratio_to_chance``.
    """
    data = _checked(readings)
    out = (
        data.groupby(["size", "k", "position"], sort=True)["chosen"]
        .agg(n="size", chosen="sum")
        .reset_index()
    )
    out["chosen"] = out["chosen"].astype(np.int64)
    out["rate"] = out["chosen"] / out["n"]
    out["chance"] = out["k"] / out["size"]
    out["ratio_to_chance"] = out["rate"] / out["chance"]
    return out


def first_position_test(
    readings: pd.DataFrame | CheckedReadings, *, adjust: str = "holm"
) -> pd.DataFrame:
    """Exact binomial test of how often the first position shown is chosen, per (size, k).

    One trial per evaluation: success when its pick includes position 1; under no position
    effect (documents shown in random order, picks not depending on order) the success
    probability is ``k / size``. Evaluations of different formats have different chances, so
    each (size, k) is tested separately; together they form one family for ``adjust``.

    Args:
        readings: One row per (evaluation, shown position) (see the module docstring).
        adjust: ``holm``, ``bh`` or ``none``, over the formats.

    Returns:
        One row per (``size``, ``k``), sorted: ``n_evaluations``, ``first_chosen``, ``share``,
        ``chance``, ``p_value`` (two-sided, :func:`binomial_p`), ``unit`` (``evaluation``: each
        is one trial) and ``n_units``, ``p_adjusted`` and ``n_excluded`` (evaluations without
        a row for position 1, left out of the test).
    """
    data = _checked(readings)
    formats = data.groupby("evaluation")[["size", "k"]].first()
    first = data[data["position"] == 1].set_index("evaluation")["chosen"]
    formats["first"] = first.reindex(formats.index)
    rows = []
    for (size, k), part in formats.groupby(["size", "k"], sort=True):
        tested = part["first"].dropna().astype(bool)
        n, hits = len(tested), int(tested.sum())
        chance = k / size
        p = binomial_p(hits, n, chance) if n else np.nan
        rows.append(
            {
                "size": size,
                "k": k,
                "n_evaluations": n,
                "first_chosen": hits,
                "share": hits / n if n else np.nan,
                "chance": chance,
                "p_value": float(p),
                "unit": "evaluation",
                "n_units": n,
                "n_excluded": len(part) - n,
            }
        )
    out = pd.DataFrame(rows)
    out.insert(
        len(out.columns) - 1, "p_adjusted", _adjust_finite(out["p_value"].to_numpy(), adjust)
    )
    return out


def binomial_p(hits: int, n: int, chance: float) -> float:
    """The exact two-sided binomial p-value of ``hits`` in ``n`` trials at ``chance``: the
    probability of every count no likelier than ``hits``, with ``scipy.stats.binomtest``'s
    relative tolerance of 1e-7 (its definition; a test checks the values). Computed here since
    importing scipy.stats takes most of a second of a pipeline run that needs nothing else of it.
    """
    if hits == chance * n:
        return 1.0
    if chance <= 0.0 or chance >= 1.0:
        # Every trial has the one outcome, and ``hits`` is not its count.
        return 0.0
    counts = np.arange(n + 1)
    log_factorial = np.array([math.lgamma(i + 1) for i in range(n + 1)])
    log_pmf = (
        log_factorial[n]
        - log_factorial
        - log_factorial[::-1]
        + counts * math.log(chance)
        + (n - counts) * math.log1p(-chance)
    )
    pmf = np.exp(log_pmf)
    return min(1.0, math.fsum(pmf[pmf <= pmf[hits] * (1 + 1e-7)]))


def choice_rates(readings: pd.DataFrame | CheckedReadings, group: str) -> pd.DataFrame:
    """How often each group's documents are chosen when shown, against chance.

    A group's chance is the mean of ``k / size`` over its showings, which allows for groups
    shown more often in formats with a higher share picked.

    Args:
        readings: One row per (evaluation, shown position) (see the module docstring).
        group: The group column.

    Returns:
        One row per group value, sorted: ``group`` (the column name), ``value``, ``shown``,
        ``chosen``, ``rate``, ``chance`` and ``ratio_to_chance``.
    """
    data = _checked(readings, [group])
    if data[group].isna().any():
        raise ValueError(f"`{group}` has missing values; every reading needs a group")
    data = data[[group, "chosen"]].assign(_chance=data["k"] / data["size"])
    out = (
        data.groupby(group, sort=True)
        .agg(shown=("chosen", "size"), chosen=("chosen", "sum"), chance=("_chance", "mean"))
        .reset_index()
        .rename(columns={group: "value"})
    )
    out.insert(0, "group", group)
    out["chosen"] = out["chosen"].astype(np.int64)
    out["rate"] = out["chosen"] / out["shown"]
    out["ratio_to_chance"] = out["rate"] / out["chance"]
    return out[["group", "value", "shown", "chosen", "rate", "chance", "ratio_to_chance"]]
