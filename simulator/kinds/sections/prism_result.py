"""What the ``prism`` kind computes, declared once: its tables (``ResultTable``) and the typed
results of a study's analysis (:class:`PrismResult`, also ``analyze prism`` with a paired
column) and of ``analyze prism`` over unpaired texts (:class:`PrismTextsResult`). The console,
the page, the CSV files and summary.json's schema are drawn from these declarations."""

from __future__ import annotations

from dataclasses import dataclass, field

from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import Records, ResultTable
from biasim.simulator.common.results import about, tabled


def _score(key: str, label: str, what: str) -> Column:
    """A PRISM score (or a statistic on its scale), as every table shows one."""
    return Column(key, label, ".3f", description=what)


def _one_sided(key: str, label: str, h1: str, opposite: str) -> tuple[Column, Column]:
    """A one-sided test's p (``<key>``, H1 ``h1``) and the other side's (``<key>_opposite``),
    as ``analysis.studies.prism.stats`` writes both."""
    return (
        Column(key, label, "p", description=f"One-sided p, H1 {h1}."),
        Column(f"{key}_opposite", "p opposite", "p", description=f"One-sided p, H1 {opposite}."),
    )


def _correlation(name: str, stat: str, label: str) -> tuple[Column, Column]:
    """A correlation coefficient (``<name>_<stat>``) and its two-sided p (``<name>_p``)."""
    return (
        _score(f"{name}_{stat}", label, f"{name.title()} {stat}."),
        Column(f"{name}_p", f"p ({label})", "p", description="Its two-sided p."),
    )


def _against_baseline(prefix: str, side: str) -> tuple[Column, Column, Column]:
    """A side's no-gender-signal baseline, its 95 % null range and the reading of the mean
    against it (``<prefix>baseline``, ``<prefix>low``/``high``, ``<prefix>verdict``)."""
    return (
        _score(f"{prefix}baseline", "baseline", f"Mean score of the {side} with dealt words."),
        Column(
            f"{prefix}low",
            "95 % null",
            "ci",
            upper=f"{prefix}high",
            description="Its range over the dealings.",
        ),
        Column(f"{prefix}verdict", "reading", "text", description="masculine, feminine or within."),
    )


#: Postings with both scores, and each side's mean: a posting's table and the models'.
PAIRS = Column("pairs", "pairs", "int", description="Postings with both scores (one pair each).")
POSTING_MEAN = _score("posting_mean", "posting", "Mean posting score.")
APPLICATION_MEAN = _score("application_mean", "application", "Mean of the applications' means.")

