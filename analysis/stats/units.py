"""The unit of exchangeability: what a test's null may reshuffle, counted and named.

A resampling test is calibrated only when its null reshuffles what is exchangeable when there is
no effect. A persona that answers five replicates, or a name shown in every role, brings its own
propensity to each of its answers: shuffling or resampling answers treats five correlated draws
as five independent ones, and the test rejects far above its level (30 % of null cases at
alpha 0.05 with a persona propensity sd of 1.5 on the logit and five replicates).

Here a *unit* is a set of rows that share one identity (persona, name, writer, applicant, pair,
pool, email), given by columns. :func:`unit_counts` sums each unit's answers, so the tests in
``analysis.stats`` can relabel units (``permutation.block_permutation_sums``) instead of rows,
and :func:`unit_label` is what every printed test states beside its p-value:
``unit: persona, 60 units``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

#: log(n!) elementwise; counts are whole numbers, and scipy.special (a fifth of a second to
#: import) is not needed for them: validating a study imports this module.
_log_factorial = np.frompyfunc(lambda n: math.lgamma(n + 1), 1, 1)


def log_factorial(counts: float | np.ndarray) -> np.ndarray:
    """``log(n!)`` of each count (``lgamma(n + 1)``), as floats."""
    return np.asarray(_log_factorial(np.asarray(counts, dtype=float)), dtype=float)


#: What a unit can be, as the analyses name it.
UNIT_KINDS: tuple[str, ...] = (
    "persona",
    "name",
    "writer",
    "applicant",
    "pair",
    "pool",
    "email",
    "decision",
)


#: The column holding each row's unit of a kind (:func:`design_units`), the name printed beside
#: every test that uses it; no results column is called ``persona_id``.
UNIT_COLUMNS = {"persona": "persona_id", "name": "persona_name"}

#: The replicate suffix of an agent id (``.../r3``).
_REPLICATE = r"/r\d+$"


def design_units(rows: pd.DataFrame, kind: str) -> pd.Series:
    """The unit of exchangeability of each row of a results table, derived once: every test,
    model estimate and bound of an analysis takes its unit from here.

    * ``persona``: the agent id without its condition (the design cell: scenario, persona
      condition) and its replicate, i.e. ``[population/][model/]persona-key/index``. The same
      persona meets every scenario of its study, and its own propensity is in each answer, so
      its answers across scenarios and replicates are one unit (clustering on the design cell
      instead counted 4 scenarios x 60 personas as 240 units, and the GEE rejected a true
      null in 30 % of simulated studies).
    * ``name``: the persona's name (``persona_name``), shared by every persona drawn with it.

    Rows whose id is missing get NA (no unit): they are left out of the unit tests.
    """
    if kind == "name":
        return rows["persona_name"].astype("string")
    if kind != "persona":
        raise ValueError(f"no design unit `{kind}`: persona or name")
    ids = rows["agent_id"].astype("string")
    if "condition" in rows:
        conditions = rows["condition"].astype("string").fillna("")
        ids = pd.Series(
            [
                pd.NA if i is pd.NA else _without(str(i), str(c))
                for i, c in zip(ids, conditions, strict=True)
            ],
            index=rows.index,
            dtype="string",
        )
    return ids.str.replace(_REPLICATE, "", regex=True)


def _without(agent_id: str, condition: str) -> str:
    """The agent id without its ``condition`` component(s): the first run of whole
    ``/``-separated components equal to it (after the population and model prefixes), so a
    prefix that merely contains the condition's text is never cut."""
    if not condition:
        return agent_id
    parts, width = agent_id.split("/"), condition.count("/") + 1
    for at in range(len(parts) - width + 1):
        if "/".join(parts[at : at + width]) == condition:
            return "/".join(parts[:at] + parts[at + width :])
    return agent_id


def unit_label(kind: str | None, n_units: int | None) -> str:
    """What every report prints beside a test, e.g. ``unit: persona, 60 units``."""
    return f"unit: {kind}, {n_units} units" if kind else "unit: none (no test)"


