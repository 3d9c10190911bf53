"""Kind ``association``: association bias from a word-pairing stage (seed 000, Exp. 1-2).

Reads every answer of a pairing stage line by line (``analysis.answer_lines``; what is not a
pair is counted by reason, never guessed) and reports the share of items paired with one target
value: per item with its Wilson interval and exact binomial test against chance (the count of
items that "deviate from chance"), per category of items (Table 4, with a bootstrap over calls),
and two conditions side by side per item (Table 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.result_tables import Records, missing
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds import spec_fields
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import association, pd, transmission_figures, unit_stats
from biasim.simulator.kinds.sections import validity
from biasim.simulator.kinds.sections.codebook import tables_of

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class AssociationSpec(AnalysisSpec):
    """Which pairing stage, which target value to count, and how items are grouped."""

    kind: Literal["association"]
    stage: str = Field(description="A stage with `pairing`.")
    by: str | None = Field(
        None, description="Design factor whose levels are analysed apart (e.g. `experiment`)."
    )
    positive: str | None = spec_fields.positive_field()
    category: str | None = spec_fields.category_field("Table 4: `dominance`")
    describe: list[str] = Field(
        default_factory=list, description="Further columns of the items file shown per item."
    )
    compare: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Two levels of `by` compared per item, first minus second (Table 5).",
    )
    alpha: float = spec_fields.chance_alpha_field()
    adjust: Literal["none", "holm", "bh"] = spec_fields.paper_count_adjust_field(
        "the items of a level"
    )
    n_boot: int = Field(2000, ge=100, description="Bootstrap resamples of calls (categories).")


#: The tables of its result, declared in association.tables.yaml.
TABLES = tables_of(__name__)
POSITION = replace(TABLES["position"], says_nothing=lambda r: missing(r.get("effect")))


@dataclass(kw_only=True)
class AssociationResult:
    """What ``association`` computes; the summary, its schema and the renderings come from it."""

    positive: str = field(metadata=about("The target value counted."))
    alpha: float = field(metadata=about("Level of the test against chance."))
    adjust: Literal["none", "holm", "bh"] = field(metadata=about("Its adjustment."))
    note: str | None = field(default=None, metadata=about("Why there is no share."))
    categories: Records | None = field(default=None, metadata=tabled(TABLES["categories"]))
    deviates_from_chance: Records | None = field(
        default=None, metadata=tabled(TABLES["deviates_from_chance"])
    )
    position: Records | None = field(default=None, metadata=tabled(POSITION))
    compare: list[str] | None = field(
        default=None,
        metadata=about("The levels compared, first minus second.", {"minItems": 2, "maxItems": 2}),
    )
    comparison: Records | None = field(default=None, metadata=tabled(TABLES["comparison"]))
    items: Records = field(metadata=tabled(TABLES["items"]))
    item_status: Records = field(metadata=tabled(TABLES["item_status"]))
    unused_lines: Records = field(metadata=tabled(TABLES["unused_lines"]))
    validity: dict[str, Records] = field(default_factory=dict, metadata=validity.TABLED)


class AssociationKind(AnalysisKind, spec=AssociationSpec, result=AssociationResult):
    """Share of pairings with one target value, per item, category and condition."""

    title = "Association bias: word pairings"

    def check(self, spec: AssociationSpec, facts: StudyFacts) -> None:
        stage = next((s for s in facts.config.stages if s.name == spec.stage), None)
        if stage is None:
            facts.problem(("stage",), f"no stage named `{spec.stage}`")
            return
        if stage.pairing is None:
            facts.problem(("stage",), f"stage `{spec.stage}` has no `pairing`")
            return
        if stage.pairing.picks > 1:
            facts.problem(("stage",), f"stage `{spec.stage}` picks several: use kind `picks`")
            return
        if spec.by is not None and spec.by not in facts.config.design.factors:
            facts.problem(("by",), f"`{spec.by}` is not a design factor")
        values = stage.pairing.targets.values
        if spec.positive is not None and spec.positive not in values:
            facts.problem(("positive",), f"`{spec.positive}` is not one of {values}")
        columns = (
            set().union(*(r.keys() for r in stage.pairing.rows)) if stage.pairing.rows else set()
        )
        for path, column in [(("category",), spec.category)] + [
            (("describe", j), c) for j, c in enumerate(spec.describe)
        ]:
            if column is not None and column not in columns:
                facts.problem(path, f"the items file has no column `{column}`")
        if spec.compare is not None:
            if spec.by is None:
                facts.problem(("compare",), "`compare` needs `by`")
            else:
                levels = facts.config.design.factors.get(spec.by, {})
                for j, level in enumerate(spec.compare):
                    if level not in levels:
                        facts.problem(("compare", j), f"`{level}` is not a level of `{spec.by}`")

    def compute(
        self, results: pd.DataFrame, spec: AssociationSpec, ctx: AnalysisContext
    ) -> Section:
        stage = next(s for s in ctx.study.stages if s.name == spec.stage)
        pairing = stage.pairing
        assert pairing is not None
        positive = spec.positive or pairing.targets.values[0]
        keys = ([spec.by] if spec.by else []) + (
            ["model_label"] if len(ctx.models_in(results)) > 1 else []
        )
        rows = results[results["stage"] == spec.stage]
        pairs, lines = association.pairing_rows(rows, keys)
        descriptors = [c for c in [spec.category, *spec.describe] if c]
        items = pd.DataFrame(pairing.rows).rename(columns={pairing.item_column: "item"})
        items = items[["item", *dict.fromkeys(descriptors)]]
        pairs = pairs.merge(items, on="item", how="left")

        shares = association.share_table(
            pairs, [*keys, "item"], positive, alpha=spec.alpha, method=spec.adjust
        ).merge(items, on="item", how="left")
        section = Section(summary={})
        status = association.status_counts(pairs, keys)
        paired = (pairs["outcome"] == association.PAIRED).to_numpy()
        valid = validity.call_validity(pairs, keys, paired, ctx.study.seed)
        section.tables[slug(ctx.name, "validity", validity.FIRST_NAMED)] = valid
        result = AssociationResult(
            positive=positive,
            alpha=spec.alpha,
            adjust=spec.adjust,
            items=TABLES["items"].write(section.tables, ctx.name, shares),
            item_status=TABLES["item_status"].write(section.tables, ctx.name, status),
            unused_lines=TABLES["unused_lines"].write(
                section.tables, ctx.name, lines.assign(reason=lines["reason"].astype(str))
            ),
            validity={validity.FIRST_NAMED: validity.TABLE.records(valid)},
        )
        if shares.empty:
            result.note = NO_PAIRING
            section.summary = summary_of(result)
            return section
        deviates = (
            shares.groupby(keys, sort=False)["deviates"].agg(["sum", "size"]).reset_index()
            if keys
            else pd.DataFrame({"sum": [shares["deviates"].sum()], "size": [len(shares)]})
        ).rename(columns={"sum": "deviate", "size": "items"})
        result.deviates_from_chance = TABLES["deviates_from_chance"].write(
            section.tables, ctx.name, deviates
        )
        # The random order cancels a preference for the first-named target; it is measured.
        position = association.position_effect(pairs, keys, positive)
        result.position = POSITION.write(section.tables, ctx.name, position)
        if spec.category:
            categorised = pairs[pairs[spec.category].fillna("") != ""]
            categories = association.category_table(
                categorised,
                [*keys, spec.category],
                positive,
                n_boot=spec.n_boot,
                seed=ctx.study.seed,
            )
            result.categories = TABLES["categories"].write(section.tables, ctx.name, categories)
        if spec.compare and spec.by:
            compared = association.compare_shares(
                shares, spec.by, spec.compare[0], spec.compare[1], ["item", *descriptors], positive
            )
            compared = compared.sort_values([*descriptors, "item"], ignore_index=True)
            result.comparison = TABLES["comparison"].write(section.tables, ctx.name, compared)
            result.compare = list(spec.compare)
        section.summary = summary_of(result)
        section.figures[slug(ctx.name, "items")] = transmission_figures.plot_item_shares(
            shares,
            panel=spec.by,
            category=spec.category,
            positive=positive,
        )
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Whether any item deviates from chance: Holm's smallest adjusted p over the items'
        exact tests (whatever the study's own adjustment), on their unit (calls)."""
        return items_deviate(summary.get("items", []))

    def headline(self, summary: dict[str, Any]) -> str:
        return f"(association): share of pairings with a {summary['positive']} target"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        tests = f"each item tested at alpha {summary['alpha']}, adjusted: {summary['adjust']}"
        return [summary["note"]] if summary.get("note") else [tests]

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        name = slug(summary.get("name"), "items")
        return [(name, "Share per item with 95% Wilson intervals")]


#: Why an association section has no shares, tests or figure.
NO_PAIRING = (
    "no answer paired a shown item with exactly one target: no shares, tests or figure "
    "(see the items by status and the unused answer lines)"
)


def items_deviate(items: list[dict[str, Any]]) -> dict[str, Tested]:
    """``biasim power``'s headline of an item table: any item off chance, Holm over the items
    (per experiment where the table has one), on the items' unit."""
    family: dict[str, list[dict[str, Any]]] = {}
    for row in items:
        if row.get("p_value") is not None and not math.isnan(row["p_value"]):
            family.setdefault(str(row.get("experiment", "")), []).append(row)
    tests: dict[str, Tested] = {}
    for experiment, rows in family.items():
        p = min(1.0, min(r["p_value"] for r in rows) * len(rows))
        at = f"{experiment}: " if experiment else ""
        name = f"{at}any item deviates from chance (holm over {len(rows)} items)"
        tests[name] = unit_stats.Tested.family(p, rows)
    return tests
