"""Kind ``policy_effect``: what a change of hiring process does to who is selected end to end.

Reads a pipeline study with ``policies:`` (see ``simulator.study.policies``): every applicant's
document is read under every policy in the same pools. Per group (and race x gender when
``intersectional``): each policy's end-to-end selection rate and impact ratio with intervals,
side by side; each policy against the baseline with one paired test joint across the groups,
whose unit is the first-stage pool (the applicant where documents are read alone), Holm across
the policies, and per-group intervals of the change beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from biasim.simulator.common.result_tables import Records
from biasim.simulator.common.results import about, summary_of, tabled
from biasim.simulator.common.samples import few_pools, unreachable
from biasim.simulator.kinds.base import AnalysisSpec, Section, slug
from biasim.simulator.kinds.lazy import columns, figures, pd, policy_stats, unit_stats
from biasim.simulator.kinds.pipeline import (
    audited,
    authors_table,
    candidates_table,
    readings_table,
    stage_chain,
    stage_picks,
)
from biasim.simulator.kinds.sections.codebook import tables_of
from biasim.simulator.kinds.sections.per_run import PerRunKind
from biasim.simulator.kinds.spec_fields import Adjustment, groups_field
from biasim.simulator.study.policies import BASE, policy_stage_name
from biasim.simulator.study.policy_copies import policy_names

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested
    from biasim.simulator.kinds.base import AnalysisContext, StudyFacts


#: Name of the intersectional group column (its values join the axes' values with `|`).
JOINED = "_x_"


class PolicyEffectSpec(AnalysisSpec):
    """End-to-end selection under each policy of a pipeline study, and each policy's effect."""

    kind: Literal["policy_effect"]
    stages: list[str] = Field(
        min_length=1, description="The study's reading stages in pipeline order (policy base)."
    )
    groups: list[str] = groups_field()
    intersectional: bool = Field(
        True, description="Also the groups crossed (e.g. race x gender), when there are two+."
    )
    baseline: str = Field(BASE, description="The policy every other is compared with.")
    n_permutations: int = Field(2000, ge=100, description="Pool swaps per joint paired test.")
    n_boot: int = Field(1000, ge=100, description="Cluster-bootstrap draws per interval.")
    adjust: Adjustment = Field(
        "holm",
        description="Adjustment of the joint tests across the policies compared with the "
        "baseline (one family per grouping).",
    )


#: The tables of its result, declared in policy_effect.tables.yaml.
TABLES = tables_of(__name__)


@dataclass(kw_only=True)
class PolicyGroup:
    """One group column's rates, tests and effects."""

    label: str = field(metadata=about("The group column as shown."))
    rates: Records = field(metadata=tabled(TABLES["rates"]))
    tests: Records = field(metadata=tabled(TABLES["tests"]))
    effects: Records = field(metadata=tabled(TABLES["effects"]))


@dataclass(kw_only=True)
class PolicyEffectResult:
    """What ``policy_effect`` computes for one run; the summary, its schema and the
    renderings come from it."""

    policies: list[str] = field(metadata=about("The policies, `base` first."))
    descriptions: dict[str, str] = field(metadata=about("Policy -> what it changes."))
    baseline: str = field(metadata=about("The policy others are read against."))
    stages: list[str] = field(metadata=about("The reading stages, in order."))
    groups: list[str] = field(metadata=about("Persona columns compared."))
    adjust: str = field(metadata=about("Adjustment across policies."))
    applicants: int = field(metadata=about("Applicants read under the policies.", {"minimum": 0}))
    clusters: int = field(metadata=about("First-stage pools (the test's unit).", {"minimum": 0}))
    coupled: list[str] = field(
        metadata=about(
            "Policies whose chain decides a stage across its pools (a selection rule): their "
            "pools are not independent, the test conservative."
        )
    )
    by_group: dict[str, PolicyGroup] = field(
        default_factory=dict, metadata=about("Persona column -> rates, tests and effects.")
    )
    excluded: Records = field(metadata=tabled(TABLES["excluded"]))


