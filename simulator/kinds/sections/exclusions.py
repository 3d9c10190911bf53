"""How every decision kind shows refusals and invalid answers (``analysis.stats.refusals``):
the validity test and the exclusion bounds per case, declared once as a table of the result
(console, page, CSV file and the summary's schema alike)."""

from __future__ import annotations

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import ResultTable

NOTE = (
    "validity = largest minus smallest share of valid answers between groups; DPD as is "
    "(among valid answers), with every excluded answer counted as not targeted (negative) and "
    "as targeted (positive), each tested with the unit named. 'includes parity' = in some "
    "treatment of the excluded answers the gap is gone or not significant: the headline may "
    "come from who is excluded."
)


def _treated(treatment: str, label: str, how: str) -> tuple[Column, Column]:
    """The DPD under one treatment of the excluded answers, and its test's p."""
    return (
        Column(f"dpd_{treatment}", label, ".3f", description=f"DPD, {how}."),
        Column(f"p_{treatment}", "p", "p", description="Its p."),
    )


EXCLUSIONS = ResultTable(
    key="exclusions",
    title="Refusals and invalid answers: validity and exclusion bounds",
    columns=(
        Column("n_excluded", "excluded", "int", description="Answers excluded (invalid)."),
        Column("validity_gap", "validity", ".3f", description="Spread of valid shares."),
        Column("validity_p_value", "p", "p", description="Its test's p."),
        *_treated("valid_only", "DPD", "valid answers only"),
        *_treated("excluded_as_negative", "if negative", "excluded answers as not targeted"),
        *_treated("excluded_as_positive", "if positive", "excluded answers as targeted"),
        Column(
            "bounds_include_parity",
            "includes parity",
            "bool",
            description="Whether some treatment of the excluded answers leaves no gap.",
        ),
        Column("test", "test", description="The test of the DPDs and its unit."),
    ),
    description="Validity test and exclusion bounds per case with an excluded answer.",
    note=NOTE,
)
