"""How much of a market's drift each mechanism accounts for, by switching it off.

Input: the market's composition table (``market.csv``) of a run that declared
``market: {decompose: [...]}``: the base trajectory (``off`` = ``none``) and one trajectory per
non-empty subset of the switches (``off`` = ``readers``, ``attrition``, ``readers|attrition``),
all on the same random numbers (same applicants, letters, pools, initial workforce; readers
and leavers drawn at the same seniority places), with ``replicate`` where a run holds replicate
markets (a table without it is one replicate).

The drift of a trajectory at cycle t is each group's workforce share at t minus its share at
cycle 0 (the same initial workforce in every trajectory). Two answers to "how much of the drift
does switch s remove", which differ when switches interact:

* ``removed_alone``: the base's drift minus the drift with ``s`` alone switched off. Such
  one-at-a-time removals depend on the order of switching (with the others off, switching ``s``
  off may remove more or less) and need not add up to the whole;
* ``shapley``: the average, over every order of switching all of them off, of what switching
  ``s`` off removes at its turn. These add up to the base's drift minus the drift with every
  switch off (``drift_all_off``, what no switch explains), whatever the interactions.

The values are means over replicate markets (the drift of one market is one draw of a random
trajectory; a single run's decomposition is that draw's, not an expectation).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from math import factorial

import pandas as pd

#: ``off`` of the trajectory with every mechanism on.
NONE = "none"


def _label(off: Sequence[str], order: Sequence[str]) -> str:
    return "|".join(k for k in order if k in off) or NONE


def drifts(table: pd.DataFrame) -> pd.DataFrame:
    """Per trajectory (``off``), replicate, cycle (from 1) and group: the workforce share
    minus the share at cycle 0 (column ``drift``)."""
    data = table if "replicate" in table.columns else table.assign(replicate=0)
    data = data[data["policy"] == "base"]
    total = data.groupby(["off", "replicate", "cycle"])["workforce"].transform("sum")
    data = data.assign(share=data["workforce"] / total.where(total > 0))
    start = data[data["cycle"] == 0].set_index(["off", "replicate", "group"])["share"]
    later = data[data["cycle"] >= 1].set_index(["off", "replicate", "group"])
    later = later.assign(drift=later["share"] - start.reindex(later.index))
    return later.reset_index()[["off", "replicate", "cycle", "group", "share", "drift"]]


def decompose_drift(table: pd.DataFrame, switches: Sequence[str]) -> pd.DataFrame:
    """Per cycle, group and switch: ``drift`` (every switch on), ``drift_all_off``,
    ``removed_alone`` and ``shapley`` (see the module docstring), means over ``replicates``.

    Args:
        table: The composition table (every subset of ``switches`` present as ``off``).
        switches: The switches declared, in the order ``off`` labels name them.
    """
    found = drifts(table)
    wide = found.pivot_table(index=["replicate", "cycle", "group"], columns="off", values="drift")
    subsets = [
        frozenset(c) for n in range(len(switches) + 1) for c in itertools.combinations(switches, n)
    ]
    missing = [_label(s, switches) for s in subsets if _label(s, switches) not in wide.columns]
    if missing:
        raise ValueError(f"market.csv has no trajectory with {', '.join(missing)} off")
    value = {s: wide[_label(s, switches)] for s in subsets}
    n = len(switches)
    rows = []
    for switch in switches:
        shapley = 0.0
        for others in (s for s in subsets if switch not in s):
            weight = factorial(len(others)) * factorial(n - len(others) - 1) / factorial(n)
            shapley = shapley + weight * (value[others] - value[others | {switch}])
        part = pd.DataFrame(
            {
                "drift": value[frozenset()],
                "drift_all_off": value[frozenset(switches)],
                "removed_alone": value[frozenset()] - value[frozenset({switch})],
                "shapley": shapley,
            }
        )
        means = part.groupby(level=["cycle", "group"]).mean()
        means["replicates"] = part.groupby(level=["cycle", "group"]).size()
        rows.append(means.reset_index().assign(switch=switch))
    out = pd.concat(rows, ignore_index=True)
    columns = ["cycle", "group", "switch", "drift", "drift_all_off", "removed_alone", "shapley"]
    return out[[*columns, "replicates"]].sort_values(["cycle", "group"], kind="stable")
