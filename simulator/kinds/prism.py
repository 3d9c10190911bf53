"""Kind ``prism``: PRISM scores of texts written in answer to other texts (seed 003, Ding et
al. 2024). Each application and the posting it answers are scored on every word-list
dimension with a masked language model; then the posting -> application tables (fit after
DBSCAN and without, Wilcoxon mean and magnitude shifts, Levene and the paired Brown-Forsythe
test, Table 1's arrows) and Figures 3 and 5, per model. Scores are cached in the run
directory, so ``biasim analyze`` never re-scores a text."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from biasim.simulator.common.results import summary_of
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    model_problem,
    resolve_data_path,
    slug,
)
from biasim.simulator.kinds.lazy import pd
from biasim.simulator.kinds.sections import prism_result as declared
from biasim.simulator.kinds.sections.prism_baseline import model_baselines
from biasim.simulator.kinds.sections.prism_validation import (
    CAPTION as VALIDATION_CAPTION,
)
from biasim.simulator.kinds.sections.prism_validation import (
    add_validation,
    ratings_problem,
    read_ratings,
)
from biasim.simulator.kinds.spec_fields import model_field
from biasim.simulator.study.options import POSTING_FACTOR

#: The score cache's file in the run directory.
SCORE_CACHE = "prism_scores.sqlite"
#: The no-gender-signal baselines kept in the run directory (a masked-LM pass each).
BASELINE_CACHE = "prism_baseline.json"
HOW_TO = (
    "set `masked_lm:` in this analysis to a local folder holding an AutoModelForMaskedLM and "
    "its tokenizer (or a hub id such as bert-base-uncased, the paper's, if it is in your "
    "Hugging Face cache), or run with `--masked-lm PATH`"
)
NO_MASKED_LM = f"PRISM needs a masked language model and none is given: {HOW_TO}"
SIDES = ("posting", "application")


class PrismSpec(AnalysisSpec):
    """PRISM bias scores of applications and the postings they answer (seed 003)."""

    kind: Literal["prism"]
    stage: str = Field("apply", description="Stage whose text answers the posting.")
    field: str = Field("text", description="Field holding that text (free-text stages: `text`).")
    posting: str = Field(
        "posting_text",
        description="Results column holding the text answered (a recorded factor variable).",
    )
    masked_lm: str | None = model_field(
        "AutoModelForMaskedLM",
        "bert-base-uncased is the paper's, `--masked-lm PATH` sets it. Required.",
    )
    word_lists: str | None = Field(
        None,
        description='JSON {"words": {dim: {"fem": [...], "mas": [...]}}}; the paper\'s example '
        "words when absent. Filtered to the model's vocabulary as the authors did.",
    )
    masked_lm_by_model: dict[str, str] | None = Field(
        None,
        description="Model label -> masked LM scoring that model's texts instead of "
        "`masked_lm` (`biasim compare` of runs scored with different masked LMs sets it).",
    )
    human_ratings: str | None = Field(
        None,
        description="CSV of texts people rated for gendered wording (columns `text` and a "
        "numeric `rating`, higher = more masculine, e.g. the paper's 1-13 with 7 neutral): "
        "each dimension's Spearman rho with the ratings, with its 95 % interval, and the "
        "scatter (the paper's Figure 4a).",
    )
    alpha: float = Field(23.0, gt=0, le=100, description="Top % of pooled probabilities kept.")
    batch_size: int | None = Field(
        None,
        ge=1,
        description="Masked copies per forward pass; default 64 on the CPU, more on a GPU.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where the masked LM runs: `auto` is a CUDA GPU when torch sees one, else "
        "the CPU. Scores agree within float tolerance.",
    )


def _folder_of(facts: StudyFacts, name: str) -> Path | None:
    """The folder of the study file that wrote this analysis's field ``name`` (relative paths
    resolve there), or None when an option gave it."""
    file, _ = facts.smap.locate((*facts.at, name))
    return Path(file).parent if file and Path(file).is_file() else None


def word_list_problem(word_lists: Path | None, model_folder: Path | None) -> str | None:
    """Why the word lists cannot be used (None when they can): unreadable, malformed, or, for
    a local model, a side of a dimension with no word in its vocabulary. Only the tokenizer
    is loaded, so a study fails here rather than after its calls."""
    import json

    from biasim.analysis.studies.prism.score import (
        EXAMPLE_WORD_LISTS,
        filter_to_vocabulary,
        read_word_lists,
    )

    try:
        lists = read_word_lists(word_lists or EXAMPLE_WORD_LISTS)
    except OSError as exc:
        return f"cannot read `{word_lists}`: {exc.strerror or exc}"
    except (ValueError, AttributeError, json.JSONDecodeError) as exc:
        return f"`{word_lists}`: {exc}"
    if model_folder is None:
        return None
    from transformers import AutoTokenizer

    try:
        filter_to_vocabulary(lists, AutoTokenizer.from_pretrained(str(model_folder)).get_vocab())
    except ValueError as exc:
        return f"{exc} (the tokenizer of {model_folder})"
    return None


class PrismKind(AnalysisKind, spec=PrismSpec, result=declared.PrismResult):
    """PRISM scores of postings and applications, and the posting -> application tests."""

    title = "PRISM: gendered language, posting -> application"

    def check(self, spec: PrismSpec, facts: StudyFacts) -> None:
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        if spec.posting not in facts.columns:
            facts.problem(
                ("posting",),
                f"`{spec.posting}` is not a recorded factor variable; list it in "
                "`design.record` (it holds the text each application answers)",
            )
        folder = _folder_of(facts, "masked_lm")
        model_ok = False
        if spec.masked_lm is None:
            facts.problem(("masked_lm",), NO_MASKED_LM)
        else:
            reason = model_problem(spec.masked_lm, folder, HOW_TO, "a masked LM")
            if reason:
                facts.problem(("masked_lm",), reason)
            model_ok = reason is None
        for label, other in (spec.masked_lm_by_model or {}).items():
            reason = model_problem(other, folder, HOW_TO, "a masked LM")
            if reason:
                facts.problem(("masked_lm_by_model", label), reason)
        if spec.human_ratings is not None:
            where = resolve_data_path(spec.human_ratings, _folder_of(facts, "human_ratings"))
            why = ratings_problem(where)
            if why:
                facts.problem(("human_ratings",), why)
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            facts.problem(("masked_lm",), f"PRISM needs {' and '.join(missing)} installed")
        lists = (
            None
            if spec.word_lists is None
            else resolve_data_path(spec.word_lists, _folder_of(facts, "word_lists"))
        )
        local = model_ok and resolve_data_path(spec.masked_lm or "", folder).is_dir()
        reason = word_list_problem(
            lists, resolve_data_path(spec.masked_lm or "", folder) if local else None
        )
        if reason:
            facts.problem(("word_lists",), reason)

    def notes(self, spec: PrismSpec, data_dir: Path | None) -> list[str]:
        """Which masked LM and word lists the scores will come from."""
        lists = spec.word_lists or "the paper's example words (analysis/data, not its full lists)"
        return [f"masked LM {spec.masked_lm}, word lists {lists}, alpha {spec.alpha:g}"]

    def compute(self, results: pd.DataFrame, spec: PrismSpec, ctx: AnalysisContext) -> Section:
        assert spec.masked_lm is not None  # check() refuses a study without one
        rows = results[results["stage"] == spec.stage].reset_index(drop=True)
        lm_of = {
            m: (spec.masked_lm_by_model or {}).get(m, spec.masked_lm)
            for m in dict.fromkeys(rows["model_label"].astype(str))
        }
        parts = [
            _score_rows(rows[rows["model_label"].astype(str).map(lm_of) == lm], lm, spec, ctx)
            for lm in dict.fromkeys(lm_of.values())
        ] or [_score_rows(rows, spec.masked_lm, spec, ctx)]
        pairs = pd.concat([p.pairs for p in parts], ignore_index=True)
        several = len(parts) > 1
        settings: dict[str, Any] = {
            "masked_lm": ", ".join(dict.fromkeys(lm_of.values())) or spec.masked_lm,
            "word_lists": spec.word_lists or "paper's example words",
            "alpha": spec.alpha,
            "masked_lm_by_model": lm_of,
        }
        section = paired_section(
            pairs,
            parts[0].scorer,
            pd.concat(
                [p.lists.assign(masked_lm=p.masked_lm) if several else p.lists for p in parts],
                ignore_index=True,
            ),
            sum(p.fresh for p in parts),
            ctx.name,
            ctx.models_in(pairs),
            settings,
            pd.concat([p.baselines for p in parts], ignore_index=True),
        )
        if spec.human_ratings is not None:
            ratings = read_ratings(ctx.resolve(spec.human_ratings))
            add_validation(section, ctx.name, [(p.masked_lm, p.scorer) for p in parts], ratings)
        return section

    def headline(self, summary: dict[str, Any]) -> str:
        return (
            f"(PRISM, masked LM {summary['masked_lm']}, {summary['word_lists']}, alpha "
            f"{summary['alpha']:g}): {summary['applications']} applications to "
            f"{summary['postings']} postings, {summary['excluded_applications']} excluded; "
            f"{summary['texts_scored_now']} texts scored now (the rest from the cache)"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        """The masked LM of each model when they differ, and the baselines' warnings."""
        lm_of = summary.get("masked_lm_by_model") or {}
        out = []
        if len(set(lm_of.values())) > 1:
            out.append("masked LM per model: " + "; ".join(f"{m} {lm}" for m, lm in lm_of.items()))
        return out + [f"warning: {line}" for line in summary.get("baseline_warnings", [])]

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        """The models side by side, the validation per masked LM, then each model's two."""
        name = summary["name"]
        models = list(dict.fromkeys(r["model_label"] for r in summary["summary"]))
        out = [(slug(name, "models"), MODELS_CAPTION)] if len(models) > 1 else []
        lms = list(dict.fromkeys(r["masked_lm"] for r in summary.get("validation") or []))
        for lm in lms:
            tag = Path(lm.rstrip("/")).name if len(lms) > 1 else ""
            out.append((slug(name, tag, "validation"), f"{VALIDATION_CAPTION} ({lm})"))
        for model in models:
            tag = model if len(models) > 1 else ""
            for figure, caption in FIGURE_CAPTIONS.items():
                out.append((slug(name, tag, figure), f"{caption}, {model}" if tag else caption))
        return out