WORD_LISTS = ResultTable(
    key="word_list_sizes",
    title="words in the masked LM's vocabulary",
    columns=(
        Column("words", "words", "int", description="Words kept in the list."),
        Column("dropped", "dropped", "text", description="Words not in the vocabulary."),
        _score(
            "no_signal_token_score",
            "no-signal token",
            "Mean score of a token with no gender signal, lists of these sizes.",
        ),
    ),
    description="Words per list, after the vocabulary filter.",
    note="no-signal token = the score a token with no gender signal gets on average with "
    "lists of these sizes (read scores against it, not against 0).",
    file="word_lists",
)
EXCLUSIONS = ResultTable(
    key="exclusions",
    title="applications left out",
    columns=(Column("n", "n", "int", description="Applications left out for this reason."),),
    description="Applications left out, by model and reason.",
)
SUMMARY = ResultTable(
    key="summary",
    title="mean scores, posting -> application (+ = masculine)",
    columns=(
        PAIRS,
        Column("excluded_pairs", "excluded", "int", description="Postings missing a score."),
        POSTING_MEAN,
        _score("posting_magnitude", "|posting|", "Mean absolute posting score."),
        _score("posting_sd", "sd", "Its sd."),
        APPLICATION_MEAN,
        _score("application_magnitude", "|application|", "Mean absolute application score."),
        _score("application_sd", "sd", "Its sd."),
    ),
    description="Score means per dimension, posting and application.",
    note="One pair per posting: its score and its applications' mean (the paper's Table 2).",
)
ARROWS = ResultTable(
    key="arrows",
    title="shifts, posting -> application (the paper's Table 1)",
    columns=tuple(
        Column(key, key, "text", description=f"Shift of the {what}: ↑, ↓ or –.")
        for key, what in (("mean", "mean"), ("magnitude", "|score|"), ("variance", "variance"))
    ),
    description="Posting-to-application shifts drawn in the scatter.",
    note="↑ / ↓ = the application side is higher / lower at two-sided 0.05; – = neither.",
)
FIT = ResultTable(
    key="fit",
    title="application on posting score",
    columns=(
        Column("dbscan", "DBSCAN", "bool", description="Whether DBSCAN outliers were removed."),
        Column("n", "n", "int", description="Pairs fitted."),
        Column("removed", "removed", "int", description="Pairs DBSCAN removed."),
        *_correlation("pearson", "r", "r"),
        _score("slope", "slope", "Least-squares slope."),
        _score("intercept", "intercept", "Its intercept."),
        *_correlation("spearman", "rho", "rho"),
    ),
    description="Regression of application on posting scores, per dimension.",
    note="DBSCAN yes: after removing outliers (eps 0.5, min_samples 30; - when fewer than 3 "
    "pairs are left), as the paper's Figure 3; no: every pair.",
)
SHIFT = ResultTable(
    key="shift",
    title="shift of the scores (Wilcoxon signed-rank, one pair per posting)",
    columns=(
        Column("mean_statistic", "W mean", ".1f", description="Signed-rank statistic, scores."),
        *_one_sided("mean_p", "p mean", "applications more masculine", "more feminine"),
        Column("magnitude_statistic", "W |x|", ".1f", description="Statistic, |scores|."),
        *_one_sided("magnitude_p", "p |x|", "further from 0", "closer to 0"),
    ),
    description="Paired test of the shift, on one pair per posting.",
    note="mean: H1 the applications are more masculine than their posting; |x|: H1 further "
    "from 0 (the paper's Tables 3-4).",
)
VARIANCE = ResultTable(
    key="variance",
    title="variance of postings vs applications",
    columns=(
        Column("levene_statistic", "Levene", ".3f", description="Levene's statistic."),
        Column("levene_p", "p", "p", description="Its two-sided p (the paper's Table 5)."),
        Column("levene_p_one_sided", "p one-sided", "p", description="Its one-sided p."),
        *_one_sided(
            "paired_p",
            "p paired",
            "postings vary more (paired Brown-Forsythe)",
            "applications vary more",
        ),
        _score("var_postings", "var postings", "Variance of the postings."),
        _score("var_applications", "var applications", "Variance of the applications' means."),
    ),
    description="Variance of postings vs applications.",
    note="Levene treats the two sides as independent samples, as the paper; the paired "
    "Brown-Forsythe test respects the pairs.",
)
BASELINE = ResultTable(
    key="baseline",
    title="scores against the no-gender-signal baseline",
    columns=(
        _score("observed", "mean", "Mean score of the texts."),
        *_against_baseline("", "texts"),
        Column("p", "p", "p", description="Permutation p of the mean against the baseline."),
        Column("texts", "texts", "int", description="Texts the baseline used."),
        Column("permutations", "dealings", "int", description="Random dealings of the words."),
    ),
    description="Each side's mean score against its no-gender-signal baseline.",
    note="baseline = the mean score the same texts get when the pooled words of a dimension "
    "are dealt at random to the feminine and masculine lists (same sizes; a text with no "
    "gender signal); 95 % null = its range over the dealings; p = permutation test of the "
    "observed mean against them (unit: the words' gender labels, one dealing for every text). "
    "masculine / feminine only beyond the baseline at 0.05; mean = over the texts the "
    "baseline used (up to 4000 masked tokens per side).",
)
MODELS = ResultTable(
    key="model_comparison",
    title="models side by side",
    columns=(
        PAIRS,
        POSTING_MEAN,
        APPLICATION_MEAN,
        *_against_baseline("posting_", "postings"),
        *_against_baseline("application_", "applications"),
        Column("pearson_r", "r all", ".3f", description="Pearson r over every pair."),
    ),
    description="Models compared, each scored with its own masked LM.",
    file="models",
)
VALIDATION = ResultTable(
    key="validation",
    title="validation against human ratings (the paper's Figure 4a)",
    columns=(
        Column("n", "rated texts", "int", description="Rated texts scored."),
        Column("spearman_rho", "rho", ".3f", description="Spearman rho with the ratings."),
        Column("low", "95 % CI", "ci", upper="high", description="Its 95 % interval."),
    ),
    description="Each dimension's Spearman rho with human ratings of the same texts.",
)
#: ``DataFrame.describe``'s statistics of each score column, and the labels not their keys.
_DESCRIBED = ("mean", "std", "min", "25%", "50%", "75%", "max")
_LABELS = {"std": "sd", "50%": "median"}
SCORE_SUMMARY = ResultTable(
    key="score_summary",
    title="scores of the texts",
    columns=(
        Column("count", "texts", "int", description="Texts scored."),
        *(_score(k, _LABELS.get(k, k), f"The scores' {_LABELS.get(k, k)}.") for k in _DESCRIBED),
    ),
    description="Scores per dimension over the texts scored.",
)
TEXT_EXCLUSIONS = ResultTable(
    key="exclusions",
    title="texts left out",
    columns=(Column("n", "n", "int", description="Texts left out for this reason."),),
    description="Texts left out, by reason.",
)


