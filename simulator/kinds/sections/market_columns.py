"""Columns the market kinds' tables share (``market``, ``market_effects``), each declared once:
the cycle, the group, the replicate markets counted (the unit of every interval and test of a
market) and a t interval over them."""

from __future__ import annotations

from biasim.simulator.common.html import Column

#: The cycle of a market (0: the initial workforce, before any hiring).
CYCLE = Column("cycle", "cycle", "int", description="The cycle (0: the initial workforce).")


def group(label: str = "{by}") -> Column:
    """The group, headed by the persona axis counted (``{by}``: the result's field)."""
    return Column("group", label, "text", description="The group (a value of `by`).")


def markets(key: str) -> Column:
    """How many replicate markets a row holds: the unit of its interval or test."""
    return Column(key, "markets", "int", description="Replicate markets (the unit).")


def over_markets(low: str, high: str, label: str = "interval") -> Column:
    """A t interval from ``low`` to ``high`` over replicate markets (none with one market)."""
    return Column(
        low,
        label,
        "ci",
        upper=high,
        description="A t interval over replicate markets (None with one market).",
    )
