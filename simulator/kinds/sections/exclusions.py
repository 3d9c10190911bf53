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

EXCLUSIONS = ResultTable(
    key="exclusions",
    title="Refusals and invalid answers: validity and exclusion bounds",
    columns=(
        Column("n_excluded", "excluded", "int", description="Answers excluded (invalid)."),
        Column("validity_gap", "validity", ".3f", description="Spread of valid shares."),
        Column("validity_p_value", "p", "p", description="Its test's p."),
        Column("dpd_valid_only", "DPD", ".3f", description="DPD among valid answers."),
        Column("p_valid_only", "p", "p", description="Its p."),
        Column(
            "dpd_excluded_as_negative",
            "if negative",
            ".3f",
            description="DPD with every excluded answer as not targeted.",
        ),
        Column("p_excluded_as_negative", "p", "p", description="Its p."),
        Column(
            "dpd_excluded_as_positive",
            "if positive",
            ".3f",
            description="DPD with every excluded answer as targeted.",
        ),
        Column("p_excluded_as_positive", "p", "p", description="Its p."),
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