class PolicyEffectKind(PerRunKind, spec=PolicyEffectSpec, result=PolicyEffectResult):
    """End-to-end selection by group under each policy, and each policy's paired effect."""

    title = "Policy experiment: who is selected under each policy"

    def check(self, spec: PolicyEffectSpec, facts: StudyFacts) -> None:
        facts.need_axes(spec.groups, ("groups",))
        config = facts.config
        if not config.policies:
            facts.problem(
                ("kind",),
                "the study declares no `policies:`; compare two runs with `biasim compare`",
            )
            return
        if config.cycles is not None:
            facts.problem(
                ("kind",),
                "in a market each policy's pools are read by its own workforce, so a pool's "
                "readings under two policies are not exchangeable and a pool is no unit; a "
                "policy's effect over cycles is tested over replicate markets "
                "(docs/guides/labor-market.md)",
            )
            return
        if spec.baseline not in policy_names(config):
            facts.problem(
                ("baseline",),
                f"no policy `{spec.baseline}`; policies: {', '.join(policy_names(config))}",
            )
        stages = {s.name: s for s in config.stages if s.policy_of is None}
        previous = None
        for j, name in enumerate(spec.stages):
            stage = stages.get(name)
            if stage is None or stage.reads is None:
                facts.problem(("stages", j), f"no reading stage named `{name}`")
                return
            if stage.reads.counterfactual is not None:
                facts.problem(
                    ("stages", j),
                    f"`{name}` reads under swapped names: it selects nobody end to end (the "
                    "`pipeline` analysis reports its paired name effect)",
                )
            if stage.reads.after != previous:
                facts.problem(
                    ("stages", j),
                    f"`{name}` does not follow `{previous}`: list the whole chain in order, "
                    "from the first reading stage",
                )
            previous = name

    def compute_run(
        self, results: pd.DataFrame, spec: PolicyEffectSpec, ctx: AnalysisContext
    ) -> Section:
        outcomes, excluded = policy_outcomes(results, spec, ctx)
        policies = policy_names(ctx.study)
        groups = _group_columns(spec)
        result = PolicyEffectResult(
            policies=policies,
            descriptions={
                p: (ctx.study.policies or {})[p].description if p != BASE else "as declared"
                for p in policies
            },
            baseline=spec.baseline,
            stages=spec.stages,
            groups=groups,
            adjust=spec.adjust,
            applicants=int(outcomes["candidate"].nunique()),
            clusters=int(outcomes["cluster"].nunique()),
            excluded=excluded,
            coupled=[p for p in policies if _coupled(ctx.study, p, spec.stages)],
        )
        section = Section(summary={})
        for group in groups:
            rates = policy_stats.policy_rates(
                outcomes, group, policies, n_boot=spec.n_boot, seed=ctx.study.seed
            )
            changes = [
                policy_stats.policy_difference(
                    outcomes, group, spec.baseline, other, n_boot=spec.n_boot, seed=ctx.study.seed
                )
                for other in policies
                if other != spec.baseline
            ]
            change = pd.concat(changes, ignore_index=True)
            tests = policy_stats.policy_tests(
                outcomes,
                group,
                spec.baseline,
                policies,
                n_permutations=spec.n_permutations,
                seed=ctx.study.seed,
                adjust=spec.adjust,
            )
            label = _label(group)
            section.figures[slug(ctx.name, "impact_ratio", label)] = figures.plot_policy_ratios(
                rates, group, title=f"End-to-end impact ratio by {label}, per policy", xlabel=label
            )
            result.by_group[group] = PolicyGroup(
                label=label,
                rates=TABLES["rates"].named(label=label).write(section.tables, ctx.name, rates),
                tests=TABLES["tests"].named(label=label).write(section.tables, ctx.name, tests),
                effects=TABLES["effects"]
                .named(label=label)
                .write(section.tables, ctx.name, change),
            )
        section.summary = summary_of(result)
        return section

    def selections(
        self, results: pd.DataFrame, spec: PolicyEffectSpec, ctx: AnalysisContext
    ) -> pd.DataFrame:
        """One row per applicant and policy (column ``policy``), ``selected`` when hired end
        to end under that policy. Applicants not read under every policy are kept with no
        outcome (NA), so an audit counts them instead of leaving them out silently."""
        outcomes, _ = policy_outcomes(results, spec, ctx)
        writing = next(s for s in ctx.study.stages if s.name == spec.stages[0]).reads.stage  # type: ignore[union-attr]
        rows = results[results["stage"] == writing].assign(
            candidate=lambda r: r["agent_id"].astype(str)
        )
        decided = outcomes[["candidate", "policy", "selected"]].astype({"selected": "boolean"})
        own = [c for c in ("policy", "selected") if c in rows.columns]
        every = pd.DataFrame({"policy": policy_names(ctx.study)})
        return (
            rows.drop(columns=own)
            .merge(every, how="cross")
            .merge(decided, on=["candidate", "policy"], how="left")
        )

    def stage_selections(
        self, results: pd.DataFrame, spec: PolicyEffectSpec, ctx: AnalysisContext, stage: str
    ) -> pd.DataFrame:
        """The decisions of ``stage`` under every policy (column ``policy``): its entrants
        under that policy, ``selected`` when advanced there."""
        chain = stage_chain(ctx, stage, spec.stages)
        frames = [
            audited(
                results,
                ctx,
                [policy_stage_name(s, policy) for s in chain],
                spec.groups,
                entrants_only=True,
            ).assign(policy=policy)
            for policy in policy_names(ctx.study)
        ]
        return pd.concat(frames, ignore_index=True)

    def audit_strata(self, spec: PolicyEffectSpec) -> list[str]:
        return ["policy"]

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        return {
            _test_name(row["policy"], row["baseline"], parts["label"]): unit_stats.Tested.of(
                row, "p_adjusted"
            )
            for parts in summary["by_group"].values()
            for row in parts["tests"]
        }

    def power_no_effect(self, spec: PolicyEffectSpec, config: Any) -> set[str]:
        """The tests of a policy that differs from the baseline only in what the synthetic
        responder does not read (a prompt, a system message): on the test double its effect
        is zero by construction, so its share of findings is no power."""
        policies = config.policies or {}
        inert = {BASE} | {n for n, p in policies.items() if not acts_on_double(p, config)}
        if spec.baseline not in inert:
            return set()
        return {
            _test_name(policy, spec.baseline, _label(group))
            for policy in inert - {spec.baseline}
            for group in _group_columns(spec)
        }

    def headline(self, summary: dict[str, Any]) -> str:
        return "(policy_effect): end-to-end selection under each policy"

    def lines(self, summary: dict[str, Any]) -> list[str]:
        out = [
            f"{summary['applicants']} applicants in {summary['clusters']} first-stage pools, "
            "each read under every policy: "
            + "; ".join(f"{p}: {summary['descriptions'][p]}" for p in summary["policies"]),
            "impact ratios are outcome disparities; the paired change is the policy's causal "
            "effect on the same documents",
        ]
        if summary.get("coupled"):
            out.append(_coupled_note(summary["coupled"]))
        tests = [row for parts in summary["by_group"].values() for row in parts["tests"]]
        notes = (few_pools(str(summary["name"]), summary["clusters"]), unreachable(tests, "pools"))
        return [*out, *(note for note in notes if note)]

    def figures(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (
                slug(summary["name"], "impact_ratio", parts["label"]),
                f"End-to-end impact ratio by {parts['label']}, one line per policy; the dashed "
                "line is the four-fifths threshold",
            )
            for parts in summary["by_group"].values()
        ]


