"""Kind ``market``: what a labour market's cycles do to the composition of its workforce.

Reads the per-cycle composition table a market run writes beside its results (``market.csv``,
one row per replicate market, cycle and group) through the plain functions of
``analysis.stats.market``: per cycle and group, the share of hires, workforce and
decision-makers with t intervals over replicate markets; the per-cycle and cumulative impact
ratios of hiring; the time to parity with the population; and a test of drift of the
workforce's composition. The unit of every interval and test is the replicate market.
It shows the study's own market only (rows with ``policy`` = ``base`` and ``off`` = ``none``):
each policy's and each switched-off trajectory is read against it by ``market_effects``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug, summary_table
from biasim.simulator.kinds.lazy import market_figures, market_stats, pd, unit_stats
from biasim.simulator.study.market import COMPOSITION_COLUMNS, MARKET_CSV, NO_SWITCH
from biasim.simulator.study.policies import BASE

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


class MarketSpec(AnalysisSpec):
    """Composition of hires, workforce and decision-makers over a market's cycles."""

    kind: Literal["market"]
    tolerance: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="Parity: a workforce is at parity when every group's share is within this "
        "of its share of the applicant population.",
    )
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Level of the intervals.")


#: Why there are no intervals with one market (printed where they would be).
_ONE_MARKET = (
    "one replicate market: the trajectory is one draw, shown without intervals (a market's "
    "cycles are not independent, so they give no interval; declare `market: {replicates: N}`)"
)
_TRAJECTORY_NOTE = (
    "share = the group's share of the cycle's hires, of the workforce at the end of the cycle "
    "and of the cycle's decision-makers, averaged over replicate markets; {interval}"
)


