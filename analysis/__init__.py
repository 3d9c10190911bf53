"""Statistics and text analyses on plain DataFrames. Nothing here imports the engine.

The statistics are re-exported here. Two modules with heavy dependencies are imported by name
when needed: ``biasim.analysis.email_outcomes`` (hiring-email outcome classifiers, scikit-learn) and
``biasim.analysis.figures`` (the papers' figures, matplotlib).
"""

from .cases import (
    ablation_table,
    case_parity,
    case_rates,
    directional_alignment,
    explicit_parity,
    explicit_rates,
    implicit_vs_explicit,
    load_predictions,
)
from .counterfactual import counterfactual_table, counterfactual_test
from .disparity import (
    acceptance_rates,
    adjust_family,
    cmh_test,
    combine_pvalues_across,
    disparity_report,
    impact_ratios,
    permutation_vs_population,
    rate_breakdown,
)
from .multiple import adjust, benjamini_hochberg, holm
from .parity import (
    ParityTest,
    demographic_parity_difference,
    group_rates,
    null_test,
    parity_null_dpd,
    parity_test,
    status_rates,
    wilson_interval,
)
from .pipeline import (
    choice_rates,
    compounding,
    first_position_test,
    position_table,
    stage_table,
)
from .terms import distinctive_terms, load_term_sets, strip_names, term_counts

__all__ = [
    "ParityTest",
    "ablation_table",
    "acceptance_rates",
    "adjust",
    "adjust_family",
    "benjamini_hochberg",
    "case_parity",
    "case_rates",
    "choice_rates",
    "cmh_test",
    "combine_pvalues_across",
    "compounding",
    "counterfactual_table",
    "counterfactual_test",
    "demographic_parity_difference",
    "directional_alignment",
    "disparity_report",
    "distinctive_terms",
    "explicit_parity",
    "explicit_rates",
    "first_position_test",
    "group_rates",
    "holm",
    "impact_ratios",
    "implicit_vs_explicit",
    "load_predictions",
    "load_term_sets",
    "null_test",
    "parity_null_dpd",
    "parity_test",
    "permutation_vs_population",
    "position_table",
    "rate_breakdown",
    "stage_table",
    "status_rates",
    "strip_names",
    "term_counts",
    "wilson_interval",
]
