"""``biasim compare --designs``: two runs of one hiring process under two **designs** (another
pool size, other reading stages, other readers), compared unpaired.

A policy experiment reads the same applicants in the same pools under every policy, so its
comparison is paired; a change of design draws other pools (or reads with other stages), so
no applicant is read under both, and the two runs are independent samples. Per group: each
design's end-to-end selection rate (selected at the last reading stage among those who entered
the first) side by side, and an unpaired test of the change whose unit is the first-stage pool
(:func:`analysis.stats.designs.design_rate_tests`). The runs' models may be the same: what
differs is the process, so they are called designs, not models.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from biasim.simulator.common.csvfiles import write_csv
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.html import format_p
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.rundir import check_writable, write_summary
from biasim.simulator.kinds.pipeline import (
    authors_table,
    candidates_table,
    readings_table,
    stage_picks,
)
from biasim.simulator.study.stage_graph import stage_order
from biasim.simulator.tools.compare import load_runs, parse_labels, study_differences

designs_stats = lazy_module("biasim.analysis.stats.designs")

#: The table ``--designs`` writes into the comparison directory.
DESIGNS_CSV = "designs.csv"


@dataclass
class DesignComparison:
    """The two designs' labels, where their studies differ, and the per-group tests."""

    designs: tuple[str, str]
    differences: list[str]
    table: pd.DataFrame


def reading_chain(config: Any) -> list[str] | str:
    """The study's reading stages in pipeline order, each reading what the one before it
    advanced (``after``); or why the study has no such chain."""
    if not config.populations:
        return "a design comparison needs pipeline studies (`populations:`)"
    if config.cycles is not None:
        return "a market's designs differ over cycles; compare its policies in one study instead"
    stages = {s.name: s for s in config.stages if s.policy_of is None}
    chain = [n for n in stage_order(config) if n in stages and stages[n].reads is not None]
    if not chain:
        return "the study has no reading stage: nobody is selected"
    for before, name in zip([None, *chain], chain, strict=False):
        if stages[name].reads.after != before:
            return f"reading stage `{name}` does not read what `{before}` advanced"
    return chain


def design_outcomes(
    results: pd.DataFrame, config: Any, chain: list[str], groups: list[str]
) -> pd.DataFrame:
    """One row per applicant read in a valid first-stage evaluation: its first-stage pool
    (``cluster``), groups and whether the last stage selected it."""
    stages = {s.name: s for s in config.stages}
    authors = authors_table(results, stages[chain[0]].reads.stage, groups)
    readings = readings_table(results, {n: stage_picks(stages[n]) for n in chain}, authors)
    candidates, _ = candidates_table(readings, chain, authors)
    first = candidates[candidates["stage"] == chain[0]]
    last = candidates[(candidates["stage"] == chain[-1]) & candidates["advanced"]]
    return pd.DataFrame(
        {
            "cluster": first["cluster"].astype(str).to_numpy(),
            "selected": first["candidate"].isin(set(last["candidate"])).to_numpy(),
            **{g: first[g].to_numpy() for g in groups},
        }
    )


def compare_designs(
    paths: list[Path], out: Path, *, labels: list[str] | None = None, accept_edits: bool = False
) -> DesignComparison:
    """Compare two runs as two designs and write ``designs.csv`` and ``summary.json``.

    Raises:
        InputError: Not two finished pipeline runs with a chain of reading stages.
    """
    if len(paths) != 2:
        raise InputError([Problem("RUN_DIR", None, "", "--designs compares exactly two runs")])
    reason = check_writable(out, hint="; name a new directory with --out")
    if reason:
        raise InputError([Problem("--out", None, "", reason)])
    names = parse_labels(labels or [])
    runs = load_runs(paths, dict(names), accept_edits)
    designs = tuple(names.get(r.path.resolve()) or r.path.name for r in runs)
    if designs[0] == designs[1]:
        designs = (f"{designs[0]}:1", f"{designs[1]}:2")
    problems, frames = [], []
    axes = [
        a for a in runs[0].study.config.personas.axes if a in runs[1].study.config.personas.axes
    ]
    for run, design in zip(runs, designs, strict=True):
        chain = reading_chain(run.study.config)
        if isinstance(chain, str):
            problems.append(Problem(str(run.path), None, "", chain))
            continue
        found = design_outcomes(run.results, run.study.config, chain, axes)
        frames.append(found.assign(design=design, cluster=design + "/" + found["cluster"]))
    if not axes:
        problems.append(Problem("RUN_DIR", None, "", "the two studies share no persona axis"))
    if problems:
        raise InputError(problems)
    outcomes = pd.concat(frames, ignore_index=True)
    table = pd.concat(
        [designs_stats.design_rate_tests(outcomes, axis, designs) for axis in axes],
        ignore_index=True,
    )
    first, other = (r.manifest["study"] for r in runs)
    comparison = DesignComparison(designs, study_differences(first, other), table)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / DESIGNS_CSV, table)
    write_summary(out, _summary(comparison, runs))
    return comparison


def _summary(comparison: DesignComparison, runs: list[Any]) -> dict[str, Any]:
    rows = comparison.table.astype(object).where(comparison.table.notna(), None)
    return {
        "compared": "designs",
        "designs": list(comparison.designs),
        "runs": [str(r.path.resolve()) for r in runs],
        "study_differences": comparison.differences,
        "unit": "first-stage pool",
        "test": "unpaired t of each group's change in end-to-end rate, cluster-robust "
        "variance over first-stage pools in each design, Holm across the group's values",
        "by_group": rows.to_dict("records"),
        "written": dt.datetime.now(dt.UTC).isoformat(),
    }


def design_lines(comparison: DesignComparison) -> list[str]:
    """The console's account: the designs, what differs, per group the two rates and the
    test (lines under 80 characters)."""
    a, b = comparison.designs
    lines = [f"two designs (not models), unpaired: {a} vs {b}"]
    lines += [f"  differs: {d}"[:78] for d in comparison.differences[:8]]
    for group, part in comparison.table.groupby("group", sort=False):
        lines.append(f"  end-to-end selection rate by {group} ({a} -> {b}):")
        for row in part.itertuples():
            test = (
                f"p {format_p(row.p_adjusted)} (Holm)"
                if pd.notna(row.p_value)
                else f"no test (< {designs_stats.MIN_POOLS} pools)"
            )
            lines.append(
                f"    {row.value!s:<12} {row.rate_a:.3f} ({row.entered_a}) -> "
                f"{row.rate_b:.3f} ({row.entered_b})  {row.change:+.3f}  {test}"
            )
    lines.append("  unit: the first-stage pool of each design (pools differ, so no pairing)")
    return lines