class MarketKind(AnalysisKind):
    """Hiring over cycles: composition, impact ratios, parity and drift over replicates."""

    name = "market"
    spec = MarketSpec
    title = "Market: composition over cycles"

    def check(self, spec: MarketSpec, facts: StudyFacts) -> None:
        if facts.config.market is None:
            facts.problem(
                ("kind",),
                "`market` reads a market study's per-cycle composition: the study declares "
                "no `cycles:` and `market:`",
            )

    def compute(self, results: pd.DataFrame, spec: MarketSpec, ctx: AnalysisContext) -> Section:
        study = ctx.study
        assert study.market is not None
        path = ctx.out_dir / MARKET_CSV if ctx.out_dir is not None else None
        if path is None or not path.is_file():
            return Section(summary=_unavailable(study, "no market.csv beside these results"))
        table = pd.read_csv(path)
        if list(table.columns) != list(COMPOSITION_COLUMNS):
            return Section(summary=_unavailable(study, f"{MARKET_CSV} has other columns"))
        # The study's own market: policies' and switched-off trajectories are market_effects'.
        table = table[(table["policy"] == BASE) & (table["off"] == NO_SWITCH)].drop(
            columns=["policy", "off"]
        )
        table["group"] = table["group"].astype(str)
        population = population_shares(study)
        trajectory = market_stats.trajectory(table, spec.confidence)
        ratios = market_stats.impact_ratios(table)
        parity = market_stats.parity_cycles(table, population, spec.tolerance)
        drift = market_stats.drift_tests(table, spec.confidence)
        replicates = int(table["replicate"].nunique())
        summary: dict[str, Any] = {
            "by": study.market.by,
            "replicates": replicates,
            "cycles": int(table["cycle"].max()),
            "unit": market_stats.UNIT,
            "confidence": spec.confidence,
            "interval": _interval_text(replicates, spec.confidence),
            "population": [{"group": g, "share": s} for g, s in population.items()],
            "trajectory": trajectory.to_dict("records"),
            "impact_ratios": ratios.to_dict("records"),
            "parity": market_stats.summarise_parity(parity, spec.tolerance).as_dict(),
            "drift": drift.to_dict("records") if replicates > 1 else [],
            "shortfalls": market_stats.shortfalls(table),
        }
        tables = {
            slug(ctx.name, "trajectory"): trajectory,
            slug(ctx.name, "impact_ratios"): ratios,
            slug(ctx.name, "parity"): parity,
        }
        if replicates > 1:
            tables[slug(ctx.name, "drift")] = drift
        section = Section(summary=summary, tables=tables)
        if not ctx.power_only:
            section.figures = _figures(ctx.name, table, trajectory, summary, population)
        return section

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        count = {"type": "integer", "minimum": 0}
        number = {"type": ["number", "null"]}
        return {
            "type": "object",
            "required": ["by", "replicates", "unit", "interval", "trajectory"],
            "properties": {
                "by": {"type": "string", "description": "The persona axis counted."},
                "replicates": {**count, "description": "Replicate markets (the unit)."},
                "cycles": {**count, "description": "Cycles each market ran."},
                "unit": {"type": "string", "description": "Unit of intervals and tests."},
                "confidence": {**number, "description": "Level of the intervals."},
                "interval": {"type": "string", "description": "What the intervals are."},
                "unavailable": {"type": "string", "description": "Why nothing was computed."},
                "population": summary_table("Each group's share of the applicant population."),
                "trajectory": summary_table(
                    "Per measure, cycle and group: mean share over replicate markets, sd, "
                    "t interval.",
                    required=["measure", "cycle", "group", "mean"],
                ),
                "impact_ratios": summary_table(
                    "Per cycle and group: hire rate among applicants and its ratio to the "
                    "highest group's, in the cycle and cumulatively (pooled over markets)."
                ),
                "parity": {
                    "type": "object",
                    "description": "Markets whose workforce reached parity, and when.",
                },
                "shortfalls": {
                    "type": "object",
                    "description": "Over every market and cycle: openings left unfilled (fewer "
                    "advanced than openings) and applicants missing (too few people out of "
                    "work), each with the cycles it happened in.",
                },
                "drift": summary_table(
                    "Per group: the workforce share's change from cycle 0 to the last, t test "
                    "over replicate markets (empty with one market); `same_test_as` names the "
                    "group whose test a second of two groups repeats.",
                    required=["group", "p_value", "unit", "n_units"],
                ),
            },
        }

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """The drift test of each group (unit: the replicate market)."""
        return {
            f"drift of {row['group']}'s workforce share": unit_stats.Tested(
                row.get("p_value"), "replicate", row.get("n_units")
            )
            for row in summary.get("drift", [])
            if not row.get("same_test_as")
        }

    def print(self, summary: dict[str, Any], console: Console) -> None:
        console.print(Text(str(summary["name"]), style="bold") + f": {_headline(summary)}")
        if summary.get("unavailable"):
            return
        _print_trajectory(summary, console)
        _print_impact_ratios(summary, console)
        for line in _shortfall_lines(summary) + _parity_lines(summary) + _drift_lines(summary):
            console.print(f"  {line}")

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        section.paragraph(_headline(summary))
        if summary.get("unavailable"):
            return
        interval = summary["interval"]
        section.table(
            summary["trajectory"],
            key="trajectory",
            title=f"Composition per cycle by {summary['by']}",
            columns=[
                Column("measure", "share of", "text"),
                Column("cycle", "cycle", "int"),
                Column("group", summary["by"], "text"),
                Column("mean", "mean share", ".3f"),
                Column("ci_low", "interval", "ci", upper="ci_high"),
                Column("sd", "sd over markets", ".3f"),
                Column("n_replicates", "markets", "int"),
            ],
            note=_TRAJECTORY_NOTE.format(interval=interval),
        )
        section.table(
            summary["impact_ratios"],
            key="impact_ratios",
            title="Impact ratios of hiring per cycle",
            columns=[
                Column("cycle", "cycle", "int"),
                Column("group", summary["by"], "text"),
                Column("applicants", "applicants", "int"),
                Column("hires", "hires", "int"),
                Column("rate", "hire rate", ".3f"),
                Column("impact_ratio", "impact ratio", ".3f"),
                Column("cumulative_impact_ratio", "cumulative IR", ".3f"),
            ],
            note=_RATIO_NOTE,
        )
        section.figure(
            slug(summary["name"], "trajectories"),
            f"Share of hires, workforce and decision-makers per cycle, one line per "
            f"{summary['by']} (the mean over replicate markets); band: "
            + (interval if summary["replicates"] > 1 else "none, " + _ONE_MARKET)
            + "; dotted: the group's share of the applicant population",
        )
        section.figure(
            slug(summary["name"], "funnel"),
            f"Applicants (light) and hires (dark, of them) per cycle and {summary['by']}, "
            "summed over replicate markets",
        )
        for line in _shortfall_lines(summary) + _parity_lines(summary) + _drift_lines(summary):
            section.paragraph(line)
        if summary["drift"]:
            section.table(
                # The test repeated by a second of two groups is shown once, on the first.
                [{**r, "p_value": None} if r.get("same_test_as") else r for r in summary["drift"]],
                key="drift",
                title="Drift of the workforce's composition",
                columns=[
                    Column("group", summary["by"], "text"),
                    Column("start", "share at start", ".3f"),
                    Column("end", "share at end", ".3f"),
                    Column("change", "change", ".3f"),
                    Column("ci_low", "interval", "ci", upper="ci_high"),
                    Column("p_value", "p", "p"),
                    Column("n_units", "markets", "int"),
                ],
            )


