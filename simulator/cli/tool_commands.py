"""Commands around studies: ``power`` (planning), ``compare`` (runs) and ``audit`` (LL144)."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from biasim.simulator.cli.common import (
    app,
    err_console,
    fail_input,
    out_console,
    print_written,
    styled,
)
from biasim.simulator.common.csvlimits import (
    CELL_CHARS_CEILING,
    DEFAULT_MAX_CELL_CHARS,
    DEFAULT_MAX_GROUPS,
    CsvLimits,
)
from biasim.simulator.common.errors import InputError
from biasim.simulator.common.tables import print_table


@app.command()
def power(
    study: Annotated[str, typer.Argument(help="Study file or built-in name.")],
    agents: Annotated[
        str, typer.Option(help="Agents per persona value to try, comma-separated.")
    ] = "2,5,10",
    studies: Annotated[int, typer.Option(help="Simulated studies per arm and size.")] = 20,
    effect: Annotated[
        float, typer.Option(help="Scale of the declared synthetic effect (1 = as declared).")
    ] = 1.0,
    alpha: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    seed: Annotated[
        int, typer.Option(min=0, max=2**63 - 1, help="First seed of the simulated studies.")
    ] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Write power.csv here (a new or empty directory).")
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=0, help="Processes to run simulated studies in (0: one per core, 1: this one)."
        ),
    ] = 0,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run the simulated studies on a local Ray cluster.")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Run the simulated studies on the Ray cluster at this address."),
    ] = None,
    per_call: Annotated[
        bool,
        typer.Option(
            "--per-call",
            help="Send each answer through the call store and retry layer (slower, same answers).",
        ),
    ] = False,
) -> None:
    """Power and false-positive rate of the study's tests on its synthetic truth."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.tools.power import power as simulate

    try:
        sizes = [int(a) for a in agents.split(",") if a.strip()]
    except ValueError:
        sizes = []
    problems = []
    if not sizes or min(sizes) < 1:
        problems.append(
            Problem("--agents", None, "", f"`{agents}`: give positive integers, e.g. 2,5,10")
        )
    if studies < 2:
        problems.append(Problem("--studies", None, "", "at least 2"))
    if not 0 < alpha < 1:
        problems.append(Problem("--alpha", None, "", "between 0 and 1"))
    if effect < 0:
        problems.append(Problem("--effect", None, "", "0 or more"))
    if out is not None:
        from biasim.simulator.common.rundir import check_writable

        reason = check_writable(out, hint="; name a new directory with --out")
        if reason:
            problems.append(Problem("--out", None, "", reason))
    if problems:
        fail_input(InputError(problems))
    err_console.print(
        f"simulating {len(sizes)} size(s) x 2 arms x {studies} studies on the synthetic "
        "backend (a test double with the study's declared truth, not a model)"
    )
    start = time.monotonic()
    try:
        rows = simulate(
            study,
            sizes,
            studies=studies,
            effect=effect,
            alpha=alpha,
            seed=seed,
            workers=workers or os.cpu_count() or 1,
            ray_address=ray_address or ("local" if ray else None),
            per_call=per_call,
            progress=lambda line: err_console.print(
                f"[{time.monotonic() - start:6.0f} s] {line}", highlight=False
            ),
        )
    except InputError as exc:
        fail_input(exc)
    except ValueError as exc:
        fail_input(InputError([Problem(study, None, "", str(exc))]))
    table = Table(
        title=f"Power (effect x{effect:g}) and false-positive rate (no effect) at alpha {alpha:g}, "
        f"{studies} studies each"
    )
    for col in ("analysis", "test", "agents", "power", "false positives"):
        table.add_column(
            col,
            justify="right" if col in ("agents", "power", "false positives") else "left",
            overflow="fold",
        )
    for row in rows:
        table.add_row(
            row.analysis,
            row.test,
            str(row.agents),
            f"{row.power:.0%}",
            f"{row.false_positive_rate:.0%}",
        )
    print_table(out_console, table)
    out_console.print(
        "A false-positive rate far above alpha means the test does not hold its level for this "
        "design; with few studies each share is rough (+/- about "
        f"{100 * 1.96 * (0.25 / studies) ** 0.5:.0f} points at 50%)."
    )
    if out is not None:
        import pandas as pd

        from biasim.simulator.common.csvfiles import write_csv

        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "power.csv", pd.DataFrame([row.__dict__ for row in rows]))
        out_console.print(f"wrote {out / 'power.csv'}")


