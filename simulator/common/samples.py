"""The small-sample line: one wording wherever a table rests on too few answers or units."""

from __future__ import annotations

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