@dataclass
class _Scored:
    """One masked LM's scores of the rows it reads: pairs, baselines, word lists."""

    masked_lm: str
    scorer: Any
    pairs: pd.DataFrame
    lists: pd.DataFrame
    baselines: pd.DataFrame
    fresh: int


def _score_rows(
    rows: pd.DataFrame, masked_lm: str, spec: PrismSpec, ctx: AnalysisContext
) -> _Scored:
    """Score the postings and applications of ``rows`` with ``masked_lm`` (cached in the run
    directory) and measure each model's no-gender-signal baselines."""
    from biasim.analysis.studies.prism.scorer import vocabulary_scorer
    from biasim.analysis.text.scorers import ScoreCache, cached_scores

    rows = rows.reset_index(drop=True)
    scorer, dropped = vocabulary_scorer(
        str(ctx.resolve(masked_lm)),
        ctx.resolve(spec.word_lists) if spec.word_lists else None,
        alpha=spec.alpha,
        batch_size=spec.batch_size,
        progress=sys.stdout.isatty(),
        device=spec.device,
    )
    answered = rows["status"].eq("answered") & rows[spec.field].notna()
    postings = rows[spec.posting].fillna("").astype(str).tolist()
    applications = rows[spec.field].where(answered, "").astype(str).tolist()
    cache = ScoreCache(ctx.out_dir / SCORE_CACHE) if ctx.out_dir is not None else None
    try:
        table, fresh = cached_scores(scorer, [*postings, *applications], cache)
    finally:
        if cache is not None:
            cache.close()
    frame = table.frame()
    n = len(rows)
    key = POSTING_FACTOR if POSTING_FACTOR in rows else spec.posting
    ids = pd.DataFrame(
        {"model_label": rows["model_label"], "unit_id": rows["unit_id"], POSTING_FACTOR: rows[key]}
    )
    pairs = pair_scores(
        ids, frame.iloc[:n], frame.iloc[n:], answered, scorer.columns, rows["status"]
    )
    cache_path = ctx.out_dir / BASELINE_CACHE if ctx.out_dir is not None else None
    baselines = model_baselines(scorer, rows, postings, applications, answered, cache_path)
    lists = word_list_table(scorer, dropped)
    return _Scored(masked_lm, scorer, pairs, lists, baselines, fresh)