def policy_outcomes(
    results: pd.DataFrame, spec: PolicyEffectSpec, ctx: AnalysisContext
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One row per (applicant, policy): its first-stage pool, groups and whether it was
    selected at the last stage; only applicants read in a valid evaluation under every policy
    (the others are counted by reason)."""
    stages = {s.name: s for s in ctx.study.stages}
    writing = stages[spec.stages[0]].reads.stage  # type: ignore[union-attr]
    authors = authors_table(results, writing, spec.groups)
    frames = []
    excluded: list[dict[str, Any]] = []
    for policy in policy_names(ctx.study):
        chain = [policy_stage_name(s, policy) for s in spec.stages]
        picks = {name: stage_picks(stages[name]) for name in chain}
        readings = readings_table(results, picks, authors)
        candidates, _ = candidates_table(readings, chain, authors)
        first = candidates[candidates["stage"] == chain[0]]
        last = candidates[(candidates["stage"] == chain[-1]) & candidates["advanced"]]
        frames.append(
            pd.DataFrame(
                {
                    "candidate": first["candidate"].to_numpy(),
                    "policy": policy,
                    # Pools are drawn alike under every policy: the id without the stage.
                    "cluster": first["cluster"].str.split("/", n=1).str[1].to_numpy(),
                    "selected": first["candidate"].isin(set(last["candidate"])).to_numpy(),
                    **{g: first[g].to_numpy() for g in spec.groups},
                }
            )
        )
    outcomes = pd.concat(frames, ignore_index=True)
    counts = outcomes.groupby("candidate")["policy"].nunique()
    paired = set(counts.index[counts == len(frames)])
    written = int(authors["valid"].sum())
    if written - len(paired):
        excluded.append(
            {
                "reason": "applicants not read in a valid first-stage evaluation under every "
                "policy (document not written, pool left over, evaluation failed)",
                "count": written - len(paired),
            }
        )
    outcomes = outcomes[outcomes["candidate"].isin(paired)].reset_index(drop=True)
    if spec.intersectional and len(spec.groups) > 1:
        outcomes[JOINED.join(spec.groups)] = columns.join_columns(outcomes, spec.groups, "|")
    return outcomes, excluded


def _test_name(policy: str, baseline: str, label: str) -> str:
    """A joint test as ``biasim power`` names it."""
    return f"{policy} vs {baseline}: by {label}"


def acts_on_double(policy: Any, config: Any) -> bool:
    """Whether the synthetic responder answers differently under ``policy``: it reads how
    many to pick, the advance rule, a committee's other readers, a selection rule across pools
    and the author's persona (withheld when redacted, which
    matters where the stage's role declares a truth by persona), never the prompt's text."""
    stages = {s.name: s for s in config.stages}
    for name, change in policy.stages.items():
        changed = (change.select, change.advance, change.readers, change.selection)
        if any(v is not None for v in changed):
            return True
        stage = stages[name]
        truth = config.roles[stage.role].synthetic or {}
        shown = change.author is not None and change.author != stage.reads.author
        if shown and any(t.by or t.weights for t in truth.values()):
            return True
    return False


def _coupled(config: Any, policy: str, stages: list[str]) -> bool:
    """Whether ``policy``'s chain has a stage decided across its pools (a selection rule)."""
    by_name = {s.name: s for s in config.stages}
    return any(by_name[policy_stage_name(s, policy)].selection is not None for s in stages)


def _coupled_note(policies: list[str]) -> str:
    return (
        f"{', '.join(policies)}: a selection rule decides across the pools, so they are not "
        "independent and the pool-swap test is conservative for the comparisons with it (in "
        "the calibration a global top-k flagged 1-2 % of null families at 0.05): a large p is "
        "weak evidence of no effect"
    )


def _group_columns(spec: PolicyEffectSpec) -> list[str]:
    crossed = [JOINED.join(spec.groups)] if spec.intersectional and len(spec.groups) > 1 else []
    return [*spec.groups, *crossed]


def _label(group: str) -> str:
    return group.replace(JOINED, " x ")
