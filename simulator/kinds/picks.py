"""Kind ``picks``: the share of one target value among ``k`` picks of ``n`` (seed 000, suppl. 3).

Reads a pairing stage with ``picks`` above 1 and ``per_call: 1`` (one job, eight people, "pick
3"): every answer's picks are read by ``analysis.answer_lines.parse_picks`` (an unusable answer is
counted by reason, never guessed) and the share of positive picks is reported per item and per
category with the exact test against the hypergeometric null (``analysis.picks``), optionally
beside a one-of-two stage's category shares (the paper: bias about 5 points lower than when
hiring one person).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.analysis.studies.bias_transmission.answer_lines import PAIRED
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds import spec_fields
from biasim.simulator.kinds.association import items_deviate
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import association, pd, picks, transmission_figures
from biasim.simulator.kinds.sections import validity
from biasim.simulator.kinds.sections.codebook import tables_of

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class PicksSpec(AnalysisSpec):
    """Which pick-k stage, which value to count, how items are grouped, what to compare with."""

    kind: Literal["picks"]
    stage: str = Field(description="A stage with `pairing` whose `picks` is above 1.")
    positive: str | None = spec_fields.positive_field("share of picks")
    category: str | None = spec_fields.category_field("e.g. `dominance`")
    compare_with: str | None = Field(
        None,
        description="A pairing stage with one pick of two targets and one item per call "
        "(e.g. the single-job hiring prompt), set beside per category.",
    )
    alpha: float = spec_fields.chance_alpha_field()
    adjust: Literal["none", "holm", "bh"] = spec_fields.paper_count_adjust_field("the items")


TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class Deviating:
    """How many items deviate from chance."""

    deviate: int = field(metadata=about("Items whose test rejects chance."))
    items: int = field(metadata=about("Items tested."))


@dataclass(kw_only=True)
class PicksResult:
    """What ``picks`` computes; the summary, its schema and the renderings come from it."""

    positive: str = field(metadata=about("The target value counted."))
    k: int = field(metadata=about("Names picked per call."))
    shown: int = field(metadata=about("Names shown per call."))
    alpha: float = field(metadata=about("Level of the test against chance."))
    adjust: Literal["none", "holm", "bh"] = field(metadata=about("Its adjustment."))
    categories: Records | None = field(default=None, metadata=tabled(TABLES["categories"]))
    deviates_from_chance: Deviating = field(
        metadata=about("Items deviating from chance, of all items.")
    )
    comparison: Records | None = field(default=None, metadata=tabled(TABLES["comparison"]))
    compare_with: str | None = field(default=None, metadata=about("That pairing stage."))
    note: str | None = field(default=None, metadata=about("Why no comparison is made."))
    items: Records = field(metadata=tabled(TABLES["items"]))
    outcomes: Records = field(metadata=tabled(TABLES["outcomes"]))
    validity: dict[str, Records] = field(default_factory=dict, metadata=validity.TABLED)


class PicksKind(AnalysisKind, spec=PicksSpec, result=PicksResult):
    """Share of picks with one target value when each call picks k of n."""

    title = "Association bias: pick k of n"

    def check(self, spec: PicksSpec, facts: StudyFacts) -> None:
        stages = {s.name: s for s in facts.config.stages}
        stage = stages.get(spec.stage)
        if stage is None or stage.pairing is None or stage.pairing.picks < 2:
            facts.problem(("stage",), f"`{spec.stage}` is not a pairing stage with `picks` > 1")
            return
        values = stage.pairing.targets.values
        if spec.positive is not None and spec.positive not in values:
            facts.problem(("positive",), f"`{spec.positive}` is not one of {values}")
        columns = set().union(*(r.keys() for r in stage.pairing.rows))
        if spec.category is not None and spec.category not in columns:
            facts.problem(("category",), f"the items file has no column `{spec.category}`")
        if spec.compare_with is not None:
            other = stages.get(spec.compare_with)
            if other is None or other.pairing is None or other.pairing.picks != 1:
                facts.problem(("compare_with",), f"`{spec.compare_with}` is no one-pick pairing")
            elif other.pairing.per_call != 1:
                facts.problem(("compare_with",), f"`{spec.compare_with}` shows several items")
            elif spec.category is None:
                facts.problem(("compare_with",), "`compare_with` compares categories: add one")

    def compute(self, results: pd.DataFrame, spec: PicksSpec, ctx: AnalysisContext) -> Section:
        stages = {s.name: s for s in ctx.study.stages}
        pairing = stages[spec.stage].pairing
        assert pairing is not None
        positive = spec.positive or pairing.targets.values[0]
        keys = ["model_label"] if len(ctx.models_in(results)) > 1 else []
        known = [n for names in pairing.targets.names.values() for n in names]
        rows = results[results["stage"] == spec.stage]
        calls = picks.pick_rows(rows, keys, positive, pairing.picks, known=known)
        # pick_rows keeps the rows' order: the value of each call's first-shown name.
        calls["first_value"] = rows["target_values"].astype(str).str.split("|").str[0].to_numpy()
        descriptors = [spec.category] if spec.category else []
        items = pd.DataFrame(pairing.rows).rename(columns={pairing.item_column: "item"})
        calls = calls.merge(items[["item", *descriptors]], on="item", how="left")
        shares = picks.share_table(
            calls, [*keys, "item"], alpha=spec.alpha, method=spec.adjust
        ).merge(items[["item", *descriptors]], on="item", how="left")
        section = Section(summary={})
        usable = (calls["outcome"] == picks.PICKED).to_numpy()
        valid = validity.call_validity(calls, keys, usable, ctx.study.seed)
        section.tables[slug(ctx.name, "validity", validity.FIRST_NAMED)] = valid
        outcomes = picks.outcome_counts(calls, keys)
        result = PicksResult(
            positive=positive,
            k=pairing.picks,
            shown=pairing.targets.per_value * len(pairing.targets.values),
            alpha=spec.alpha,
            adjust=spec.adjust,
            items=TABLES["items"].write(section.tables, ctx.name, shares),
            deviates_from_chance=Deviating(
                deviate=int(shares["deviates"].sum()) if len(shares) else 0, items=len(shares)
            ),
            outcomes=TABLES["outcomes"].write(section.tables, ctx.name, outcomes),
            validity={validity.FIRST_NAMED: validity.TABLE.records(valid)},
        )
        if spec.category:
            categories = picks.share_table(
                calls[calls[spec.category].fillna("") != ""], [*keys, spec.category]
            )
            result.categories = TABLES["categories"].write(section.tables, ctx.name, categories)
        if spec.compare_with and keys:
            result.note = "several models: the comparison with one pick of two is not made"
        if spec.compare_with and spec.category and not keys and len(shares):
            pairs, _ = association.pairing_rows(results[results["stage"] == spec.compare_with], [])
            pairs = pairs.merge(items[["item", spec.category]], on="item", how="left")
            paired = pairs[(pairs["outcome"] == PAIRED) & (pairs[spec.category].fillna("") != "")]
            single = (
                paired.assign(_hit=paired["value"] == positive)
                .groupby(spec.category, sort=False)["_hit"]
                .agg(n="size", share="mean")
                .reset_index()
            )
            compared = picks.compare_categories(categories, single, spec.category)
            result.comparison = TABLES["comparison"].write(section.tables, ctx.name, compared)
            result.compare_with = spec.compare_with
        section.summary = summary_of(result)
        if len(shares):
            section.figures[slug(ctx.name, "items")] = transmission_figures.plot_item_shares(
                shares,
                panel=keys[0] if keys else None,
                category=spec.category,
                positive=positive,
                measure=f"picks ({result.k} of {result.shown}) with a {{positive}} name",
                interval="95% t CI, calls",
            )
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Whether any item deviates from chance: Holm's smallest adjusted p over the items'
        exact tests (whatever the study's own adjustment), on their unit (calls)."""
        return items_deviate(summary.get("items", []))

    def headline(self, summary: dict[str, Any]) -> str:
        return (
            f"(picks): share of {summary['positive']} names among {summary['k']} picks of "
            f"{summary['shown']}"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        dev = summary["deviates_from_chance"]
        out = [
            f"{dev['deviate']}/{dev['items']} items deviate from chance (exact test against the "
            f"hypergeometric null, calls as units; alpha {summary['alpha']}, adjust "
            f"{summary['adjust']})"
        ]
        if summary.get("comparison"):
            out.append(
                f"{summary['k']} of {summary['shown']} against {summary['compare_with']} (one "
                "of two): difference = picks minus single"
            )
        if summary.get("note"):
            out.append(summary["note"])
        return out

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        name = slug(summary.get("name"), "items")
        return [(name, "Share of picks per item with 95% t intervals")]
