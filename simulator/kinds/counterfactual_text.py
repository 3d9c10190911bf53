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

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    slug,
)
from biasim.simulator.kinds.letters import CACHE_FILE, INVALID, LettersKind, ScorerChoice
from biasim.simulator.study.counterfactual import SET, SWAP, WRITER

pd = lazy_module("pandas")
cf_metrics = lazy_module("biasim.analysis.text.counterfactual")
units = lazy_module("biasim.analysis.stats.units")

if TYPE_CHECKING:
    from rich.console import Console

    from biasim.analysis.stats.units import Tested
    from biasim.simulator.common.html import HtmlSection

#: What the section says it is, on the console and the page.
BEYOND = "beyond the paper: counterfactual (swapped) documents"
NO_SETS = "the stage has no counterfactual sets (run it with `counterfactual:`)"


def default_scorers() -> dict[str, ScorerChoice]:
    """VADER sentiment (LangFair's default sentiment scorer) and biasim's agency stems."""
    return {
        "sentiment": ScorerChoice(scorer="vader"),
        "agentic": ScorerChoice(scorer="agency_lexicon"),
    }


class CounterfactualTextSpec(AnalysisSpec):
    """Counterfactual sentiment parity, score distributions and similarity over swapped sets."""

    kind: Literal["counterfactual_text"]
    stage: str = Field(description="A stage run with `counterfactual:` (its sets are the unit).")
    field: str = Field("text", description="Field holding the text (free-text stages: `text`).")
    scorers: dict[str, ScorerChoice] = Field(
        default_factory=default_scorers,
        description="Name -> text scorer; each scorer's `value` (and `label`) is compared.",
    )
    embeddings: str | None = Field(
        None,
        description="sentence-transformers model (hub id or folder) for the cosine similarity "
        "of counterfactual outputs; none: ROUGE-L and BLEU only.",
    )
    n_permutations: int = Field(1999, ge=99, description="Within-set relabellings per test.")


class CounterfactualTextKind(AnalysisKind):
    """See the module docstring."""

    name = "counterfactual_text"
    spec = CounterfactualTextSpec
    title = "Counterfactual text: what a swapped name or attribute changes (beyond the paper)"

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

    def compute(
        self, results: pd.DataFrame, spec: CounterfactualTextSpec, ctx: AnalysisContext
    ) -> Section:
        """Per model: the per-response scores, the comparisons and the tested metrics."""
        from biasim.analysis.text.counterfactual_figures import plot_swap_scores
        from biasim.analysis.text.scorers import ScoreCache

        rows, excluded = _responses(results, spec)
        section = Section(summary={"beyond_paper": BEYOND, "excluded": excluded, "metrics": []})
        if rows.empty:
            section.summary["note"] = "no valid response in a counterfactual set: nothing to test"
            return section
        scorers = {n: LettersKind._scorer(c, ctx, "auto") for n, c in spec.scorers.items()}
        cache = ScoreCache(ctx.out_dir / CACHE_FILE) if ctx.out_dir else None
        embed = _embedder(spec, ctx)
        cols = cf_metrics.CounterfactualColumns(
            pair=SET, swap=SWAP, text=spec.field, writer=WRITER, name="persona_name"
        )
        parts: dict[str, list[pd.DataFrame]] = {"metrics": [], "scores": [], "comparisons": []}
        models = ctx.models_in(rows)
        for model in models:
            part = rows[rows["model_label"] == model]
            out = cf_metrics.counterfactual_tables(
                part, cols, scorers, embed, spec.n_permutations, ctx.study.seed, cache
            )
            for key in parts:
                parts[key].append(getattr(out, key).assign(model_label=model))
            if not ctx.power_only:
                columns = [c for c in out.scores if c.endswith("_value")]
                name = slug(ctx.name, model) if len(models) > 1 else ctx.name
                section.figures[name] = plot_swap_scores(
                    out.scores, SWAP, columns, f"{ctx.name} ({model}): scores by swapped value"
                )
        for key, frames in parts.items():
            section.tables[slug(ctx.name, key)] = pd.concat(frames, ignore_index=True)
        metrics = section.tables[slug(ctx.name, "metrics")]
        section.summary["metrics"] = (
            metrics.astype(object).where(metrics.notna(), None).to_dict("records")
        )
        return section

    def print(self, summary: dict[str, Any], console: Console) -> None:
        """The metrics, each p with its unit, as ``analyze --texts --counterfactual`` prints."""
        console.print(f"{summary.get('name')}: {BEYOND}", highlight=False)
        if summary.get("note"):
            console.print(summary["note"], highlight=False)
        if summary.get("metrics"):
            print_table(console, counterfactual_console_table(summary["metrics"]))
        if summary.get("excluded"):
            console.print(f"excluded responses: {summary['excluded']}", highlight=False)

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        """The metrics table, and what the section is."""
        section.paragraph(f"{BEYOND.capitalize()}.")
        super().html(summary, section)

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


def counterfactual_console_table(rows: list[dict[str, Any]]) -> Any:
    """The counterfactual metrics as the console prints them (this kind's and ``analyze
    texts --counterfactual``'s), each p with its unit."""
    from rich.table import Table

    from biasim.analysis.stats.units import unit_label
    from biasim.simulator.common.html import fmt, format_p

    table = Table(title="Counterfactual text metrics (beyond the paper)")
    for header in ("metric", "statistic", "a vs b", "estimate", "p", "unit", "note"):
        table.add_column(header)
    for r in rows:
        versus = f"{r['value_a']} vs {r['value_b']}" if r["value_a"] else "all"
        p = "" if r["p_value"] is None else f"p {format_p(r['p_value'])}"
        unit = "no test" if r["p_value"] is None else unit_label(r["unit"], r["n_units"])
        table.add_row(
            r["metric"], r["statistic"], versus, fmt(r["estimate"]), p, unit, r["note"] or ""
        )
    return table


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


def _records(metrics: pd.DataFrame) -> list[dict[str, Any]]:
    """The metrics as summary records: no NaN (None), and counts as integers."""
    records = metrics.astype(object).where(metrics.notna(), None).to_dict("records")
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
