"""A labour market over 20 cycles with 10,000 applicants a cycle on the synthetic responder
(issue 46): each cycle applicants write, managers drawn from a 2,000-strong workforce each pick
1 of 10, a tenth of the workforce leaves and up to 200 hires join. Time end to end and peak
memory, measured in a fresh process so the peak is this run's alone (the pipeline benchmark's
child process)."""

from __future__ import annotations

from typing import Any

from .pipeline import one_run

STUDY = """\
name: bench_market
description: market benchmark
seed: 1
cycles: CYCLES
market:
  applicants: {population: applicants, per_cycle: PER_CYCLE}
  workforce: 2000
  openings: 200
  readers: [managers]
  by: gender
  attrition: {rate: 0.1}
roles:
  applicant: {backend: synthetic, max_concurrency: 256}
  manager:
    backend: synthetic
    max_concurrency: 256
    synthetic: {selected: {by: gender, in_group: 2.0}}
personas:
  axes: {gender: [female, male]}
populations:
  applicants: {agent: applicant, personas: study}
  managers: {agent: hiring_manager, count: 1000}
stages:
  - name: apply
    population: applicants
    role: applicant
    prompt: "Write a cover letter as a {{ gender }} applicant."
  - name: offer
    population: managers
    role: manager
    reads: {stage: apply, matching: pool, size: 10, draw: random}
    select: 1
    prompt: "Pick one:{% for d in documents %} {{ d.label }}: {{ d.text }}{% endfor %}"
design:
  agents_per_value: 15000
"""
#: "In minutes on this machine" (issue 46): five at most, on the slower of the shared machines.
TARGET_S = 300.0
TARGET_PEAK_MB = 2048.0


def run(cycles: int = 20, per_cycle: int = 10_000) -> dict[str, Any]:
    """One market run of ``cycles`` x ``per_cycle`` applicants: its time, calls and peak RSS."""
    study = STUDY.replace("CYCLES", str(cycles)).replace("PER_CYCLE", str(per_cycle))
    measured = one_run(study)
    calls = sum(measured["units"].values())
    return {
        **measured,
        "cycles": cycles,
        "applicants_per_cycle": per_cycle,
        "calls": calls,
        "calls_per_s": calls / measured["total_s"],
        "target_s": TARGET_S,
        "target_peak_mb": TARGET_PEAK_MB,
        "meets_target": measured["total_s"] <= TARGET_S
        and measured["peak_rss_mb"] <= TARGET_PEAK_MB,
    }


def rows(m: dict[str, Any]) -> list[tuple[str, ...]]:
    """The table's rows: time and memory against their targets, and calls per second."""
    return [
        (
            f"market ({m['cycles']} cycles x {m['applicants_per_cycle']:,} applicants)",
            f"seconds end to end ({m['calls']:,} calls, {m['calls_per_s']:,.0f}/s)",
            f"{m['total_s']:.1f}",
            f"<= {m['target_s']:.0f}",
            "yes" if m["total_s"] <= m["target_s"] else "NO",
        ),
        (
            "",
            "peak RSS MB (its own process)",
            f"{m['peak_rss_mb']:,.0f}",
            f"<= {m['target_peak_mb']:,.0f}",
            "yes" if m["peak_rss_mb"] <= m["target_peak_mb"] else "NO",
        ),
    ]
