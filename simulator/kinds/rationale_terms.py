"""Kind ``rationale_terms``: the rationales of a stage's decisions (seed 004, sections 5.2 and
5.5). Declared key terms counted per persona group and case, a data-driven scan of each group's
distinctive words (token-level, descriptive), and the same scan tested with the analysis's unit
(a persona's replicates are one unit), over the decisions ``demographic_parity`` reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import shorten
from typing import Any, Literal

from pydantic import Field

from biasim.analysis.text.term_sets import (
    BUNDLED_TERM_SETS,
    check_term_sets,
    load_term_sets,
    term_set_sources,
)
from biasim.simulator.common.results import about
from biasim.simulator.kinds.base import (
    AnalysisContext,
    Section,
    StudyFacts,
    resolve_data_path,
)
from biasim.simulator.kinds.lazy import pd, terms, unit_stats, unit_terms
from biasim.simulator.kinds.sections import decisions
from biasim.simulator.study.decisions_spec import StageDecisionsSpec
from biasim.simulator.study.fields import Strict


class TermsConfig(Strict):
    """Rationale analysis: declared term sets and a data-driven scan of distinctive words."""

    field: str = Field("rationale", description="Output field holding the rationale text.")
    term_sets: str | dict[str, list[str]] = Field(
        description="Where the key terms come from, always named by the study: a bundled set "
        f"({', '.join(f'`{n}`' for n in BUNDLED_TERM_SETS)}: the seed-004 paper's), a "
        "YAML path (relative to the study file), or name -> terms.",
    )
    inflections: bool = Field(
        True, description="Plain-word terms and scanned words count their inflections too."
    )
    chosen: str | None = Field(
        None,
        description="Count terms only in rationales of units that chose this option; `target` "
        "is each case's targeted decision.",
    )
    names_from: list[str] = Field(
        default_factory=list,
        description="`stage.field` outputs holding agents' names; these names and "
        "`persona_name` are removed before the distinctive-words scan.",
    )
    top_n: int = Field(15, ge=1, description="Distinctive words reported per attribute value.")


class RationaleTermsSpec(StageDecisionsSpec):
    """Key terms and distinctive words in the rationales of a stage's decisions."""

    kind: Literal["rationale_terms"] = "rationale_terms"
    terms: TermsConfig


_TEXT_OR_NONE = {"type": ["string", "null"]}


@dataclass(kw_only=True)
class TermsUsed:
    """What the term counts and scans read."""

    term_sets: str = field(metadata=about("Where the sets come from."))
    sources: dict[str, str] = field(metadata=about("Each set's own source."))
    inflections: bool = field(metadata=about("Whether inflections count with their term."))
    chosen: str | None = field(
        metadata=about("The option whose units' rationales are counted.", _TEXT_OR_NONE)
    )
    name_words_removed: int = field(
        metadata=about("Name words removed before the scan.", {"minimum": 0})
    )
    unit_test: str | None = field(
        default=None, metadata=about("The unit-level scan (None: none ran).", _TEXT_OR_NONE)
    )


@dataclass(kw_only=True)
class RationaleTermsResult:
    """What ``rationale_terms`` computes (its counts and scans are CSV tables, too long for the
    summary); the summary, its schema and the renderings come from it."""

    terms: TermsUsed = field(metadata=about("What the term counts and scans read."))


class RationaleTermsKind(
    decisions.DecisionsKind, spec=RationaleTermsSpec, result=RationaleTermsResult
):
    """Term counts per group and case, and each group's distinctive words."""

    title = "Rationale terms"

    def check(self, spec: RationaleTermsSpec, facts: StudyFacts) -> None:
        super().check(spec, facts)
        _check_terms(spec, facts)

    def notes(self, spec: RationaleTermsSpec, data_dir: Path | None) -> list[str]:
        """Where the rationale term sets come from, set by set."""
        _, origin, sources = _term_sets(spec.terms, lambda path: resolve_data_path(path, data_dir))
        lines = [f"rationale term sets: {origin}"]
        lines += [f"  {name}: {shorten(source, 80)}" for name, source in sources.items()]
        return lines

    def read(self, stage: decisions.Decisions, spec: RationaleTermsSpec) -> RationaleTermsResult:
        results, rows, ctx, section = stage
        condition = [spec.condition] if spec.condition else []
        used = self._terms(results, rows, spec, ctx, condition, section)
        return RationaleTermsResult(terms=used)

    def _terms(
        self,
        results: pd.DataFrame,
        rows: pd.DataFrame,
        spec: RationaleTermsSpec,
        ctx: AnalysisContext,
        condition: list[str],
        section: Section,
    ) -> TermsUsed:
        """The term counts and both scans into ``section``'s tables; what they read."""
        config = spec.terms
        term_sets, origin, sources = _term_sets(config, ctx.resolve)
        answered = rows[rows["valid"].astype(bool)]
        chose_col = None
        if config.chosen is not None:
            chosen = (
                answered["_hit"]
                if config.chosen == "target"
                else answered[spec.field] == config.chosen
            )
            answered, chose_col = answered.assign(_chosen=chosen), "_chosen"
        group_cols = ["model_label", *condition, *spec.cases, "attribute", "value"]
        counts = terms.term_counts(
            answered,
            config.field,
            group_cols,
            term_sets,
            inflections=config.inflections,
            chose_col=chose_col,
        )
        if config.chosen is not None:
            counts.insert(counts.columns.get_loc("term_set"), "chosen", config.chosen)
        section.tables[f"{ctx.name}_terms"] = counts
        own = answered.get("persona_name")
        texts, removed = terms.strip_names(
            answered[config.field], _agent_names(results, config), own
        )
        answered = answered.assign(**{config.field: texts})
        used = TermsUsed(
            term_sets=origin,
            sources=sources,
            inflections=config.inflections,
            chosen=config.chosen,
            name_words_removed=removed,
        )
        scans = []
        keys = ["model_label", *condition, *spec.cases, "attribute"]
        for key, part in answered.groupby(keys):
            if part["value"].nunique() < 2:
                continue
            scan = terms.distinctive_terms(
                part,
                config.field,
                "value",
                top_n=config.top_n,
                min_count=2,
                inflections=config.inflections,
            )
            for col, value in zip(keys, key, strict=True):
                scan.insert(0, col, value)
            scans.append(scan)
        if scans:
            section.tables[f"{ctx.name}_distinctive_terms"] = pd.concat(scans, ignore_index=True)
        used.unit_test = _unit_term_scans(
            section, ctx.name, answered, keys, (config.field, spec.unit)
        )
        return used

    def headline(self, summary: dict[str, Any]) -> str:
        return f"({self.name}): key terms and distinctive words in the rationales"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        return [_terms_line(summary["terms"])]


