"""Kind ``picks``: the share of one target value among ``k`` picks of ``n`` (seed 000, suppl. 3).

Reads a pairing stage with ``picks`` above 1 and ``per_call: 1`` (one job, eight people, "pick
3"): every answer's picks are read by ``analysis.answer_lines.parse_picks`` (an unusable answer is
counted by reason, never guessed) and the share of positive picks is reported per item and per
category with the exact test against the hypergeometric null (``analysis.picks``), optionally
beside a one-of-two stage's category shares (the paper: bias about 5 points lower than when
hiring one person).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console
from rich.text import Text

from biasim.analysis.studies.bias_transmission.answer_lines import PAIRED
from biasim.simulator.common.html import HtmlSection
from biasim.simulator.kinds.association import _records_table, items_deviate
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug, summary_table
from biasim.simulator.kinds.lazy import association, pd, picks, transmission_figures
from biasim.simulator.kinds.sections import validity

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class PicksSpec(AnalysisSpec):
    """Which pick-k stage, which value to count, how items are grouped, what to compare with."""

    kind: Literal["picks"]
    stage: str = Field(description="A stage with `pairing` whose `picks` is above 1.")
    positive: str | None = Field(
        None, description="Target value whose share of picks is reported (default: the first)."
    )
    category: str | None = Field(
        None, description="Column of the items file grouping items (e.g. `dominance`)."
    )
    compare_with: str | None = Field(
        None,
        description="A pairing stage with one pick of two targets and one item per call "
        "(e.g. the single-job hiring prompt), set beside per category.",
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Level of the test against chance.")
    adjust: Literal["none", "holm", "bh"] = Field(
        "none", description="Adjustment across the items (`none`: the paper's count)."
    )


class PicksKind(AnalysisKind):
    """Share of picks with one target value when each call picks k of n."""

    name = "picks"
    spec = PicksSpec
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
        section = Section(
            summary={
                "positive": positive,
                "k": pairing.picks,
                "shown": pairing.targets.per_value * len(pairing.targets.values),
                "alpha": spec.alpha,
                "adjust": spec.adjust,
            }
        )
        summary = section.summary
        section.tables[slug(ctx.name, "items")] = shares
        summary["items"] = shares.to_dict("records")
        summary["deviates_from_chance"] = {
            "deviate": int(shares["deviates"].sum()) if len(shares) else 0,
            "items": len(shares),
        }
        usable = (calls["outcome"] == picks.PICKED).to_numpy()
        validity.add_call_validity(section, ctx.name, calls, keys, usable, ctx.study.seed)
        outcomes = picks.outcome_counts(calls, keys)
        section.tables[slug(ctx.name, "outcomes")] = outcomes
        summary["outcomes"] = outcomes.to_dict("records")
        if spec.category:
            categories = picks.share_table(
                calls[calls[spec.category].fillna("") != ""], [*keys, spec.category]
            )
            section.tables[slug(ctx.name, "categories")] = categories
            summary["categories"] = categories.to_dict("records")
        if spec.compare_with and keys:
            summary["note"] = "several models: the comparison with one pick of two is not made"
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
            section.tables[slug(ctx.name, "comparison")] = compared
            summary["comparison"] = compared.to_dict("records")
            summary["compare_with"] = spec.compare_with
        if len(shares):
            section.figures[slug(ctx.name, "items")] = transmission_figures.plot_item_shares(
                shares,
                panel=keys[0] if keys else None,
                category=spec.category,
                positive=positive,
                measure=f"picks ({pairing.picks} of {summary['shown']}) with a {{positive}} name",
                interval="95% t CI, calls",
            )
        return section

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        count = {"type": "integer", "minimum": 0}
        return {
            "type": "object",
            "required": [
                *["positive", "k", "shown", "alpha", "adjust", "items"],
                *["deviates_from_chance", "outcomes", "validity"],
            ],
            "properties": {
                "positive": {"type": "string", "description": "The target value counted."},
                "k": {**count, "description": "Names picked per call."},
                "shown": {**count, "description": "Names shown per call."},
                "alpha": {"type": "number", "description": "Level of the test against chance."},
                "adjust": {"enum": ["none", "holm", "bh"], "description": "Its adjustment."},
                "items": summary_table(
                    "Share of picks with `positive` per item: interval, test against chance.",
                    required=["item", "share", "p_value", "deviates"],
                ),
                "deviates_from_chance": {
                    "type": "object",
                    "required": ["deviate", "items"],
                    "properties": {"deviate": count, "items": count},
                    "description": "Items deviating from chance, of all items.",
                },
                "outcomes": summary_table("Calls per outcome of their picks."),
                "validity": validity.SUMMARY_SCHEMA,
                "categories": summary_table("Share per category of items."),
                "comparison": summary_table("Categories against one pick of two."),
                "compare_with": {"type": "string", "description": "That pairing stage."},
                "note": {"type": "string", "description": "Why no comparison is made."},
            },
        }

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Whether any item deviates from chance: Holm's smallest adjusted p over the items'
        exact tests (whatever the study's own adjustment), on their unit (calls)."""
        return items_deviate(summary.get("items", []))

    def print(self, summary: dict[str, Any], console: Console) -> None:
        name, positive = summary.get("name"), summary["positive"]
        console.print(
            Text(str(name), style="bold")
            + f" (picks): share of {positive} names among {summary['k']} picks of "
            f"{summary['shown']}"
        )
        if summary.get("categories"):
            _records_table(
                console,
                f"{name}: by category",
                summary["categories"],
                [
                    *[c for c in summary["categories"][0] if c not in _CATEGORY_STATS],
                    "calls",
                    "share",
                    "ci_low",
                    "ci_high",
                    "p_value",
                ],
            )
        dev = summary["deviates_from_chance"]
        console.print(
            f"  {dev['deviate']}/{dev['items']} items deviate from chance (exact test against the "
            f"hypergeometric null, calls as units; alpha {summary['alpha']}, adjust "
            f"{summary['adjust']})"
        )
        if summary.get("comparison"):
            _records_table(
                console,
                f"{name}: {summary['k']} of {summary['shown']} against "
                f"{summary['compare_with']} (one of two)",
                summary["comparison"],
                [
                    next(iter(summary["comparison"][0])),
                    "share_picks",
                    "share_single",
                    "difference",
                    "bias_change",
                ],
            )
            console.print(
                "  difference = picks minus single (95% interval in the table file); bias = "
                "|share - 0.5|, bias_change < 0: less biased when picking several"
            )
        if summary.get("note"):
            console.print(f"  {summary['note']}")
        counts = {r["outcome"]: r["calls"] for r in summary["outcomes"]}
        console.print(
            f"  calls: {sum(counts.values())}; usable {counts.get(picks.PICKED, 0)}; excluded: "
            + (", ".join(f"{o} {n}" for o, n in counts.items() if o != picks.PICKED) or "none")
        )
        validity.print_validity(summary, console)

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        if summary.get("categories"):
            section.table(summary["categories"], key="categories", title="By category")
        if summary.get("comparison"):
            section.table(summary["comparison"], key="comparison", title="Against one pick of two")
        section.table(summary["items"], key="items", title="Per item")
        section.table(summary["outcomes"], key="outcomes", title="Calls by outcome")
        validity.html_validity(summary, section)
        section.figure(
            slug(summary.get("name"), "items"), "Share of picks per item with 95% t intervals"
        )


#: Statistics of a category record (the rest are its group columns).
_CATEGORY_STATS = frozenset(
    {"calls", "picks", "positive", "share", "ci_low", "ci_high", "chance"}
    | {"p_value", "p_adjusted", "deviates"}
)
