"""``python -m benchmarks``: run every benchmark, print a table, write bench-results/bench.json."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import (
    disparity,
    embedded,
    engine,
    letter_scorers,
    market,
    orchestration,
    pipeline,
    prism,
    speed,
    transport,
)

BENCHMARKS = (
    "engine",
    "pipeline",
    "market",
    "embedded",
    "orchestration",
    "transport",
    "disparity",
    "prism",
    "letters",
    "speed",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--only",
        choices=BENCHMARKS,
        action="append",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "bench.json")
    args = parser.parse_args()
    chosen = args.only or list(BENCHMARKS)
    # Every figure depends on what else the machine was doing: record the load beside it.
    results: dict = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "load_average_start": os.getloadavg(),
        }
    }
    if "engine" in chosen:
        results["engine"] = engine.run()
    if "pipeline" in chosen:
        results["pipeline"] = pipeline.run()
    if "market" in chosen:
        results["market"] = market.run()
    if "embedded" in chosen:
        results["embedded"] = embedded.run()
    if "orchestration" in chosen:
        results["orchestration"] = orchestration.run()
    if "transport" in chosen:
        results["transport"] = transport.run()
    if "disparity" in chosen:
        results["disparity"] = disparity.run()
    if "prism" in chosen:
        results["prism"] = prism.run()
    if "letters" in chosen:
        results["letters"] = letter_scorers.run()
    if "speed" in chosen:
        results["speed"] = speed.run()

    results["machine"]["load_average_end"] = os.getloadavg()
    machine = results["machine"]
    table = Table(
        title="biasim benchmarks",
        caption=f"{machine['cores']} cores; load average (1, 5, 15 min) at the start "
        f"{_load(machine['load_average_start'])}, at the end {_load(machine['load_average_end'])}",
    )
    for col in ("benchmark", "measure", "value", "target", "ok"):
        table.add_column(col, justify="left" if col in ("benchmark", "measure") else "right")
    if "engine" in results:
        _engine_rows(table, results["engine"])
    for row in speed.rows(results["speed"]) if "speed" in results else []:
        table.add_row(*row)
    if "pipeline" in results:
        _pipeline_rows(table, results["pipeline"])
    for row in market.rows(results["market"]) if "market" in results else []:
        table.add_row(*row)
    if "embedded" in results:
        _embedded_rows(table, results["embedded"])
    if "orchestration" in results:
        _orchestration_rows(table, results["orchestration"])
    if "transport" in results:
        _transport_rows(table, results["transport"])
    if "disparity" in results:
        _disparity_rows(table, results["disparity"])
    if "prism" in results:
        _prism_rows(table, results["prism"])
    if "letters" in results:
        _letter_rows(table, results["letters"])
    console = Console()
    if not console.is_terminal:
        # A log or a file has no width to fit: 80 columns would fold every row in four.
        console = Console(width=150)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


def _engine_rows(table: Table, e: dict) -> None:
    """The rows of the engine benchmark: actions/s against its target, memory and machine speed."""
    table.add_row(
        "engine (synthetic, store on)",
        f"stage actions/s ({e['units']} units)",
        f"{e['stage_actions_per_s']:,.0f}",
        f">= {e['target_actions_per_s']:,.0f}",
        "yes" if e["meets_target"] else "NO",
    )
    table.add_row(
        "",
        "whole run actions/s (incl. agents, parquet+csv)",
        f"{e['run_actions_per_s']:,.0f}",
        "",
        "",
    )
    table.add_row("", "peak RSS MB", f"{e['peak_rss_mb']:,.0f}", "", "")
    table.add_row(
        "",
        "single-core speed: reference ops/s (same run; see benchmarks/engine.py)",
        f"{e['reference_ops_per_s']:,.0f}",
        "",
        "",
    )
    table.add_row(
        "",
        "stage actions per million reference ops (compares machines)",
        f"{e['stage_actions_per_million_reference_ops']:,.0f}",
        "",
        "",
    )
    table.add_row("", "share of a core the run got (CPU / wall)", f"{e['core_share']:.0%}", "", "")


def _pipeline_rows(table: Table, p: dict) -> None:
    """The rows of the pipeline benchmark: end-to-end actions/s and peak memory against targets."""
    table.add_row(
        f"pipeline ({p['applicants']:,} applicants, 8 -> 3 -> 1)",
        f"actions/s end to end ({p['actions']:,} actions), fastest of "
        f"{len(p['runs_total_s'])} runs ({', '.join(f'{t:.1f}' for t in p['runs_total_s'])} s)",
        f"{p['run_actions_per_s']:,.0f}",
        f">= {p['target_actions_per_s']:,.0f}",
        "yes" if p["run_actions_per_s"] >= p["target_actions_per_s"] else "NO",
    )
    table.add_row("", "actions/s in the stages", f"{p['stage_actions_per_s']:,.0f}", "", "")
    stages_s = sum(p["stages_s"].values())
    table.add_row(
        "",
        "seconds: stages / building agents / after the stages",
        f"{stages_s:.1f} / {p['agents_s']:.1f} / {p['after_stages_s']:.1f}",
        "",
        "",
    )
    table.add_row(
        "",
        "peak RSS MB (its own process)",
        f"{p['peak_rss_mb']:,.0f}",
        f"<= {p['target_peak_mb']:,.0f}",
        "yes" if p["peak_rss_mb"] <= p["target_peak_mb"] else "NO",
    )


def _embedded_rows(table: Table, b: dict) -> None:
    """The rows of the embedded-model benchmark: tokens/s and the engine's overhead."""
    table.add_row("embedded SmolLM2-135M", "tokens/s", f"{b['tokens_per_s']:.1f}", "", "")
    table.add_row("", "decisions/min", f"{b['decisions_per_min']:.1f}", "", "")
    table.add_row(
        "",
        f"engine overhead vs direct llama-cpp ({b['decisions']} calls)",
        f"{b['overhead']:+.1%}",
        f"<= {b['target_overhead']:.0%}",
        "yes" if b["meets_target"] else "NO",
    )