MODELS_CAPTION = (
    "Mean scores per model and dimension with each side's no-gender-signal baseline and its "
    "95 % null range (across masked LMs: the paper's Figures 6-7 as one comparison)"
)
FIGURE_CAPTIONS = {
    "scatter": "Application vs posting score per dimension, DBSCAN-filtered fit (the paper's "
    "Figure 3)",
    "histograms": "Posting and application scores per dimension (the paper's Figure 5)",
}


def paired_section(
    pairs: pd.DataFrame,
    scorer: Any,
    lists: pd.DataFrame,
    fresh: int,
    name: str,
    models: list[str],
    settings: dict[str, Any],
    baselines: pd.DataFrame,
) -> Section:
    """Tables, figures and summary of posting -> application pairs, per model.

    Args:
        pairs: :func:`pair_scores` with ``model_label`` among the ids.
        scorer: The PRISM scorer (its columns and dimensions).
        lists: :func:`word_list_table` (with ``masked_lm`` when several scored the texts).
        fresh: Texts scored now (not from the cache).
        name: Prefix of the tables and figures.
        models: Model labels in report order.
        settings: ``masked_lm``, ``word_lists`` and ``alpha`` as the summary shows them.
        baselines: Each model's no-gender-signal baselines (``model_baselines``).
    """
    from biasim.analysis.studies.prism.stats import one_pair_per_posting

    dims = list(scorer.word_lists)
    postings = one_pair_per_posting(pairs, ["model_label", POSTING_FACTOR], scorer.columns)
    section = Section(summary={})
    section.tables = {f"{name}_scores": pairs, f"{name}_postings": postings}
    merged = _per_model(section, postings, baselines, dims, name, models)
    exclusions = (
        pairs.loc[pairs["excluded"].notna()]
        .groupby(["model_label", "excluded"])
        .size()
        .rename("n")
        .reset_index()
        .rename(columns={"excluded": "reason"})
    )
    write = section.tables
    result = declared.PrismResult(
        **settings,
        applications=len(pairs),
        postings=len(postings),
        texts_scored_now=fresh,
        excluded_applications=int(pairs["excluded"].notna().sum()),
        word_list_sizes=declared.TABLES["word_list_sizes"].write(write, name, _labels_first(lists)),
        exclusions=declared.TABLES["exclusions"].write(write, name, exclusions),
        summary=declared.TABLES["summary"].write(write, name, merged["summary"]),
        arrows=declared.TABLES["arrows"].write(write, name, merged["arrows"]),
        fit=declared.TABLES["fit"].write(write, name, merged["fit"]),
        shift=declared.TABLES["shift"].write(write, name, merged["shift"]),
        variance=declared.TABLES["variance"].write(write, name, merged["variance"]),
        **baseline_summary(baselines, lists, write, name),
    )
    if len(models) > 1:
        from biasim.analysis.studies.prism.figures import plot_models
        from biasim.simulator.kinds.sections.prism_baseline import models_table

        lm_of = settings.get("masked_lm_by_model") or {}
        table = models_table(
            merged["summary"],
            merged["fit"],
            baselines,
            {m: lm_of.get(m, settings["masked_lm"]) for m in models},
        )
        result.model_comparison = declared.TABLES["model_comparison"].write(write, name, table)
        section.figures[slug(name, "models")] = plot_models(table, dims)
    section.summary = summary_of(result)
    return section