def _terms_line(used: dict[str, Any]) -> str:
    """What the term counts and scans read, in one sentence (tables: the run's CSVs)."""
    among = f"units that chose {used['chosen']}" if used["chosen"] else "every unit"
    return (
        f"Rationale terms: sets from {used['term_sets']}, counted in the rationales of "
        f"{among}, inflections {'counted together' if used['inflections'] else 'apart'}"
        f"; {used['name_words_removed']} name words removed before the "
        "distinctive-words scan." + (f" {used['unit_test']}." if used.get("unit_test") else "")
    )


def _check_terms(spec: RationaleTermsSpec, facts: StudyFacts) -> None:
    """The rationale field, the term sets (loaded, so a broken file fails before any call),
    the chosen option and the stages giving names."""
    config = spec.terms
    facts.need_field(spec.stage, config.field, ("terms", "field"), ("stage",))
    at = ("terms", "term_sets")
    written_in = Path(facts.smap.locate((*facts.at, *at))[0]).parent
    try:
        _term_sets(config, lambda path: resolve_data_path(path, written_in))
    except (OSError, ValueError) as err:
        facts.problem(at, str(err))
    output = (facts.stage_fields.get(spec.stage) or {}).get(spec.field)
    options = output.choices if output is not None else None
    if config.chosen not in (None, "target") and options and config.chosen not in options:
        facts.problem(("terms", "chosen"), f"`{config.chosen}` is not one of {options}")
    for j, ref in enumerate(config.names_from):
        stage, _, name = ref.partition(".")
        if not name:
            facts.problem(("terms", "names_from", j), f"`{ref}` is not `stage.field`")
        else:
            path = ("terms", "names_from", j)
            facts.need_field(stage, name, path, path)


def _unit_term_scans(
    section: Section,
    name: str,
    answered: pd.DataFrame,
    keys: list[str],
    field_unit: tuple[str, str],
) -> str | None:
    """The distinctive-words scan with the kind's unit (``units.UNIT_COLUMNS``; a persona's
    replicates are one unit): each value against the rest, per case
    (``analysis.text.unit_terms``), into ``section``'s tables; what it was (None: no case had
    two values). The token-level log-odds z above counts every token as independent and is
    descriptive only."""
    field, unit = field_unit
    scans = []
    for key, part in answered.groupby(keys):
        values = sorted(part["value"].dropna().astype(str).unique())
        for value in values if len(values) > 1 else []:
            scan = unit_terms.unit_term_test(
                part, field, "value", unit_stats.UNIT_COLUMNS[unit], positive=value
            )
            scan = scan.assign(unit=unit).head(20)
            for col, level in zip(keys, key, strict=True):
                scan.insert(0, col, level)
            scan.insert(len(keys), "value", value)
            scans.append(scan)
    if not scans:
        return None
    section.tables[f"{name}_distinctive_terms_by_unit"] = pd.concat(scans, ignore_index=True)
    return (
        f"distinctive_terms_by_unit: unit {unit} (replicates one unit), permutation of the "
        f"value across {unit}s; the token-level z counts every token as independent"
    )


def _term_sets(
    config: TermsConfig, resolve: Callable[[str], Path]
) -> tuple[dict[str, list[str]], str, dict[str, str]]:
    """The study's term sets, where they come from (said in the summary and by `validate`),
    and each set's own source.

    Raises:
        ValueError: ``default`` (no study inherits another paper's terms), or a set file that
            is missing or malformed.
        OSError: The file cannot be read.
    """
    declared = config.term_sets
    if isinstance(declared, dict):
        check_term_sets(declared)
        return dict(declared), "inline in the study file", {n: "study file" for n in declared}
    if declared in BUNDLED_TERM_SETS:
        path = BUNDLED_TERM_SETS[declared]
        origin = f"bundled `{declared}` ({path.name})"
    elif declared == "default":
        raise ValueError(
            "name the term sets instead of `default`: "
            + ", ".join(f"`{n}` ({p.name})" for n, p in BUNDLED_TERM_SETS.items())
            + ", a YAML path, or name -> terms"
        )
    else:
        path = resolve(declared)
        if not path.is_file():
            raise ValueError(f"term-set file `{declared}` not found (looked at {path})")
        origin = f"file {path}"
    return load_term_sets(path), origin, term_set_sources(path)


def _agent_names(results: pd.DataFrame, config: TermsConfig) -> list[str]:
    """Every agent's name in the run: ``persona_name`` and the ``names_from`` outputs."""
    names = results["persona_name"].dropna().tolist() if "persona_name" in results else []
    for ref in config.names_from:
        stage, _, name = ref.partition(".")
        if name in results:
            names += results.loc[results["stage"] == stage, name].dropna().tolist()
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]
