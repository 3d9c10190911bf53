"""Options that several kinds' specs share, declared once: the same name, type and meaning
(each kind still says in its own words what its option adjusts or counts)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

#: How a family of p-values is adjusted (``analysis.stats.multiple``): Holm, Benjamini-Hochberg
#: or not at all.
Adjustment = Literal["holm", "bh", "none"]


def groups_field() -> Any:
    """``groups``: the persona axes whose values are the groups compared."""
    return Field(min_length=1, description="Persona axes defining groups.")


def positive_field(share: str = "share") -> Any:
    """``positive``: the target value whose ``share`` (of pairings, of picks) is reported."""
    return Field(
        None, description=f"Target value whose {share} is reported (default: the first value)."
    )


def category_field(example: str) -> Any:
    """``category``: the items file's column that groups the items (``example``)."""
    return Field(None, description=f"Column of the items file grouping items ({example}).")


def chance_alpha_field() -> Any:
    """``alpha``: the level of each item's test against chance."""
    return Field(0.05, gt=0, lt=1, description="Level of the test against chance.")


def paper_count_adjust_field(across: str) -> Any:
    """``adjust``: the adjustment across ``across``, none by default (the paper counts the
    items whose unadjusted test rejects chance)."""
    return Field("none", description=f"Adjustment across {across} (`none`: the paper's count).")


def model_field(model: str, where: str) -> Any:
    """An optional model a kind loads: a local folder or a hub id (a relative folder resolves
    beside the study file; ``kinds.base.model_problem`` checks it at validate). ``model``:
    what it must be; ``where``: what else sets it or what follows from leaving it out."""
    return Field(None, description=f"{model}: a local folder or a hub id; {where}")
