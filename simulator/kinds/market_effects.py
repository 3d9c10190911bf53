"""Kind ``market_effects``: what each policy, and each mechanism of a labour market, does to its
workforce over the cycles.

It reads the run's composition table (``market.csv``), where every policy and every subset of
the switches of ``market.decompose`` ran as its own trajectory on the base's random numbers
(docs/guides/labor-market.md): per policy, cycle and group the change of hire and workforce
share against the base (:func:`analysis.stats.market_policy.policy_shares`) and one test per
policy whose unit is the replicate market (:func:`.policy_market_tests`, none for a run of one
market, said so); per cycle, group and switch the drift of the workforce share each switch
removes, alone and as its Shapley share (:func:`analysis.stats.market_decompose.decompose_drift`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import fmt
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.result_tables import Records, missing
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.common.samples import unreachable
from biasim.simulator.kinds.base import AnalysisKind, AnalysisSpec, Section
from biasim.simulator.kinds.lazy import pd, unit_stats
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.study.market import MARKET_CSV, NO_SWITCH
from biasim.simulator.study.policies import BASE

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts

market_policy = lazy_module("biasim.analysis.stats.market_policy")
market_decompose = lazy_module("biasim.analysis.stats.market_decompose")

#: Why a table may be missing: where ``market.csv`` is not beside the results.
NO_TABLE = (
    "no market.csv here (a comparison of runs): each run's market effects are in its own report"
)


class MarketEffectsSpec(AnalysisSpec):
    """Each policy's effect over a market's cycles, and where the drift comes from."""

    kind: Literal["market_effects"]
    n_permutations: int = Field(
        2000, ge=1, le=100_000, description="Sign flips drawn over more than 12 replicates."
    )


TABLES = tables_of(__name__)
TESTS = replace(TABLES["tests"], says_nothing=lambda row: missing(row.get("p_value")))


@dataclass(kw_only=True)
class MarketEffectsResult:
    """What ``market_effects`` computes; the summary, its schema and renderings come from it."""

    note: str = field(metadata=about("Why the tables are empty, if so."))
    switches: list[str] | None = field(
        default=None, metadata=about("The mechanisms `market.decompose` switched off.")
    )
    tests: Records = field(metadata=tabled(TESTS))
    effects: Records = field(metadata=tabled(TABLES["effects"]))
    decomposition: Records = field(metadata=tabled(TABLES["decomposition"]))


class MarketEffectsKind(AnalysisKind, spec=MarketEffectsSpec, result=MarketEffectsResult):
    """Per cycle: each policy's paired change of hire and workforce share, its test over
    replicate markets, and the drift each switched-off mechanism removes."""

    title = "Market effects: each policy and each mechanism over cycles"

    def check(self, spec: MarketEffectsSpec, facts: StudyFacts) -> None:
        config = facts.config
        if config.market is None:
            facts.problem(("kind",), "needs a market study (`cycles:` with `market:`)")
        elif not config.policies and not config.market.decompose:
            facts.problem(
                ("kind",),
                "the market declares no `policies:` and no `market.decompose`: there is no "
                "trajectory to read against the base",
            )

    def compute(
        self, results: pd.DataFrame, spec: MarketEffectsSpec, ctx: AnalysisContext
    ) -> Section:
        path = ctx.out_dir / MARKET_CSV if ctx.out_dir is not None else None
        if path is None or not path.is_file():
            empty = MarketEffectsResult(note=NO_TABLE, effects=[], tests=[], decomposition=[])
            return Section(summary_of(empty))
        table = pd.read_csv(path)
        policies = table[table["off"] == NO_SWITCH]
        starts = {
            name: policy.from_cycle
            for name, policy in (ctx.study.policies or {}).items()
            if policy.from_cycle is not None
        }
        tests = market_policy.policy_market_tests(
            policies, starts=starts, n_permutations=spec.n_permutations, seed=ctx.study.seed
        )
        assert ctx.study.market is not None  # check() refuses a study without one
        switches = ctx.study.market.decompose
        decomposition = (
            market_decompose.decompose_drift(table, switches) if switches else pd.DataFrame()
        )
        section = Section(summary={})
        frames = {
            TABLES["effects"]: market_policy.policy_shares(policies),
            TESTS: tests,
            TABLES["decomposition"]: decomposition,
        }
        # A table with no rows writes no file (the run had no policy, or no switch).
        written = {
            spec.key: spec.write(section.tables, ctx.name, frame) if len(frame) else []
            for spec, frame in frames.items()
        }
        result = MarketEffectsResult(note="", switches=list(switches), **written)
        section.summary = summary_of(result)
        return section

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        """Each policy's joint test against the base (unit: the replicate market), over the
        cycles from its start (``from_cycle``) on."""
        return {
            _test_name(row["policy"], row["baseline"], row["from_cycle"]): unit_stats.Tested(
                row.get("p_value"),
                "replicate",
                row.get("n_units"),
                smallest_p=row.get("smallest_p"),
            )
            for row in summary.get("tests", [])
        }

    def power_no_effect(self, spec: MarketEffectsSpec, config: Any) -> set[str]:
        """The tests of a policy the synthetic responder cannot tell from the base (it
        changes only text the test double does not read): no power to report."""
        from biasim.simulator.kinds.policy_effect import acts_on_double

        return {
            _test_name(name, BASE, policy.from_cycle or 1)
            for name, policy in (config.policies or {}).items()
            if not acts_on_double(policy, config)
        }

    def headline(self, summary: dict[str, Any]) -> str:
        return "(market_effects): market effects over cycles"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        """Where a policy starts later, which cycles its test reads; at the last cycle, each
        policy's workforce share per group against the base, then the decomposition of the
        drift (every cycle is in the tables)."""
        if summary.get("note"):
            return [summary["note"]]
        effects = summary["effects"]
        last = max((row["cycle"] for row in effects + summary["decomposition"]), default=None)
        # A policy started later is the base before: its test reads its own cycles.
        lines = [
            f"{test['policy']} starts at cycle {test['from_cycle']} (the base before, changes "
            f"0): test over cycles >= {test['from_cycle']}"
            for test in summary["tests"]
            if test["from_cycle"] > 1
        ]
        lines += [
            f"{row['policy']}, cycle {last}, {row['group']}: workforce share "
            f"{fmt(row['workforce_share_baseline'])} -> {fmt(row['workforce_share_policy'])}"
            f" ({_signed(row['workforce_share_change'])})"
            for row in effects
            if row["cycle"] == last
        ]
        parts = [r for r in summary["decomposition"] if r["cycle"] == last]
        for value in dict.fromkeys(r["group"] for r in parts):
            mine = [r for r in parts if r["group"] == value]
            lines.append(
                f"drift of {value}'s workforce share by cycle {last}: "
                f"{_signed(mine[0]['drift'])}, every switch off "
                f"{_signed(mine[0]['drift_all_off'])}; "
                + "; ".join(
                    f"{row['switch']} off removes {_signed(row['removed_alone'])} alone, "
                    f"Shapley {_signed(row['shapley'])}"
                    for row in mine
                )
            )
        stuck = unreachable(summary["tests"], "replicate markets")
        return [*lines, stuck] if stuck else lines


def _test_name(policy: str, baseline: str, start: int) -> str:
    """A policy's test as ``biasim power`` names it (its first cycle where it starts later)."""
    return f"{policy} vs {baseline}" + (f" from cycle {start}" if start > 1 else "")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
