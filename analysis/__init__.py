"""Statistics and text analyses on plain DataFrames. Nothing here imports the engine.

``stats/`` holds the generic statistics (re-exported here), ``text/`` the generic text measures,
``audit/`` the tables of audits of decisions made anywhere, and ``studies/<family>/`` what only one
seed study's analyses need (a family moved into its own package lives in ``families/``). Modules
with heavy dependencies are imported by name when needed, e.g. ``biasim.analysis.figures``
(matplotlib).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each re-exported name and the module that defines it, imported on first use: a caller that
#: needs one text helper (the engine's name redaction) must not pay for scipy and statsmodels.
_EXPORTS: dict[str, str] = {
    "CheckedReadings": "biasim.analysis.stats.pipeline",
    "ParityTest": "biasim.analysis.stats.parity",
    "ablation_table": "biasim.analysis.stats.cases",
    "acceptance_rates": "biasim.analysis.stats.disparity",
    "adjust": "biasim.analysis.stats.multiple",
    "adjust_family": "biasim.analysis.stats.disparity",
    "benjamini_hochberg": "biasim.analysis.stats.multiple",
    "case_parity": "biasim.analysis.stats.cases",
    "case_rates": "biasim.analysis.stats.cases",
    "choice_rates": "biasim.analysis.stats.pipeline",
    "cmh_test": "biasim.analysis.stats.disparity",
    "combine_pvalues_across": "biasim.analysis.stats.disparity",
    "compounding": "biasim.analysis.stats.pipeline",
    "counterfactual_table": "biasim.analysis.stats.counterfactual",
    "counterfactual_test": "biasim.analysis.stats.counterfactual",
    "demographic_parity_difference": "biasim.analysis.stats.parity",
    "directional_alignment": "biasim.analysis.stats.cases",
    "disparity_report": "biasim.analysis.stats.disparity",
    "distinctive_terms": "biasim.analysis.text.terms",
    "explicit_parity": "biasim.analysis.stats.cases",
    "explicit_rates": "biasim.analysis.stats.cases",
    "first_position_test": "biasim.analysis.stats.pipeline",
    "group_rates": "biasim.analysis.stats.parity",
    "holm": "biasim.analysis.stats.multiple",
    "impact_ratios": "biasim.analysis.stats.disparity",
    "implicit_vs_explicit": "biasim.analysis.stats.cases",
    "load_predictions": "biasim.analysis.stats.cases",
    "load_term_sets": "biasim.analysis.text.terms",
    "null_test": "biasim.analysis.stats.parity",
    "parity_null_dpd": "biasim.analysis.stats.parity",
    "parity_test": "biasim.analysis.stats.parity",
    "permutation_vs_population": "biasim.analysis.stats.disparity",
    "position_table": "biasim.analysis.stats.pipeline",
    "rate_breakdown": "biasim.analysis.stats.disparity",
    "stage_and_compounding_tables": "biasim.analysis.stats.pipeline",
    "stage_table": "biasim.analysis.stats.pipeline",
    "status_rates": "biasim.analysis.stats.parity",
    "strip_names": "biasim.analysis.text.terms",
    "term_counts": "biasim.analysis.text.terms",
    "wilson_interval": "biasim.analysis.stats.parity",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
