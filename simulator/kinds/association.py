"""Kind ``association``: association bias from a word-pairing stage (seed 000, Exp. 1-2).

Reads every answer of a pairing stage line by line (``analysis.answer_lines``; what is not a
pair is counted by reason, never guessed) and reports the share of items paired with one target
value: per item with its Wilson interval and exact binomial test against chance (the count of
items that "deviate from chance"), per category of items (Table 4, with a bootstrap over calls),
and two conditions side by side per item (Table 5).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.simulator.common.html import HtmlSection, fmt, format_p, number_spec
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug, summary_table
from biasim.simulator.kinds.lazy import association, pd, transmission_figures, unit_stats
from biasim.simulator.kinds.sections import validity

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
    positive: str | None = Field(
        None, description="Target value whose share is reported (default: the first value)."
    )
    category: str | None = Field(
        None, description="Column of the items file grouping items (Table 4: `dominance`)."
    )
    describe: list[str] = Field(
        default_factory=list, description="Further columns of the items file shown per item."
    )
    compare: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Two levels of `by` compared per item, first minus second (Table 5).",
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Level of the test against chance.")
    adjust: Literal["none", "holm", "bh"] = Field(
        "none",
        description="Adjustment across the items of a level (`none`: the paper's count).",
    )
    n_boot: int = Field(2000, ge=100, description="Bootstrap resamples of calls (categories).")


class AssociationKind(AnalysisKind):
    """Share of pairings with one target value, per item, category and condition."""

    name = "association"
    spec = AssociationSpec
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
        section = Section(
            summary={"positive": positive, "alpha": spec.alpha, "adjust": spec.adjust}
        )
        summary = section.summary
        section.tables[slug(ctx.name, "items")] = shares
        summary["items"] = shares.to_dict("records")
        status = association.status_counts(pairs, keys)
        section.tables[slug(ctx.name, "exclusions")] = status
        summary["item_status"] = status.to_dict("records")
        paired = (pairs["outcome"] == association.PAIRED).to_numpy()
        validity.add_call_validity(section, ctx.name, pairs, keys, paired, ctx.study.seed)
        section.tables[slug(ctx.name, "lines")] = lines
        summary["unused_lines"] = lines.assign(reason=lines["reason"].astype(str)).to_dict(
            "records"
        )
        if shares.empty:
            summary["note"] = NO_PAIRING
            return section
        deviates = (
            shares.groupby(keys, sort=False)["deviates"].agg(["sum", "size"]).reset_index()
            if keys
            else pd.DataFrame({"sum": [shares["deviates"].sum()], "size": [len(shares)]})
        ).rename(columns={"sum": "deviate", "size": "items"})
        summary["deviates_from_chance"] = deviates.to_dict("records")
        # The random order cancels a preference for the first-named target; it is measured.
        summary["position"] = association.position_effect(pairs, keys, positive).to_dict("records")
        if spec.category:
            categorised = pairs[pairs[spec.category].fillna("") != ""]
            categories = association.category_table(
                categorised,
                [*keys, spec.category],
                positive,
                n_boot=spec.n_boot,
                seed=ctx.study.seed,
            )
            section.tables[slug(ctx.name, "categories")] = categories
            summary["categories"] = categories.to_dict("records")
        if spec.compare and spec.by:
            compared = association.compare_shares(
                shares, spec.by, spec.compare[0], spec.compare[1], ["item", *descriptors], positive
            )
            compared = compared.sort_values([*descriptors, "item"], ignore_index=True)
            section.tables[slug(ctx.name, "comparison")] = compared
            summary["comparison"] = compared.to_dict("records")
            summary["compare"] = list(spec.compare)
        section.figures[slug(ctx.name, "items")] = transmission_figures.plot_item_shares(
            shares,
            panel=spec.by,
            category=spec.category,
            positive=positive,
        )
        return section

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "required": [
                *["positive", "alpha", "adjust", "items", "item_status", "unused_lines"],
                "validity",
            ],
            "properties": {
                "positive": {"type": "string", "description": "The target value counted."},
                "alpha": {"type": "number", "description": "Level of the test against chance."},
                "adjust": {"enum": ["none", "holm", "bh"], "description": "Its adjustment."},
                "items": summary_table(
                    "Share of pairings with `positive` per item (and level of `by`): Wilson "
                    "interval, exact binomial test against chance, its unit.",
                    required=["item", "n", "share", "p_value", "deviates", "unit"],
                ),
                "item_status": summary_table("Items per outcome of their pairing."),
                "unused_lines": summary_table("Answer lines that were no pair, and why."),
                "validity": validity.SUMMARY_SCHEMA,
                "deviates_from_chance": summary_table("Items deviating, per level."),
                "position": summary_table("Share when named first vs second."),
                "categories": summary_table("Share per category of items."),
                "comparison": summary_table("Two levels of `by` per item."),
                "compare": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "The levels compared, first minus second.",
                },
                "note": {"type": "string", "description": "Why there is no share."},
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
            + f" (association): share of pairings with a {positive} target"
        )
        if summary.get("note"):
            console.print(f"  {summary['note']}", highlight=False)
            _print_unused(summary, console)
            validity.print_validity(summary, console)
            return
        if summary.get("categories"):
            _records_table(
                console,
                f"{name}: by category (Table 4)",
                summary["categories"],
                [
                    *[
                        k
                        for k in summary["categories"][0]
                        if not k.startswith(("n_", "ci_", "boot_"))
                    ],
                    "ci_low",
                    "ci_high",
                    "boot_low",
                    "boot_high",
                ],
            )
        for row in summary["deviates_from_chance"]:
            where = ", ".join(str(v) for k, v in row.items() if k not in ("deviate", "items"))
            console.print(
                f"  {where or 'all'}: {row['deviate']}/{row['items']} items deviate from chance "
                f"(exact binomial vs 0.5, alpha {summary['alpha']}, adjust {summary['adjust']})"
            )
        for row in summary["position"]:
            where = ", ".join(str(row[k]) for k in row if k not in _POSITION_STATS)
            console.print(
                f"  {where or 'all'}: naming a {positive} target first changes its share by "
                f"{fmt(row['effect'], '+.3f')} (position effect; Welch p "
                f"{format_p(row['p_value'])} over calls)"
            )
        if summary.get("comparison"):
            first, second = summary["compare"]
            cols = [
                "item",
                f"share_{first}",
                f"share_{second}",
                "difference",
                "diff_low",
                "diff_high",
            ]
            _records_table(
                console,
                f"{name}: {first} vs {second} per item (Table 5)",
                summary["comparison"],
                cols,
            )
        _print_unused(summary, console)
        validity.print_validity(summary, console)
        console.print(
            "  Wilson intervals treat pairings as independent; the bootstrap resamples calls "
            "(one call pairs every item of a category with the same two names)."
        )

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        if summary.get("note"):
            section.paragraph(summary["note"])
            section.table(summary["item_status"], key="item_status", title="Items by status")
            validity.html_validity(summary, section)
            if summary["unused_lines"]:
                section.table(
                    summary["unused_lines"], key="unused_lines", title="Unused answer lines"
                )
            return
        if summary.get("categories"):
            section.table(summary["categories"], key="categories", title="By category (Table 4)")
        section.table(
            summary["deviates_from_chance"],
            key="deviates_from_chance",
            title="Items that deviate from chance",
        )
        if summary.get("comparison"):
            section.table(
                summary["comparison"], key="comparison", title="Per item, two conditions (Table 5)"
            )
        section.table(summary["items"], key="items", title="Per item")
        section.table(summary["item_status"], key="item_status", title="Items by status")
        validity.html_validity(summary, section)
        if summary["unused_lines"]:
            section.table(summary["unused_lines"], key="unused_lines", title="Unused answer lines")
        section.figure(
            slug(summary.get("name"), "items"), "Share per item with 95% Wilson intervals"
        )


#: Why an association section has no shares, tests or figure.
NO_PAIRING = (
    "no answer paired a shown item with exactly one target: no shares, tests or figure "
    "(see the items by status and the unused answer lines)"
)


def _print_unused(summary: dict[str, Any], console: Console) -> None:
    """Items shown and excluded by status, and answer lines that gave no pair, by reason."""
    excluded = [r for r in summary["item_status"] if r["outcome"] != "paired"]
    shown = sum(r["items"] for r in summary["item_status"])
    console.print(
        f"  items shown: {shown}; excluded: "
        + (
            ", ".join(
                f"{r['outcome']} {r['items']}"
                + "".join(f" [{v}]" for k, v in r.items() if k not in ("outcome", "items"))
                for r in excluded
            )
            or "none"
        )
    )
    if summary["unused_lines"]:
        console.print(
            "  unused answer lines: "
            + ", ".join(
                f"{r['reason']} {r['lines']}"
                + "".join(f" [{v}]" for k, v in r.items() if k not in ("reason", "lines"))
                for r in summary["unused_lines"]
            )
        )


#: The statistics of a position record (the rest of a record are its group columns).
_POSITION_STATS = frozenset(
    {"calls_first", "calls_second", "share_when_first", "share_when_second", "effect", "p_value"}
)


def _records_table(
    console: Console, title: str, records: list[dict[str, Any]], columns: list[str]
) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in records:
        table.add_row(
            *[
                fmt(row[c], number_spec(c)) if isinstance(row[c], float) else str(row[c])
                for c in columns
            ]
        )
    print_table(console, table)


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
