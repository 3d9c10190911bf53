"""Columns several declared tables share, each declared once: a group's value headed by its
group column, a 95% interval and a p-value adjusted across a family."""

from __future__ import annotations

from biasim.simulator.common.html import Column


def group_value(label: str = "{key}") -> Column:
    """The group's value (``value``), headed by the group column's name (``{key}``: the key
    of a table per group column)."""
    return Column("value", label, description="The group's value.")


def interval(low: str, high: str, how: str) -> Column:
    """A 95% interval from ``low`` to ``high``, drawn ``how``."""
    return Column(low, "95% CI", "ci", upper=high, description=how)


def p_adjusted(across: str) -> Column:
    """The p-value adjusted by the result's ``adjust`` across ``across``."""
    return Column("p_adjusted", "p ({adjust})", "p", description=f"Adjusted across {across}.")
