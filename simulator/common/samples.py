"""The small-sample line: one wording wherever a table rests on too few answers or units."""

from __future__ import annotations

from typing import Any

#: Below this many valid answers in a group (or units, e.g. the pools behind a pipeline's or
#: a policy experiment's tables), intervals are wide and the report says so.
SMALL_N = 30


def small_sample(what: str) -> str:
    """The line for ``what`` (e.g. "the smallest group has 10 valid answers"), which is fewer
    than :data:`SMALL_N`."""
    return (
        f"Small samples: {what} (fewer than {SMALL_N}); intervals are wide and a "
        "non-significant test is weak evidence of parity."
    )


def few_pools(name: str, pools: int) -> str | None:
    """The line for an analysis whose tables rest on ``pools`` first-stage pools, when few."""
    if pools >= SMALL_N:
        return None
    return small_sample(f"the tables of `{name}` rest on {pools} first-stage pools")


def unreachable(tests: list[dict[str, Any]], what: str, alpha: float = 0.05) -> str | None:
    """The line for tests whose units allow no p below ``alpha`` whatever the data (their
    ``smallest_p``: a sign-flip test over 3 replicate markets can give no p below 0.25), so
    a p above alpha there says nothing of the effect."""
    stuck = [t for t in tests if (t.get("smallest_p") or 0) >= alpha]
    if not stuck:
        return None
    units = ", ".join(dict.fromkeys(str(t["n_units"]) for t in stuck))
    floor = min(t["smallest_p"] for t in stuck)
    return (
        f"Too few {what} to test: with {units}, no p below {floor:.2g} is reachable whatever "
        f"the data, so these tests cannot find an effect at {alpha:g}."
    )
