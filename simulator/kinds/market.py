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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import fmt
from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import market_figures, market_stats, pd, unit_stats
from biasim.simulator.kinds.sections.codebook import tables_of
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


#: Why there are no intervals with one market (said where they would be).
_ONE_MARKET = (
    "one replicate market: the trajectory is one draw, shown without intervals (a market's "
    "cycles are not independent, so they give no interval; declare `market: {replicates: N}`)"
)
TABLES = tables_of(__name__)
DRIFT = replace(TABLES["drift"], says_nothing=lambda row: bool(row.get("same_test_as")))


@dataclass(kw_only=True)
class MarketResult:
    """What ``market`` computes; the summary, its schema and the renderings come from it."""

    by: str = field(metadata=about("The persona axis counted."))
    replicates: int = field(metadata=about("Replicate markets (the unit).", {"minimum": 0}))
    cycles: int | None = field(default=None, metadata=about("Cycles each market ran."))
    unit: str = field(metadata=about("Unit of intervals and tests."))
    confidence: float | None = field(default=None, metadata=about("Level of the intervals."))
    interval: str = field(metadata=about("What the intervals are."))
    unavailable: str | None = field(default=None, metadata=about("Why nothing was computed."))
    population: Records | None = field(
        default=None, metadata=about("Each group's share of the applicant population.")
    )
    trajectory: Records = field(metadata=tabled(TABLES["trajectory"]))
    impact_ratios: Records | None = field(default=None, metadata=tabled(TABLES["impact_ratios"]))
    parity: dict[str, float | int | None] | None = field(
        default=None, metadata=about("Markets whose workforce reached parity, and when.")
    )
    drift: Records = field(metadata=tabled(DRIFT))
    shortfalls: dict[str, int] | None = field(
        default=None,
        metadata=about(
            "Over every market and cycle: openings left unfilled (fewer advanced than "
            "openings) and applicants missing (too few people out of work), each with the "
            "cycles it happened in."
        ),
    )


class MarketKind(AnalysisKind, spec=MarketSpec, result=MarketResult):
    """Hiring over cycles: composition, impact ratios, parity and drift over replicates."""

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
            return _unavailable(study, "no market.csv beside these results")
        table = pd.read_csv(path)
        if list(table.columns) != list(COMPOSITION_COLUMNS):
            return _unavailable(study, f"{MARKET_CSV} has other columns")
        # The study's own market: policies' and switched-off trajectories are market_effects'.
        table = table[(table["policy"] == BASE) & (table["off"] == NO_SWITCH)].drop(
            columns=["policy", "off"]
        )
        table["group"] = table["group"].astype(str)
        population = population_shares(study)
        parity = market_stats.parity_cycles(table, population, spec.tolerance)
        replicates = int(table["replicate"].nunique())
        section = Section(summary={}, tables={slug(ctx.name, "parity"): parity})
        trajectory = market_stats.trajectory(table, spec.confidence)
        result = MarketResult(
            by=study.market.by,
            replicates=replicates,
            cycles=int(table["cycle"].max()),
            unit=market_stats.UNIT,
            confidence=spec.confidence,
            interval=_interval_text(replicates, spec.confidence),
            population=[{"group": g, "share": s} for g, s in population.items()],
            trajectory=TABLES["trajectory"].write(section.tables, ctx.name, trajectory),
            impact_ratios=TABLES["impact_ratios"].write(
                section.tables, ctx.name, market_stats.impact_ratios(table)
            ),
            parity=market_stats.summarise_parity(parity, spec.tolerance).as_dict(),
            drift=[],
            shortfalls=market_stats.shortfalls(table),
        )
        if replicates > 1:
            drift = market_stats.drift_tests(table, spec.confidence)
            result.drift = DRIFT.write(section.tables, ctx.name, drift)
        section.summary = summary_of(result)
        if not ctx.power_only:
            section.figures = _figures(ctx.name, table, trajectory, section.summary, population)
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """The drift test of each group (unit: the replicate market)."""
        return {
            f"drift of {row['group']}'s workforce share": unit_stats.Tested(
                row.get("p_value"), "replicate", row.get("n_units")
            )
            for row in summary.get("drift", [])
            if not row.get("same_test_as")
        }

    def headline(self, summary: dict[str, Any]) -> str:
        if summary.get("unavailable"):
            return "(market): composition over cycles"
        return (
            f"(market): {summary['replicates']} replicate market(s) over {summary['cycles']} "
            f"cycles, composition by {summary['by']}"
        )

    def lines(self, summary: dict[str, Any]) -> list[str]:
        if summary.get("unavailable"):
            return [f"not computed: {summary['unavailable']}"]
        return _shortfall_lines(summary) + _parity_lines(summary) + _drift_lines(summary)

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        if summary.get("unavailable"):
            return []
        interval = summary["interval"]
        band = interval if summary["replicates"] > 1 else "none, " + _ONE_MARKET
        return [
            (
                slug(summary["name"], "trajectories"),
                f"Share of hires, workforce and decision-makers per cycle, one line per "
                f"{summary['by']} (the mean over replicate markets); band: {band}; dotted: "
                "the group's share of the applicant population",
            ),
            (
                slug(summary["name"], "funnel"),
                f"Applicants (light) and hires (dark, of them) per cycle and {summary['by']}, "
                "summed over replicate markets",
            ),
        ]


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


def _unavailable(study: Any, why: str) -> Section:
    """Nothing computed, and why (a comparison of runs has no market.csv)."""
    market = study.market
    result = MarketResult(
        by=market.by,
        replicates=market.replicates,
        unit="replicate market",
        interval="",
        unavailable=f"{why} (the run directory's {MARKET_CSV} is read; `biasim analyze run` "
        "on the market's run directory computes it)",
        trajectory=[],
        drift=[],
    )
    return Section(summary=summary_of(result))


def _interval_text(replicates: int, confidence: float) -> str:
    if replicates < 2:
        return _ONE_MARKET
    return (
        f"{confidence:.0%} t interval of the mean share over the {replicates} replicate markets "
        "(unit: the replicate market; clipped to [0, 1])"
    )


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
    """Why there is no drift test (its table says the test where there is one)."""
    if summary["replicates"] < 2:
        return ["drift: no test with one replicate market (the unit of the test)"]
    return []