def _per_model(
    section: Section,
    postings: pd.DataFrame,
    baselines: pd.DataFrame,
    dims: list[str],
    name: str,
    models: list[str],
) -> dict[str, pd.DataFrame]:
    """The paper's tables of each model's pairs, joined (``model_label`` first), and each
    model's scatter and histograms into ``section``."""
    from biasim.analysis.studies.prism.figures import plot_histograms, plot_scatter_density
    from biasim.analysis.studies.prism.stats import prism_tables

    tables: dict[str, list[pd.DataFrame]] = {}
    for model in models:
        mine = postings[postings["model_label"] == model]
        got = prism_tables(mine, dims)
        for key, value in got.items():
            tables.setdefault(key, []).append(value.assign(model_label=model))
        tag = model if len(models) > 1 else ""
        section.figures[slug(name, tag, "scatter")] = plot_scatter_density(mine, got["fit"], dims)
        base = baselines[baselines["model_label"] == model]
        section.figures[slug(name, tag, "histograms")] = plot_histograms(mine, dims, None, base)
    return {k: _labels_first(pd.concat(v, ignore_index=True)) for k, v in tables.items()}


def _labels_first(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the columns naming its rows' model (``model_label``, ``masked_lm``)
    first: the declared tables show the leading text columns as the rows' labels."""
    first = [c for c in ("model_label", "masked_lm") if c in frame.columns]
    return frame[[*first, *[c for c in frame.columns if c not in first]]]


def word_list_table(scorer: Any, dropped: dict[str, list[str]]) -> pd.DataFrame:
    """Words kept and dropped per dimension and side, and the score a token with no gender
    signal gets on average with lists of these sizes (``no_signal_token_score``)."""
    from biasim.analysis.studies.prism.baseline import expected_no_signal_score

    return pd.DataFrame(
        [
            {
                "dimension": dim,
                "side": side,
                "words": len(getattr(wl, side)),
                "dropped": ", ".join(dropped.get(f"{dim}.{side}", [])),
                "no_signal_token_score": expected_no_signal_score(
                    len(wl.fem), len(wl.mas), scorer.alpha
                ),
            }
            for dim, wl in scorer.word_lists.items()
            for side in ("fem", "mas")
        ]
    )


def baseline_summary(
    baselines: pd.DataFrame,
    lists: pd.DataFrame,
    tables: dict[str, pd.DataFrame] | None = None,
    name: str = "",
) -> dict[str, Any]:
    """The summary's ``baseline`` records (``model_label`` first; into ``tables`` as the CSV
    file of the analysis ``name`` when given), their readings in words and the warnings."""
    from biasim.simulator.kinds.sections.prism_baseline import reading, warnings

    frame = _labels_first(baselines)
    table = declared.TABLES["baseline"]
    records = table.records(frame) if tables is None else table.write(tables, name, frame)
    return {
        "baseline": records,
        "baseline_readings": [
            (f"{r['model_label']}: " if baselines["model_label"].nunique() > 1 else "") + reading(r)
            for r in records
        ],
        "baseline_warnings": warnings(baselines, lists),
    }


def pair_scores(
    ids: pd.DataFrame,
    posting_scores: pd.DataFrame,
    application_scores: pd.DataFrame,
    answered: pd.Series,
    columns: tuple[str, ...],
    status: pd.Series | None = None,
) -> pd.DataFrame:
    """One row per application: ``ids`` (which include the ``posting`` key), its posting's
    and its own scores as ``posting_<column>`` and ``application_<column>``, and
    ``excluded``, the first reason the pair cannot be compared (None when it can).

    Args:
        ids: Identifying columns, one row per application, ``posting`` among them.
        posting_scores: Scores of each row's posting (a scorer's frame, with ``excluded``).
        application_scores: Scores of each row's application.
        answered: Whether the application exists (an unanswered call has no text).
        columns: The scorer's columns.
        status: Call status, named in the reason of an unanswered application.
    """
    out = ids.reset_index(drop=True).copy()
    for side, scores in zip(SIDES, (posting_scores, application_scores), strict=True):
        for col in columns:
            out[f"{side}_{col}"] = scores[col].to_numpy()
    states = status.tolist() if status is not None else [None] * len(out)
    reasons = []
    for state, ok, p_why, a_why in zip(
        states,
        answered.tolist(),
        posting_scores["excluded"].tolist(),
        application_scores["excluded"].tolist(),
        strict=True,
    ):
        if not ok:
            reasons.append(f"application not answered ({state})")
        elif pd.notna(p_why):
            reasons.append(f"posting: {p_why}")
        elif pd.notna(a_why):
            reasons.append(f"application: {a_why}")
        else:
            reasons.append(None)
    out["excluded"] = reasons
    # An unanswered application has no text, so no scores (its empty text was never scored).
    out.loc[~answered.to_numpy(), [f"application_{c}" for c in columns]] = float("nan")
    return out