#: The baselines' sentences, in both results.
READINGS = about("Each side's mean read against its baseline, in words.")
WARNINGS = about("Dimensions whose baseline is far from 0: not read against 0.")


@dataclass(kw_only=True)
class PrismResult:
    """What ``prism`` computes over postings and the applications answering them."""

    masked_lm: str = field(metadata=about("The masked LM(s) scoring."))
    word_lists: str = field(metadata=about("Where the word lists are."))
    alpha: float = field(metadata=about("Top % of pooled probabilities kept."))
    masked_lm_by_model: dict[str, str] | None = field(
        default=None, metadata=about("Model label -> the masked LM that scored its texts.")
    )
    applications: int = field(metadata=about("Applications scored.", {"minimum": 0}))
    postings: int = field(metadata=about("Postings with one pair each.", {"minimum": 0}))
    texts_scored_now: int = field(metadata=about("Texts not read from the cache.", {"minimum": 0}))
    excluded_applications: int = field(metadata=about("Applications left out.", {"minimum": 0}))
    word_list_sizes: Records = field(metadata=tabled(WORD_LISTS))
    exclusions: Records = field(metadata=tabled(EXCLUSIONS))
    summary: Records = field(metadata=tabled(SUMMARY))
    arrows: Records = field(metadata=tabled(ARROWS))
    fit: Records = field(metadata=tabled(FIT))
    shift: Records = field(metadata=tabled(SHIFT))
    variance: Records = field(metadata=tabled(VARIANCE))
    baseline: Records = field(metadata=tabled(BASELINE))
    baseline_readings: list[str] = field(metadata=READINGS)
    baseline_warnings: list[str] = field(metadata=WARNINGS)
    model_comparison: Records | None = field(default=None, metadata=tabled(MODELS))
    validation: Records | None = field(default=None, metadata=tabled(VALIDATION))


@dataclass(kw_only=True)
class PrismTextsResult:
    """What ``analyze prism`` computes over texts answering nothing (no paired column)."""

    rows: int = field(metadata=about("Texts in the CSV.", {"minimum": 0}))
    texts_scored_now: int = field(metadata=about("Texts not read from the cache.", {"minimum": 0}))
    device: str = field(metadata=about("Where the masked LM ran."))
    dropped: dict[str, list[str]] = field(
        metadata=about("`dimension.side` -> its words not in the masked LM's vocabulary.")
    )
    score_summary: Records = field(metadata=tabled(SCORE_SUMMARY))
    exclusions: Records = field(metadata=tabled(TEXT_EXCLUSIONS))
    baseline: Records = field(metadata=tabled(BASELINE))
    baseline_readings: list[str] = field(metadata=READINGS)
    baseline_warnings: list[str] = field(metadata=WARNINGS)
    validation: Records | None = field(default=None, metadata=tabled(VALIDATION))
