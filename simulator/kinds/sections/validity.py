"""The validity test of the kinds whose answers are not one decision per persona (pipeline,
picks, association, letter_evaluation): the share of valid answers by group, per stratum,
tested with the design's unit by the one definition every kind uses
(``analysis.stats.refusals.validity_rates`` and ``validity_test``, as in ``demographic_parity``,
``acceptance`` and ``analyze --decisions``). Shown in the tables, the summary and the report."""

from __future__ import annotations

import numpy as np

from biasim.simulator.common.results import tabled
from biasim.simulator.kinds.lazy import pd, refusals
from biasim.simulator.kinds.sections.codebook import tables_of

_OUTCOME = "__answer__"


def validity_records(
    rows: pd.DataFrame,
    *,
    strata: list[str],
    group: str,
    ok: np.ndarray,
    unit_col: str | None,
    unit: str,
    n_permutations: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (stratum, group value): valid answers and their share with its Wilson
    interval, and, the same on every row of a stratum, the gap, its p-value and the test.

    Args:
        rows: One row per answer (or per document read, for a reading stage).
        strata: Columns tested separately (e.g. the stage, the experiment); may be empty.
        group: The group column (its value must be the same on every row of a unit).
        ok: Whether each row's answer was valid.
        unit_col: Column naming the unit relabelled as a whole (None: rows are independent).
        unit: What the unit is, as printed (``applicant``, ``call``, ...).
    """
    data = rows[[*strata, group, *([unit_col] if unit_col else [])]].copy()
    # Only missing or not is read (an answer is excluded when missing): a number, not 200,000
    # Python strings.
    data[_OUTCOME] = np.where(ok, 1.0, np.nan)
    data[group] = data[group].astype(str)
    frames = []
    for key, part in data.groupby(strata, sort=False) if strata else [((), data)]:
        table = refusals.validity_rates(part, [group], _OUTCOME, invalid=[])
        test = refusals.validity_test(
            part, [group], _OUTCOME, invalid=[], unit_col=unit_col,
            n_permutations=n_permutations, seed=seed,
        )  # fmt: skip
        if unit_col:
            test["validity_test"] = str(test["validity_test"]).replace(
                f"{unit_col} labels, unit: {unit_col}", f"{unit} labels, unit: {unit}"
            )
        values = key if isinstance(key, tuple) else (key,)
        frames.append(table.assign(**dict(zip(strata, values, strict=True)), **test))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    front = [*strata, group]
    return out[front + [c for c in out.columns if c not in front]].rename(columns={group: "value"})


#: ``validity`` of a declared result (``tabled(TABLE, by_key=BY_KEY)``): one table per group
#: column, its strata leading; declared in validity.tables.yaml.
TABLE = tables_of(__name__)["validity"]
#: What the keys of ``validity`` are.
BY_KEY = "Valid answers per group, by what the groups are, with the gap's test."
#: The metadata of a result's ``validity`` field (``field(default_factory=dict,
#: metadata=TABLED)``): one table per group column.
TABLED = tabled(TABLE, BY_KEY)


#: The summary key of the calls' validity: each call shows every target value, so the value
#: named first (drawn at random per call) is the only group a call has.
FIRST_NAMED = "first_named"


def call_validity(rows: pd.DataFrame, strata: list[str], ok: np.ndarray, seed: int) -> pd.DataFrame:
    """Valid answers by the target value named first (``first_value``), the call (``unit_id``)
    the unit: a call's items share its answer, so they are relabelled together."""
    return validity_records(
        rows, strata=strata, group="first_value", ok=ok, unit_col="unit_id", unit="call",
        seed=seed,
    )  # fmt: skip