_RATIO_NOTE = (
    "hire rate = the group's hires over its applicants; impact ratio = the rate over the "
    "highest group's in the cycle; cumulative IR = the same over every cycle up to this one. "
    "Counts pooled over replicate markets: point estimates, no interval."
)


def population_shares(study: Any) -> dict[str, float]:
    """Each group's share of the applicant population the market draws from (the study's
    declared values of ``by``, in order)."""
    from biasim.simulator.study.design import population_specs

    market = study.market
    pool = population_specs(study, market.applicants.population)
    counts = Counter(dict(spec.persona.attributes).get(market.by) for spec in pool)
    total = sum(counts.values())
    return {str(v): counts[v] / total for v in study.personas.axes[market.by]}


def _figures(
    name: str,
    table: pd.DataFrame,
    trajectory: pd.DataFrame,
    summary: dict[str, Any],
    population: dict[str, float],
) -> dict[str, Any]:
    """The trajectories with their bands and the funnel per cycle."""
    by, replicates = summary["by"], summary["replicates"]
    band = summary["interval"].split(" (unit")[0] if replicates > 1 else "none: " + _ONE_MARKET
    return {
        slug(name, "trajectories"): market_figures.plot_market_trajectories(
            trajectory, by, band, population
        ),
        slug(name, "funnel"): market_figures.plot_market_funnel(
            market_stats.funnel(table), by, replicates
        ),
    }


def _unavailable(study: Any, why: str) -> dict[str, Any]:
    market = study.market
    return {
        "by": market.by,
        "replicates": market.replicates,
        "unit": "replicate market",
        "interval": "",
        "unavailable": f"{why} (the run directory's {MARKET_CSV} is read; `biasim analyze run` "
        "on the market's run directory computes it)",
        "trajectory": [],
        "drift": [],
    }


def _interval_text(replicates: int, confidence: float) -> str:
    if replicates < 2:
        return _ONE_MARKET
    return (
        f"{confidence:.0%} t interval of the mean share over the {replicates} replicate markets "
        "(unit: the replicate market; clipped to [0, 1])"
    )


def _headline(summary: dict[str, Any]) -> str:
    if summary.get("unavailable"):
        return f"not computed: {summary['unavailable']}"
    return (
        f"{summary['replicates']} replicate market(s) over {summary['cycles']} cycles, "
        f"composition by {summary['by']}"
    )