def _orchestration_rows(table: Table, o: dict) -> None:
    """The rows of the loopback-server benchmark: calls/s per concurrency level."""
    placement = "client, server on own cores" if o["pinned"] else "not pinned"
    for level in o["levels"]:
        ok = ""
        if level["concurrency"] == 64:
            ok = "yes" if o["meets_target"] else "NO"
        table.add_row(
            f"loopback OpenAI, 100 ms ({placement})" if level["concurrency"] == 1 else "",
            f"calls/s at concurrency {level['concurrency']}",
            f"{level['calls_per_s']:,.1f} ({level['fraction_of_ideal']:.1%} of "
            f"{level['ideal_calls_per_s']:,.0f})",
            f">= {o['target_fraction_at_64']:.0%}" if level["concurrency"] == 64 else "",
            ok,
        )
    table.add_row(
        "", "sequential SDK baseline calls/s", f"{o['sequential_calls_per_s']:.1f}", "", ""
    )
    table.add_row(
        "",
        "reference: openai SDK alone, 64 tasks, no engine",
        f"{o['raw_sdk_calls_per_s_at_64']:,.1f}",
        "",
        "",
    )
    table.add_row("", "engine / SDK alone at 64", f"{o['engine_vs_raw_sdk_at_64']:.0%}", "", "")
    table.add_row(
        "",
        "speed-up at 64 over sequential",
        f"{o['speedup_at_64_over_sequential']:.0f}x",
        "",
        "",
    )


