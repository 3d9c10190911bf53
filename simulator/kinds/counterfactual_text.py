"""The ``counterfactual_text`` kind: what a swap changes in the text a writer writes (issue 47;
beyond the seed papers).

It reads a stage run with ``counterfactual:`` (:mod:`biasim.simulator.study.counterfactual`):
sets of responses of one writer, seed and prompt that differ only by the swapped value. Per
model, every response is scored by the named text scorers, every two responses of a set are
compared (ROUGE-L, BLEU, and embedding cosine when asked), and the metrics of
:mod:`biasim.analysis.text.counterfactual` are tested with the set as the unit (swap labels
relabelled within sets). Documented in docs/analysis/counterfactual_text.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.result_tables import Records, missing, slug
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section
from biasim.simulator.kinds.lazy import pd
from biasim.simulator.kinds.letters import CACHE_FILE, INVALID, LettersKind, ScorerChoice
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.study.counterfactual import SET, SWAP, WRITER
from biasim.simulator.study.fields import Strict

cf_metrics = lazy_module("biasim.analysis.text.counterfactual")
toxicity = lazy_module("biasim.analysis.text.toxicity")
stereotype = lazy_module("biasim.analysis.text.stereotype")
stereotype_words = lazy_module("biasim.analysis.text.stereotype_words")
justification_metrics = lazy_module("biasim.analysis.text.justification")

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts

#: What the section says it is, on the console and the page.
BEYOND = "beyond the paper: counterfactual (swapped) documents"
NO_SETS = "the stage has no counterfactual sets (run it with `counterfactual:`)"


def default_scorers() -> dict[str, ScorerChoice]:
    """VADER sentiment (LangFair's default sentiment scorer) and biasim's agency stems."""
    return {
        "sentiment": ScorerChoice(scorer="vader"),
        "agentic": ScorerChoice(scorer="agency_lexicon"),
    }


class ToxicityChoice(Strict):
    """Which scorer's `value` is a response's toxicity, and the toxic cut."""

    scorer: str = Field(description="A key of `scorers` (a `toxicity` scorer, or any 0-1 score).")
    threshold: float = Field(
        0.5, gt=0, lt=1, description="Toxicity above which a generation is toxic (Gehman 2020)."
    )


class StereotypeChoice(Strict):
    """The word lists of the stereotype association and co-occurrence scores."""

    words: str | None = Field(
        None,
        description="YAML of `groups`, `targets` and `stop_words` (relative: the study's "
        "folder); none: LangFair 0.8's defaults (gender words, Garg et al.'s adjectives).",
    )
    target: str = Field("adjective", description="The target list of `targets` used.")
    beta: float = Field(0.95, gt=0, lt=1, description="Co-occurrence weight per word of distance.")


class CounterfactualTextSpec(AnalysisSpec):
    """Counterfactual sentiment parity, score distributions and similarity over swapped sets."""

    kind: Literal["counterfactual_text"]
    stage: str = Field(description="A stage run with `counterfactual:` (its sets are the unit).")
    field: str = Field(
        "text",
        description="The stage's output field whose text is scored and compared (free-text "
        "stages: `text`; a structured stage's, e.g. `rationale`).",
    )
    scorers: dict[str, ScorerChoice] = Field(
        default_factory=default_scorers,
        description="Name -> text scorer; each scorer's `value` (and `label`) is compared.",
    )
    embeddings: str | None = Field(
        None,
        description="sentence-transformers model (hub id or folder) for the cosine similarity "
        "of counterfactual outputs; none: ROUGE-L and BLEU only.",
    )
    toxicity: ToxicityChoice | None = Field(
        None,
        description="Expected maximum toxicity, toxicity probability and toxic fraction over "
        "each set's replicates under one value (the k generations of a prompt), tested by set.",
    )
    stereotype: StereotypeChoice | None = Field(
        None, description="Stereotype association (tested by set) and co-occurrence scores."
    )
    decision: str | None = Field(
        None,
        description="Field holding the stage's decision: the rationales (`field`) of sets whose "
        "decisions all agree are compared across the swap (justification shift).",
    )
    n_permutations: int = Field(1999, ge=99, description="Within-set relabellings per test.")


TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class CounterfactualTextResult:
    """What ``counterfactual_text`` computes; the summary, its schema and the renderings come
    from it (the per-response scores and comparisons are CSV files only)."""

    beyond_paper: str = field(metadata=about("What the section is."))
    excluded: dict[str, int] = field(metadata=about("Responses left out, by reason."))
    note: str | None = field(default=None, metadata=about("Why nothing was tested."))
    metrics: Records = field(metadata=tabled(TABLES["metrics"]))
    toxicity: Records | None = field(default=None, metadata=tabled(TABLES["toxicity"]))
    justification: Records | None = field(default=None, metadata=tabled(TABLES["justification"]))


class CounterfactualTextKind(
    AnalysisKind, spec=CounterfactualTextSpec, result=CounterfactualTextResult
):
    """See the module docstring."""

    title = "Counterfactual text: what a swapped name or attribute changes (beyond the paper)"

    def reads_counterfactual_sets(self, spec: CounterfactualTextSpec) -> bool:
        """The set is its unit."""
        return True

    def check(self, spec: CounterfactualTextSpec, facts: StudyFacts) -> None:
        """The stage runs as counterfactual sets, its field exists and the scorers load."""
        from biasim.registry import SCORERS

        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        stage = next((s for s in facts.config.stages if s.name == spec.stage), None)
        if stage is not None and stage.counterfactual is None:
            facts.problem(("stage",), f"stage `{spec.stage}`: {NO_SETS}")
        for name, choice in spec.scorers.items():
            if choice.scorer not in SCORERS.names():
                facts.problem(("scorers", name, "scorer"), f"unknown text scorer `{choice.scorer}`")
            elif why := SCORERS.missing_extra(choice.scorer):
                facts.problem(("scorers", name, "scorer"), why)
            elif choice.scorer == "toxicity":
                self._check_toxicity_model(facts, name, choice)
        if spec.toxicity is not None and spec.toxicity.scorer not in spec.scorers:
            facts.problem(
                ("toxicity", "scorer"),
                f"`{spec.toxicity.scorer}` is not one of this analysis's `scorers` "
                f"({', '.join(spec.scorers) or 'none'})",
            )
        if spec.stereotype is not None:
            self._check_stereotype_words(facts, spec.stereotype)
        if spec.decision is not None:
            facts.need_field(spec.stage, spec.decision, ("decision",), ("stage",))
        # A folder that is no model is refused here, not when the run's answers are scored.
        LettersKind._check_model(facts, ("embeddings",), spec.embeddings, None)

    @staticmethod
    def _check_toxicity_model(facts: StudyFacts, name: str, choice: ScorerChoice) -> None:
        """A toxicity scorer names a local model folder (it never downloads one)."""
        at = ("scorers", name, "options", "model")
        model = choice.options.get("model")
        if not isinstance(model, str):
            facts.problem(
                at[:-1],
                "scorer `toxicity` needs option `model`: a local folder "
                "holding a transformers text classifier with a toxic label",
            )
        elif not LettersKind._study_file(facts, at, model).is_dir():
            facts.problem(
                at,
                f"no such folder: {model} (scorer `toxicity` loads a local "
                "text classifier; relative paths: the study's folder)",
            )

    @staticmethod
    def _check_stereotype_words(facts: StudyFacts, choice: StereotypeChoice) -> None:
        """The stereotype word lists read, with the target list named."""
        import yaml

        from biasim.analysis.text.stereotype_words import load_stereotype_words

        at = ("stereotype", "words")
        path = None if choice.words is None else LettersKind._study_file(facts, at, choice.words)
        try:
            load_stereotype_words(path, choice.target)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            facts.problem(at, f"cannot read the stereotype word lists: {exc}")

    def compute(
        self, results: pd.DataFrame, spec: CounterfactualTextSpec, ctx: AnalysisContext
    ) -> Section:
        """Per model: the per-response scores, the comparisons and the tested metrics, and the
        toxicity, stereotype and justification tables the spec asks for."""
        from biasim.analysis.text.counterfactual_figures import plot_swap_scores
        from biasim.analysis.text.scorers import ScoreCache

        rows, excluded = _responses(results, spec)
        section = Section(summary={})
        result = CounterfactualTextResult(beyond_paper=BEYOND, excluded=excluded, metrics=[])
        if rows.empty:
            result.note = "no valid response in a counterfactual set: nothing to test"
            section.summary = summary_of(result)
            return section
        scorers = {n: LettersKind._scorer(c, ctx, "auto") for n, c in spec.scorers.items()}
        cache = ScoreCache(ctx.out_dir / CACHE_FILE) if ctx.out_dir else None
        embed = _embedder(spec, ctx)
        parts: dict[str, list[pd.DataFrame]] = {}
        justification: list[dict[str, Any]] = []
        models = ctx.models_in(rows)
        for model in models:
            part = rows[rows["model_label"] == model]
            out = cf_metrics.counterfactual_tables(
                part,
                stage_columns(spec),
                scorers,
                embed,
                spec.n_permutations,
                ctx.study.seed,
                cache,
            )
            tables = {"metrics": out.metrics, "scores": out.scores, "comparisons": out.comparisons}
            agreement = _extra_tables(tables, part, out.scores, spec, ctx, scorers, embed, cache)
            if agreement is not None:
                justification.append({**agreement, "model_label": model})
            for key, table in tables.items():
                parts.setdefault(key, []).append(table.assign(model_label=model))
            if not ctx.power_only:
                columns = [c for c in out.scores if c.endswith("_value")]
                name = slug(ctx.name, model) if len(models) > 1 else ctx.name
                section.figures[name] = plot_swap_scores(
                    out.scores,
                    SWAP,
                    columns,
                    f"{ctx.name} ({model}): scores by swapped value",
                    {f"{n}_value": f"{c.scorer} score" for n, c in spec.scorers.items()},
                )
        joined = {key: pd.concat(frames, ignore_index=True) for key, frames in parts.items()}
        for key in ("scores", "comparisons", "stereotype_words"):
            if key in joined:
                section.tables[slug(ctx.name, key)] = joined[key]
        result.metrics = _records(
            TABLES["metrics"].write(section.tables, ctx.name, joined["metrics"])
        )
        if spec.toxicity is not None:
            result.toxicity = _records(
                TABLES["toxicity"].write(section.tables, ctx.name, joined["toxicity"])
            )
        if spec.decision is not None:
            result.justification = justification
        section.summary = summary_of(result)
        return section

    def headline(self, summary: dict[str, Any]) -> str:
        return f"({self.name}): {BEYOND}"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        """Why nothing was tested, the responses left out, and per model how many sets agree
        on the decision (whose rationales the `justification:` metrics compare)."""
        out = [summary["note"]] if summary.get("note") else []
        if summary.get("excluded"):
            left = ", ".join(f"{why} {n}" for why, n in summary["excluded"].items())
            out.append(f"excluded responses: {left}")
        out += [justification_line(row) for row in summary.get("justification") or []]
        return out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        name = summary["name"]
        models = list(dict.fromkeys(r["model_label"] for r in summary.get("metrics", [])))
        return [
            (
                slug(name, model) if len(models) > 1 else name,
                f"Each response's scores by the swapped value ({model})",
            )
            for model in models
        ]

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Every metric with a p: its statistic, the values compared and the set as unit."""
        several = len({r["model_label"] for r in summary.get("metrics", [])}) > 1
        out: dict[str, Tested] = {}
        for r in summary.get("metrics", []):
            if r["p_value"] is None:
                continue
            at = f"{r['model_label']}: " if several else ""
            versus = f" {r['value_a']} vs {r['value_b']}" if r["value_a"] else ""
            out[f"{at}{r['metric']} {r['statistic']}{versus}"] = cf_metrics.as_tested(r)
        return out


def justification_line(row: dict[str, Any]) -> str:
    """How many sets agree on the decision, whose rationales the metrics compare."""
    decisions = ", ".join(f"{d} {n}" for d, n in row["decisions"].items())
    shared = f" ({decisions})" if decisions else ""
    return (
        f"justification shift ({row['model_label']}): {row['n_agreeing']} of {row['n_sets']} "
        f"sets agree on the decision{shared}; the metrics' `justification:` rows compare "
        "their rationales across the swap"
    )


def _responses(results: pd.DataFrame, spec: CounterfactualTextSpec) -> tuple[pd.DataFrame, dict]:
    """The stage's valid responses with text, and how many were left out, by reason."""
    rows = results[results["stage"] == spec.stage]
    if SET not in rows.columns:
        return rows.iloc[:0], {NO_SETS: len(rows)}
    text = rows[spec.field]
    valid = rows["valid"].astype(bool)
    has_text = text.map(lambda t: isinstance(t, str))
    excluded = {INVALID: int((~valid).sum()), "no text": int((valid & ~has_text).sum())}
    return rows[valid & has_text], {k: n for k, n in excluded.items() if n}


def stage_columns(spec: CounterfactualTextSpec) -> Any:
    """The stage's rows as the counterfactual metrics read them."""
    return cf_metrics.CounterfactualColumns(
        pair=SET, swap=SWAP, text=spec.field, writer=WRITER, name="persona_name"
    )


def _extra_tables(
    tables: dict[str, pd.DataFrame],
    part: pd.DataFrame,
    scores: pd.DataFrame,
    spec: CounterfactualTextSpec,
    ctx: AnalysisContext,
    scorers: dict[str, Any],
    embed: Any,
    cache: Any,
) -> dict[str, Any] | None:
    """Add one model's toxicity, stereotype and justification-shift tables to ``tables``
    (their tested rows to its metrics); the justification's agreement counts, or None."""
    cols, seed, n_perm = stage_columns(spec), ctx.study.seed, spec.n_permutations
    extra, agreement = [], None
    if spec.toxicity is not None:
        score, cut = f"{spec.toxicity.scorer}_value", spec.toxicity.threshold
        tables["toxicity"] = toxicity.toxicity_by_value(scores, cols, score, cut)
        extra.append(toxicity.toxicity_tests(scores, cols, score, cut, n_perm, seed))
    if spec.stereotype is not None:
        choice = spec.stereotype
        path = None if choice.words is None else ctx.resolve(choice.words)
        words = stereotype_words.load_stereotype_words(path, choice.target)
        metrics, tables["stereotype_words"] = stereotype.stereotype_tables(
            part, cols, words, choice.beta, n_perm, seed
        )
        extra.append(metrics.assign(value_a="", value_b="", n_excluded=0))
    if spec.decision is not None:
        shift = justification_metrics.justification_shift(
            part, cols, spec.decision, scorers, embed, n_perm, seed, cache
        )
        flips = justification_metrics.decision_flips(part, cols, spec.decision, n_perm, seed)
        agreement = {
            "n_sets": shift.n_sets,
            "n_agreeing": shift.n_agreeing,
            "decisions": shift.decisions,
            **_flip_record(flips, cols.pair),
        }
        extra.append(_flip_row(flips, spec.decision, cols.pair, len(part)))
        if shift.tables is not None:
            rows = shift.tables.metrics
            extra.append(rows.assign(metric="justification: " + rows["metric"]))
    if extra:
        tables["metrics"] = pd.concat([tables["metrics"], *extra], ignore_index=True)
    return agreement


def _flip_record(flips: Any, unit: str) -> dict[str, Any]:
    """The decision-flip rate as the justification record carries it (NaN: None)."""

    def plain(x: float) -> float | None:
        return None if x != x else float(x)

    return {
        "n_decided": flips.n_sets,
        "n_flipped": flips.n_flipped,
        "flip_rate": plain(flips.rate),
        "flip_ci_low": plain(flips.ci_low),
        "flip_ci_high": plain(flips.ci_high),
        "flip_p_value": flips.p_value,
        "flip_unit": unit,
    }


def _flip_row(flips: Any, decision: str, unit: str, n_responses: int) -> pd.DataFrame:
    """The decision-flip rate as a metrics row: its p tests whether the swap moves decisions."""
    row = {
        "metric": f"decision: {decision}",
        "statistic": "flip_rate",
        "value_a": "",
        "value_b": "",
        "estimate": flips.rate,
        "p_value": flips.p_value,
        "unit": unit,
        "n_units": flips.n_sets,
        "n_responses": n_responses,
        "n_excluded": 0,
        "note": flips.note,
    }
    return pd.DataFrame([row])


def _records(records: Records) -> Records:
    """A table's records as the summary holds them: no NaN (None), and counts as integers."""
    records = [{k: None if missing(v) else v for k, v in r.items()} for r in records]
    for r in records:
        for key in ("n_units", "n_responses", "n_excluded"):
            if r.get(key) is not None:
                r[key] = int(r[key])
    return records


def _embedder(spec: CounterfactualTextSpec, ctx: AnalysisContext) -> Any:
    """The embedding function of the cosine similarity, or None without ``embeddings``."""
    if spec.embeddings is None:
        return None
    from biasim.analysis.text.weat import SentenceEmbedder

    return SentenceEmbedder(str(ctx.resolve(spec.embeddings))).embed