@app.command()
def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="Run directories of one study, in the order to show.")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Report directory (default runs/compare-TIME).")
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(help="NAME=RUN_DIR: the name a run's model gets (repeatable)."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Compare runs whose studies differ (differences are listed).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Combine runs of the same study on different models into one report: the models side by
    side, cross-model figures, tests of model differences, report.html."""
    from biasim.simulator.report.outputs import print_report
    from biasim.simulator.tools.compare import compare_runs

    target = out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        evidence, _, differences = compare_runs(runs, target, labels=label, force=force)
    except InputError as exc:
        fail_input(exc)
    if as_json:
        sys.stdout.write(json.dumps(evidence.summary, indent=2, default=str) + "\n")
        return
    print_report(evidence.summary, out_console)
    for difference in differences:
        err_console.print(styled("forced", "yellow", f": {difference}"), highlight=False)
    out_console.print(
        f"models in order: {', '.join(evidence.summary['model_labels'])}", highlight=False
    )
    print_written(target, evidence.summary)


@app.command()
def audit(
    source: Annotated[Path, typer.Argument(help="A run directory or a decisions CSV.")],
    audit_format: Annotated[str, typer.Option("--format", help="Audit format: ll144.")] = "ll144",
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the tables (default: RUN_DIR/audit; required for a CSV)."),
    ] = None,
    sex_col: Annotated[str | None, typer.Option(help="Sex category column.")] = None,
    race_col: Annotated[str | None, typer.Option(help="Race/ethnicity category column.")] = None,
    selected_col: Annotated[
        str | None, typer.Option(help="CSV: selected flag (1/0, true/false, yes/no).")
    ] = None,
    outcome_col: Annotated[
        str | None, typer.Option(help="CSV: decision column, with --positive.")
    ] = None,
    positive: Annotated[str | None, typer.Option(help="CSV: the selected decision.")] = None,
    score_col: Annotated[
        str | None, typer.Option(help="CSV: a score (scoring rate = share above the median).")
    ] = None,
    date_col: Annotated[str | None, typer.Option(help="CSV: date of each decision.")] = None,
    by: Annotated[
        str | None, typer.Option(help="Comma-separated columns audited separately (e.g. job).")
    ] = None,
    exclude_small: Annotated[
        bool, typer.Option(help="Leave categories under 2% of the data out of impact ratios.")
    ] = False,
    analysis: Annotated[
        str | None, typer.Option(help="Run: the analysis whose decisions are audited.")
    ] = None,
    max_cell_chars: Annotated[
        int, typer.Option(min=1, max=CELL_CHARS_CEILING, help="CSV: longest cell read.")
    ] = DEFAULT_MAX_CELL_CHARS,
    max_groups: Annotated[
        int, typer.Option(min=1, help="CSV: most distinct categories (sex x race x --by).")
    ] = DEFAULT_MAX_GROUPS,
    stage: Annotated[
        str | None,
        typer.Option(
            help="Run of a pipeline: audit this stage's decisions among its entrants (default: "
            "the last stage, end to end over every applicant)."
        ),
    ] = None,
) -> None:
    """Bias-audit tables (NYC Local Law 144): selection rates and impact ratios per sex,
    race/ethnicity and intersectional category, as CSV, audit.json and HTML."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.common.rundir import MANIFEST, check_writable, holding_lock
    from biasim.simulator.tools.audit import (
        FORMATS,
        AuditOptions,
        attach_to_run,
        ll144_audit,
        write_audit,
    )

    problems = []
    if audit_format not in FORMATS:
        problems.append(
            Problem("--format", None, "", f"`{audit_format}`; known: {', '.join(FORMATS)}")
        )
    if not source.exists():
        problems.append(Problem(str(source), None, "", "no such run directory or file"))
    if source.is_file() and out is None:
        problems.append(Problem("--out", None, "", "required when auditing a CSV"))
    target = out or source / "audit"
    if out is not None or source.is_dir():
        reason = check_writable(target, hint="; name a new directory with --out")
        if reason and not (out is None and target.is_dir()):
            problems.append(Problem("--out", None, "", reason))
    if problems:
        fail_input(InputError(problems))
    options = AuditOptions(
        sex_col=sex_col,
        race_col=race_col,
        selected_col=selected_col,
        outcome_col=outcome_col,
        positive=positive,
        score_col=score_col,
        date_col=date_col,
        by=[c.strip() for c in (by or "").split(",") if c.strip()],
        exclude_small=exclude_small,
        analysis=analysis,
        limits=CsvLimits(max_cell_chars, max_groups),
        stage=stage,
    )
    is_run = (source / MANIFEST).is_file()
    try:
        # A run's audit is read and attached under its lock: a live run or `--resume` would
        # otherwise change the results under it and drop the section when it ends.
        with holding_lock(source, "RUN_DIR") if is_run else nullcontext():
            result = ll144_audit(source, options)
            written = write_audit(result, target)
            if is_run:
                written.append(attach_to_run(source, result))
    except InputError as exc:
        fail_input(exc)
    if not source.is_dir():
        from biasim.simulator.report.page import write_report
        from biasim.simulator.tools.audit import public

        summary = {"study": f"LL144 audit of {source.name}", "audit": public(result)}
        written.append(write_report(target, summary, {"name": summary["study"]}, []))
    partial = result["source"].get("partial")
    if partial:
        err_console.print(styled("warning", "yellow", f": {partial}"))
    _print_audit(result)
    out_console.print(f"wrote {', '.join(str(p) for p in written)}", highlight=False)


def _print_audit(result: dict) -> None:
    from biasim.simulator.report.audit_section import merged_note

    rate = result["metric"]
    for key, frame in result["_frames"].items():
        if key == "counts":
            continue
        table = Table(title=f"LL144 {key.replace('_', '/')} ({rate.replace('_', ' ')})")
        for col in frame.columns:
            table.add_column(str(col), justify="right")
        for row in frame.itertuples(index=False):
            table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
        print_table(out_console, table)
    used = result["columns"]
    out_console.print(
        "columns used: "
        + ", ".join(f"{what} = {col}" for what, col in used.items() if col and what != "by")
        + " (choose others with --selected-col, --sex-col, --race-col)",
        highlight=False,
        soft_wrap=True,
    )
    source = result["source"]
    dates = source.get("date_range")
    out_console.print(
        f"individuals assessed {result['n_assessed']}, without outcome "
        f"{result['n_missing_outcome']}, unknown category {result['unknown']}; data: "
        f"{source['kind']}; dates {dates[0] + ' to ' + dates[1] if dates else 'not given'}",
        highlight=False,
    )
    note = merged_note(result)
    if note:
        out_console.print(note, highlight=False, markup=False)
