"""What the ``prism`` kind computes, declared once: its tables (``ResultTable``, from its
codebook ``prism_result.tables.yaml``) and the typed results of a study's analysis
(:class:`PrismResult`, also ``analyze prism`` with a paired column) and of ``analyze prism``
over unpaired texts (:class:`PrismTextsResult`). The console, the page, the CSV files and
summary.json's schema are drawn from these declarations."""

from __future__ import annotations

from dataclasses import dataclass, field

from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, tabled
from biasim.simulator.kinds.sections.codebook import tables_of

#: The tables, declared in prism_result.tables.yaml (the kind's codebook).
TABLES = tables_of(__name__)


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
    word_list_sizes: Records = field(metadata=tabled(TABLES["word_list_sizes"]))
    exclusions: Records = field(metadata=tabled(TABLES["exclusions"]))
    summary: Records = field(metadata=tabled(TABLES["summary"]))
    arrows: Records = field(metadata=tabled(TABLES["arrows"]))
    fit: Records = field(metadata=tabled(TABLES["fit"]))
    shift: Records = field(metadata=tabled(TABLES["shift"]))
    variance: Records = field(metadata=tabled(TABLES["variance"]))
    baseline: Records = field(metadata=tabled(TABLES["baseline"]))
    baseline_readings: list[str] = field(metadata=READINGS)
    baseline_warnings: list[str] = field(metadata=WARNINGS)
    model_comparison: Records | None = field(
        default=None, metadata=tabled(TABLES["model_comparison"])
    )
    validation: Records | None = field(default=None, metadata=tabled(TABLES["validation"]))


@dataclass(kw_only=True)
class PrismTextsResult:
    """What ``analyze prism`` computes over texts answering nothing (no paired column)."""

    rows: int = field(metadata=about("Texts in the CSV.", {"minimum": 0}))
    texts_scored_now: int = field(metadata=about("Texts not read from the cache.", {"minimum": 0}))
    device: str = field(metadata=about("Where the masked LM ran."))
    dropped: dict[str, list[str]] = field(
        metadata=about("`dimension.side` -> its words not in the masked LM's vocabulary.")
    )
    score_summary: Records = field(metadata=tabled(TABLES["score_summary"]))
    exclusions: Records = field(metadata=tabled(TABLES["text_exclusions"]))
    baseline: Records = field(metadata=tabled(TABLES["baseline"]))
    baseline_readings: list[str] = field(metadata=READINGS)
    baseline_warnings: list[str] = field(metadata=WARNINGS)
    validation: Records | None = field(default=None, metadata=tabled(TABLES["validation"]))
