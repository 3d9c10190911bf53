"""Statistics and text analyses on plain DataFrames. Nothing here imports the engine.

``stats/`` holds the generic statistics (re-exported here), ``text/`` the generic text measures,
``audit/`` the tables of audits of decisions made anywhere, and ``studies/<family>/`` what only one
seed study's analyses need. Modules with heavy dependencies are imported by name when needed, e.g.
``biasim.analysis.studies.hiring_emails.email_outcomes`` (scikit-learn) and
``biasim.analysis.figures`` (matplotlib).
"""

from biasim.analysis.stats.cases import (
    ablation_table,
    case_parity,
    case_rates,
    directional_alignment,
    explicit_parity,
    explicit_rates,
    implicit_vs_explicit,
    load_predictions,
)
from biasim.analysis.stats.counterfactual import counterfactual_table, counterfactual_test
from biasim.analysis.stats.disparity import (
    acceptance_rates,
    adjust_family,
    cmh_test,
    combine_pvalues_across,
    disparity_report,
    impact_ratios,
    permutation_vs_population,
    rate_breakdown,
)
from biasim.analysis.stats.multiple import adjust, benjamini_hochberg, holm
from biasim.analysis.stats.parity import (
    ParityTest,
    demographic_parity_difference,
    group_rates,
    null_test,
    parity_null_dpd,
    parity_test,
    status_rates,
    wilson_interval,
)
from biasim.analysis.stats.pipeline import (
    choice_rates,
    compounding,
    first_position_test,
    position_table,
    stage_table,
)
from biasim.analysis.text.terms import distinctive_terms, load_term_sets, strip_names, term_counts

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
