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

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.html import fmt, format_p
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    summary_table,
)
from biasim.simulator.kinds.lazy import pd
from biasim.simulator.study.market import MARKET_CSV, NO_SWITCH

if TYPE_CHECKING:
    from rich.console import Console

market_policy = lazy_module("biasim.analysis.stats.market_policy")
market_decompose = lazy_module("biasim.analysis.stats.market_decompose")

#: Why a table may be missing: where ``market.csv`` is not beside the results.
NO_TABLE = (
    "no market.csv here (a comparison or a simulated power study): each run's market effects "
    "are in its own report"
)


class MarketEffectsSpec(AnalysisSpec):
    """Each policy's effect over a market's cycles, and where the drift comes from."""

    kind: Literal["market_effects"]
    n_permutations: int = Field(
        2000, ge=1, le=100_000, description="Sign flips drawn over more than 12 replicates."
    )


class MarketEffectsKind(AnalysisKind):
    """Per cycle: each policy's paired change of hire and workforce share, its test over
    replicate markets, and the drift each switched-off mechanism removes."""

    name = "market_effects"
    spec = MarketEffectsSpec
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
            return Section({"note": NO_TABLE, "effects": [], "tests": [], "decomposition": []})
        table = pd.read_csv(path)
        policies = table[table["off"] == NO_SWITCH]
        effects = market_policy.policy_shares(policies)
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
        tables = {"effects": effects, "tests": tests, "decomposition": decomposition}
        summary: dict[str, Any] = {
            "note": "",
            "switches": list(switches),
            **{key: _records(frame) for key, frame in tables.items()},
        }
        return Section(summary, tables={f"{ctx.name}_{k}": v for k, v in tables.items() if len(v)})

    def print(self, summary: dict[str, Any], console: Console) -> None:
        console.print(f"{summary.get('name')}: market effects over cycles", style="bold")
        for line in summary_lines(summary):
            console.print(line, highlight=False)

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["note", "effects", "tests", "decomposition"],
            "properties": {
                "note": {"type": "string", "description": "Why the tables are empty, if so."},
                "switches": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The mechanisms `market.decompose` switched off.",
                },
                "effects": summary_table(
                    "Per policy, cycle and group: hire and workforce share under the policy "
                    "and the base, the change and its interval over replicate markets."
                ),
                "tests": summary_table(
                    "One test per policy, unit the replicate market (no p for one market); "
                    "a policy with `from_cycle` k is tested over cycles >= k (`from_cycle`).",
                    required=["p_value", "unit", "n_units"],
                ),
                "decomposition": summary_table(
                    "Per cycle, group and switch: the drift, what switching it off removes "
                    "alone, and its Shapley share."
                ),
            },
        }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The console's lines (each under 80 characters): per policy its test and, at the last
    cycle, each group's workforce share under base and policy; then the decomposition at the
    last cycle. Every cycle is in the tables."""
    if summary.get("note"):
        return [f"  {summary['note']}"]
    lines = []
    effects, tests = summary["effects"], summary["tests"]
    last = max((row["cycle"] for row in effects), default=None)
    for test in tests:
        policy = test["policy"]
        if test["p_value"] is None:
            # The summary's note says why; the console keeps to one line.
            lines.append(
                f"  {policy} vs {test['baseline']}: no test (one replicate market: one unit)"
            )
        else:
            lines.append(
                f"  {policy} vs {test['baseline']}: joint p {format_p(test['p_value'])} "
                f"(df {test['df']}, unit: {test['unit']}, {test['n_units']} of them)"
            )
        start = test.get("from_cycle", 1)
        if start > 1:
            # A policy started later is the baseline before: its test reads its own cycles.
            lines.append(
                f"    starts at cycle {start} (the base before, changes 0): "
                f"test over cycles >= {start}"
            )
        for row in (r for r in effects if r["policy"] == policy and r["cycle"] == last):
            lines.append(
                f"    cycle {last}, {row['group']}: workforce share "
                f"{fmt(row['workforce_share_baseline'])} -> {fmt(row['workforce_share_policy'])}"
                f" ({_signed(row['workforce_share_change'])})"
            )
    parts = [r for r in summary["decomposition"] if r["cycle"] == last]
    for group in dict.fromkeys(r["group"] for r in parts):
        mine = [r for r in parts if r["group"] == group]
        lines.append(
            f"  drift of {group}'s workforce share by cycle {last}: "
            f"{_signed(mine[0]['drift'])}, every switch off "
            f"{_signed(mine[0]['drift_all_off'])}"
        )
        for row in mine:
            lines.append(
                f"    {row['switch']} off removes {_signed(row['removed_alone'])} alone, "
                f"Shapley {_signed(row['shapley'])}"
            )
    if parts:
        lines.append(
            "  one-at-a-time removals depend on the order of switching; Shapley values add up"
        )
    return lines


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