def _cell(row: dict[str, Any] | None, intervals: bool) -> str:
    if row is None:
        return "-"
    if not intervals:
        return fmt(row["mean"], ".2f")
    return f"{fmt(row['mean'], '.2f')} ({fmt(row['ci_low'], '.2f')}-{fmt(row['ci_high'], '.2f')})"


def _print_trajectory(summary: dict[str, Any], console: Console) -> None:
    """Per cycle and group: the share of hires, workforce and decision-makers."""
    intervals = summary["replicates"] > 1
    rows = {(r["measure"], r["cycle"], r["group"]): r for r in summary["trajectory"]}
    by = summary["by"]
    table = Table(title=f"{summary['name']}: share per cycle by {by}")
    for column in ("cycle", by, "hires", "workforce", "deciders"):
        table.add_column(column, justify="right", overflow="fold")
    groups = [p["group"] for p in summary.get("population", [])]
    for cycle in range(summary["cycles"] + 1):
        for group in groups:
            cells = [_cell(rows.get((m, cycle, group)), intervals) for m in market_stats.MEASURES]
            table.add_row(str(cycle), group, *cells)
    print_table(console, table)
    what = summary["interval"].split(" (unit")[0]
    console.print(f"  {what}" + ("; unit: the replicate market" if intervals else ""))


def _print_impact_ratios(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"{summary['name']}: impact ratios of hiring")
    for column in ("cycle", summary["by"], "applied", "hired", "IR", "cumulative IR"):
        table.add_column(column, justify="right", overflow="fold")
    for row in summary["impact_ratios"]:
        table.add_row(
            str(row["cycle"]),
            str(row["group"]),
            str(row["applicants"]),
            str(row["hires"]),
            fmt(row["impact_ratio"], ".2f"),
            fmt(row["cumulative_impact_ratio"], ".2f"),
        )
    print_table(console, table)
    console.print("  IR = hire rate / highest group's; pooled over markets, no interval")


def _shortfall_lines(summary: dict[str, Any]) -> list[str]:
    """Openings left unfilled and applicants missing, said whenever there were any (a
    workforce that shrinks is not the preference's doing)."""
    found = summary.get("shortfalls") or {}
    lines = [
        f"unfilled openings: {found.get('unfilled', 0)} in {found.get('cycles_unfilled', 0)} of "
        f"{found.get('cycles', 0)} market-cycles (fewer applicants advanced than there were "
        "openings: the workforce shrank by as many)"
    ]
    if found.get("applicants_short"):
        lines.append(
            f"applicants missing: {found['applicants_short']} in {found['cycles_short']} "
            "market-cycles (fewer people out of work than `per_cycle`; employees do not apply)"
        )
    return lines


def _parity_lines(summary: dict[str, Any]) -> list[str]:
    parity = summary.get("parity") or {}
    if not parity:
        return []
    reached = (
        f"median first cycle {fmt(parity['median_cycle'], '.1f')}, latest {parity['last_cycle']}"
        if parity["reached"]
        else "none reached it"
    )
    return [
        f"parity (every group's workforce share within {parity['tolerance']:g} of the "
        f"population's): {parity['reached']} of {parity['replicates']} markets at some cycle "
        f"({parity['at_start']} at the start, {parity['at_end']} at the last cycle); {reached}"
    ]


def _drift_lines(summary: dict[str, Any]) -> list[str]:
    if summary["replicates"] < 2:
        return ["drift: no test with one replicate market (the unit of the test)"]
    return [
        f"drift of {row['group']}'s workforce share, cycle {row['first_cycle']} -> "
        f"{row['last_cycle']}: {fmt(row['change'], '+.3f')} "
        f"({fmt(row['ci_low'], '+.3f')} to {fmt(row['ci_high'], '+.3f')}), "
        + (
            f"the same test as {row['same_test_as']}'s (two groups: the shares add up to 1)"
            if row.get("same_test_as")
            else f"t test p {format_p(row['p_value'])} (unit: replicate market, "
            f"{row['n_units']} units)"
        )
        for row in summary["drift"]
    ]
