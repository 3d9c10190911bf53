"""The libraries and analysis modules the kinds compute with, each named once here and imported
on first use: a kind is loaded to read its part of a study file (``biasim validate``), long
before, if ever, it runs a test or draws a figure, and what these bring (pandas, scipy.stats,
statsmodels, matplotlib) costs seconds to import."""

from biasim.simulator.common.lazy import lazy_module

pd = lazy_module("pandas")

# Generic statistics (analysis/stats/).
case_stats = lazy_module("biasim.analysis.stats.cases")
clusters = lazy_module("biasim.analysis.stats.clusters")
columns = lazy_module("biasim.analysis.stats.columns")
conditions = lazy_module("biasim.analysis.stats.conditions")
counterfactual = lazy_module("biasim.analysis.stats.counterfactual")
excess_stats = lazy_module("biasim.analysis.stats.excess")
expected_stats = lazy_module("biasim.analysis.stats.expected")
grading = lazy_module("biasim.analysis.stats.grading")
market_stats = lazy_module("biasim.analysis.stats.market")
model_tests = lazy_module("biasim.analysis.stats.models")
multiple = lazy_module("biasim.analysis.stats.multiple")
parity = lazy_module("biasim.analysis.stats.parity")
pipeline_stats = lazy_module("biasim.analysis.stats.pipeline")
policy_stats = lazy_module("biasim.analysis.stats.policy")
refusals = lazy_module("biasim.analysis.stats.refusals")
unit_models = lazy_module("biasim.analysis.stats.unit_models")
unit_stats = lazy_module("biasim.analysis.stats.units")

# Text measures (analysis/text/) and figures.
classifier_metrics = lazy_module("biasim.analysis.text.classifier_metrics")
terms = lazy_module("biasim.analysis.text.terms")
unit_terms = lazy_module("biasim.analysis.text.unit_terms")
weat = lazy_module("biasim.analysis.text.weat")
figures = lazy_module("biasim.analysis.figures")
market_figures = lazy_module("biasim.analysis.market_figures")

# The seed studies' own analyses (analysis/studies/).
association = lazy_module("biasim.analysis.studies.bias_transmission.association")
ceiling_effects = lazy_module("biasim.analysis.studies.bias_transmission.ceiling_effects")
hiring_summaries = lazy_module("biasim.analysis.studies.bias_transmission.hiring_summaries")
picks = lazy_module("biasim.analysis.studies.bias_transmission.picks")
traits = lazy_module("biasim.analysis.studies.bias_transmission.traits")
transmission_figures = lazy_module("biasim.analysis.studies.bias_transmission.figures")
letters_tables = lazy_module("biasim.analysis.studies.letters.tables")