def unit_counts(
    df: pd.DataFrame,
    keys: Sequence[str],
    unit_cols: Sequence[str],
    hit_col: str,
) -> pd.DataFrame:
    """Answers and hits per unit within each ``keys`` cell.

    Args:
        df: One row per answer; ``hit_col`` is true/false for an answer, NA for none.
        keys: Columns of the cell a unit is counted in (e.g. the case and the group).
        unit_cols: Columns that together identify a unit within a cell.
        hit_col: Column holding the answer as a boolean (NA: no valid answer).

    Returns:
        One row per (cell, unit): ``keys``, ``unit_cols``, ``n_rows`` (answers given, valid or
        not), ``n`` (valid answers), ``k`` (hits).
    """
    columns = [*keys, *unit_cols]
    data = df.dropna(subset=columns)
    hit = data[hit_col].astype("boolean")
    frame = data[columns].assign(_n=hit.notna().astype(int), _k=hit.fillna(False).astype(int))
    grouped = frame.groupby(columns, sort=True, dropna=False)
    out = grouped.agg(n_rows=("_n", "size"), n=("_n", "sum"), k=("_k", "sum")).reset_index()
    return out


def nested_in(units: pd.DataFrame, case_cols: Sequence[str], unit_cols: Sequence[str]) -> bool:
    """Whether each unit of each case lies in one group only (output of :func:`unit_counts`
    with the group among its keys): relabelling whole units is then a valid null."""
    sizes = units.groupby([*case_cols, *unit_cols], sort=False, dropna=False).size()
    return bool((sizes <= 1).all())


def smallest_p(units_per_group: Sequence[int] | np.ndarray) -> float:
    """A lower bound on the smallest p-value a relabelling of units between groups can give:
    one over the number of distinct labellings (the multinomial coefficient). When it is not
    below alpha the test cannot reject whatever the data, and the report says so."""
    sizes = np.asarray(units_per_group, dtype=float)
    log_ways = log_factorial(sizes.sum()) - log_factorial(sizes).sum()
    return float(min(1.0, np.exp(-log_ways)))


@dataclass(frozen=True)
class Tested:
    """One test as ``biasim power`` and the report read it: its p-value and the unit its null
    reshuffled, taken from the row the test wrote (so power states the unit the test used).

    Attributes:
        p: The p-value (adjusted where the kind adjusts); None when the test did not run.
        unit: The unit of exchangeability: the results column whose values are the units
            (``persona_id``, ``persona_name``, ``cluster``), or what each unit is where no
            column holds it (``letter``, ``answer``: every row its own unit).
        n_units: How many units the test's null reshuffled (all groups together); for a
            family of tests (the smallest adjusted p over cases), the fewest in any of them.
        n_units_high: For a family of several tests, the most units in any of them (None:
            one test).
        smallest_p: The smallest p the test could give with these units, whatever the data
            (None: not stated); at or above alpha, the test cannot find anything.
    """

    p: float | None
    unit: str | None = None
    n_units: int | None = None
    n_units_high: int | None = None
    smallest_p: float | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any], p_key: str) -> Tested:
        """The test whose p-value is ``row[p_key]``, with the row's ``unit`` and ``n_units``
        (not known: None, NaN or NA, as ``excess_dpd_test`` writes without unit tables)."""
        n, floor = row.get("n_units"), row.get("smallest_p")
        return cls(
            row.get(p_key),
            row.get("unit"),
            None if _missing(n) else int(n),
            smallest_p=None if _missing(floor) else float(floor),
        )

    @classmethod
    def family(
        cls, p: float | None, rows: Sequence[Mapping[str, Any]], p_key: str = "p_value"
    ) -> Tested:
        """A family test (e.g. Holm's smallest adjusted p) over ``rows``, each a test that
        states its ``unit`` and ``n_units``; their units must be one column. Only the rows
        whose test ran (``row[p_key]`` a number) count toward the units: a fit refused with
        NaN reshuffled nothing, and counting it widened the family's range."""
        ran = [r for r in rows if not _missing(r.get(p_key))] or list(rows)
        units = {r.get("unit") for r in ran}
        if len(units) != 1:
            raise ValueError(f"one family of tests on several units: {sorted(map(str, units))}")
        counts = [int(r["n_units"]) for r in ran if not _missing(r.get("n_units"))]
        low, high = (min(counts), max(counts)) if counts else (None, None)
        return cls(p, units.pop(), low, high if len(ran) > 1 else None)

    @property
    def label(self) -> str:
        """``persona_id, 60 units`` (what power prints beside the test)."""
        if self.unit is None:
            return "not stated"
        if self.n_units is None:
            return self.unit
        if self.n_units_high is not None:
            counts = (
                f"{self.n_units}"
                if self.n_units_high == self.n_units
                else (f"{self.n_units}-{self.n_units_high}")
            )
            return f"{self.unit}, {counts} units per test"
        return f"{self.unit}, {self.n_units} units"


def _missing(value: Any) -> bool:
    """None, NaN or NA: a count or p-value a test did not produce."""
    return value is None or bool(pd.isna(value))