def _disparity_rows(table: Table, d: dict) -> None:
    """The rows of the disparity benchmark: time of every step and memory."""
    table.add_row(
        f"disparity ({d['rows']:,} emails, {d['roles']} roles)",
        f"all steps, s (rates, name MC B={d['n_permutations']:,}, exact, Fisher, CMH)",
        f"{d['total_s']:.2f}",
        f"<= {d['target_s']:.0f}",
        "yes" if d["meets_target"] else "NO",
    )
    table.add_row(
        "", "  of which name-unit Monte Carlo, s", f"{d['permutation_name_mc_s']:.2f}", "", ""
    )
    table.add_row(
        "",
        f"name MC with adaptive extension ({d['adaptive_strata_extended']} of {d['roles']} "
        "roles near a Holm threshold get 4x family/alpha draws), s",
        f"{d['adaptive_name_mc_s']:.2f}",
        "",
        "",
    )
    table.add_row(
        "",
        "peak traced memory of the analyses, MB (tracemalloc)",
        f"{d['peak_traced_mb']:,.0f}",
        f"<= {d['target_peak_mb']:,.0f}",
        "",
    )
    table.add_row(
        "",
        "naive permutation loop, 1 role x 41 (extrapolated), s",
        f"{d['naive_loop_41_roles_extrapolated_s']:,.0f}",
        "",
        "",
    )
    table.add_row(
        "",
        "speed-up of name-unit MC over that loop",
        f"{d['speedup_name_mc_vs_naive']:.0f}x",
        "",
        "",
    )


def _prism_rows(table: Table, r: dict) -> None:
    """The rows of the PRISM benchmark: shared batches against one forward per token."""
    table.add_row(
        f"PRISM ({r['masked_copies']} masked copies, BERT-mini size, {r['word_lists']} lists)",
        "speed-up of shared batches over one forward per token",
        f"{r['speedup']:.1f}x ({r['batched_s']:.1f} s vs {r['one_pass_per_token_s']:.1f} s)",
        f">= {r['target_speedup']:.0f}x",
        "yes" if r["speedup"] >= r["target_speedup"] else "NO",
    )
    table.add_row("", "largest score difference", f"{r['max_score_difference']:.1e}", "0", "")
    table.add_row(
        "",
        "rerun from the score cache, s (texts re-scored)",
        f"{r['rerun_from_cache_s']:.3f} ({r['rerun_rescored_texts']})",
        "",
        "",
    )


def _letter_rows(table: Table, r: dict) -> None:
    """The rows of the letter-scorer benchmark: sentences/s and the batching speed-up."""
    rates = r["per_second"]
    table.add_row(
        f"letter-style scorers ({r['sentences']} sentences)",
        "sentences/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()),
        "",
        "",
        "",
    )
    table.add_row(
        "",
        "classifier batched over one at a time (BERT-mini size)",
        f"{r['speedup']:.1f}x (max diff {r['max_difference']:.0e})",
        f">= {r['target_speedup']:.0f}x",
        "yes" if r["speedup"] >= r["target_speedup"] else "NO",
    )
    table.add_row(
        "",
        "rerun from the score cache, s (sentences re-scored)",
        f"{r['rerun_from_cache_s']:.3f} ({r['rerun_rescored']})",
        "",
        "",
    )


def _transport_rows(table: Table, t: dict) -> None:
    """Calls/s, share of plain aiohttp and client CPU per call, per contender and level."""
    pinned = "client, server on own cores" if t["pinned"] else "not pinned"
    for level in t["levels"]:
        concurrency = level["concurrency"]
        for name in ("biasim lean", "biasim SDK", "plain aiohttp"):
            m = level[name]
            lean = name == "biasim lean"
            table.add_row(
                f"transport, loopback 100 ms ({pinned}; best of {t['rounds']})"
                if concurrency == t["levels"][0]["concurrency"] and lean
                else "",
                f"{name}, concurrency {concurrency}: calls/s (x plain); client CPU/call",
                f"{m['calls_per_s']:,.0f} ({m['vs_plain']:.2f}x); {m['cpu_ms_per_call']:.2f} ms",
                f">= {level['target_vs_plain']:.2f}x" if lean else "",
                ("yes" if level["meets_target"] else "NO") if lean else "",
            )


def _load(average: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.1f}" for x in average)


if __name__ == "__main__":
    main()
