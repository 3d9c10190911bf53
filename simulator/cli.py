"""The ``biasim`` command line. Exit codes: 0 success, 2 bad input, 1 runtime failure."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from .errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Agent-based simulation for auditing social bias in language models.",
)
out_console = Console()
err_console = Console(stderr=True)


def _fail_input(exc: InputError) -> None:
    for problem in exc.problems:
        err_console.print(
            f"[red]error[/red] {str(problem).removeprefix(': ')}", highlight=False, soft_wrap=True
        )
    raise typer.Exit(2)


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.1f} calls/s" if speed else "- calls/s", style="progress.data.speed")


def _progress_factory(progress: Progress) -> Callable[[int, str], Callable[[int], None]]:
    def factory(total: int, label: str) -> Callable[[int], None]:
        task = progress.add_task(label, total=total)
        last = [0.0]

        def tick(done: int) -> None:
            now = time.monotonic()
            # Rich's bookkeeping costs more than a synthetic call: update ten times a second.
            if now - last[0] >= 0.1 or done >= total:
                last[0] = now
                progress.update(task, completed=done)

        return tick

    return factory


@app.command()
def run(
    study: Annotated[str | None, typer.Argument(help="Study file or built-in study name.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default runs/NAME-TIME).")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Backend for every role.")] = None,
    model: Annotated[str | None, typer.Option(help="Model id for every role.")] = None,
    agents: Annotated[int | None, typer.Option(help="Agents per persona value.")] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Calls in flight per backend.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Study seed.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
    replay: Annotated[
        Path | None,
        typer.Option(help="Answer from this earlier run's calls.sqlite first (exact replay)."),
    ] = None,
    max_error_rate: Annotated[
        float,
        typer.Option(help="Stop (exit 1, resumable) when more than this share of units fail."),
    ] = 0.5,
) -> None:
    """Run a study and print its decision-rate report."""
    from .runner import RunOptions, execute, prepare

    options = RunOptions(
        study=study,
        out=out,
        backend=backend,
        model=model,
        agents=agents,
        max_concurrency=max_concurrency,
        seed=seed,
        resume=resume,
        replay=replay,
        max_error_rate=max_error_rate,
    )
    try:
        prepared = prepare(options)
    except InputError as exc:
        _fail_input(exc)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("calls"),
        _RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )
    try:
        with progress:
            outcome = execute(prepared, _progress_factory(progress))
    except KeyboardInterrupt:
        err_console.print(f"interrupted; continue with: biasim run --resume {prepared.out}")
        raise typer.Exit(130) from None
    except InputError as exc:
        _fail_input(exc)
    from .report import print_report

    if outcome.summary.get("units"):
        print_report(outcome.summary, out_console)
    _print_accounting(outcome.summary)
    calls = outcome.summary["calls"]
    out_console.print(
        f"run directory: {outcome.out}  (new calls: {calls['new']}, "
        f"from cache: {calls['from_cache']})"
    )
    if outcome.status != "complete":
        err_console.print(
            f"[red]run {outcome.status}[/red]: {outcome.message}\n"
            f"everything answered is saved; continue with: "
            f"biasim run --resume {outcome.out}"
        )
        raise typer.Exit(1)


def _print_accounting(summary: dict) -> None:
    rows = summary.get("accounting", {}).get("by_role", [])
    for row in rows:
        calls = row["calls"] or 0
        out_console.print(
            f"[bold]{row['role']}[/bold] {row['backend']}:{row['model']}: {calls} calls "
            f"({row['answered'] or 0} answered, {row['invalid'] or 0} invalid, "
            f"{row['error'] or 0} error), tokens {row['prompt_tokens'] or 0} in / "
            f"{row['completion_tokens'] or 0} out, {(row['latency_s'] or 0) / max(calls, 1):.2f} "
            f"s/call, {row['attempts'] or 0} attempts, {row['reasks'] or 0} re-asks",
            highlight=False,
        )


@app.command()
def validate(study: Annotated[str, typer.Argument(help="Study file or built-in name.")]) -> None:
    """Check a study file and render every template once."""
    from .config import load_study
    from .design import design_matrix

    try:
        loaded = load_study(study)
    except InputError as exc:
        _fail_input(exc)
    config = loaded.config
    units = len(design_matrix(config)) * len(config.stages)
    out_console.print(f"{loaded.path}: ok - {len(config.stages)} stage(s), {units} unit(s)")


@app.command()
def schema() -> None:
    """Print the JSON Schema of study files."""
    from .config import study_json_schema

    sys.stdout.write(json.dumps(study_json_schema(), indent=2) + "\n")


@app.command(name="list")
def list_studies() -> None:
    """List the built-in studies."""
    from scenarios import builtin_studies

    table = Table(show_header=True)
    table.add_column("study")
    table.add_column("description")
    for name, description in builtin_studies().items():
        table.add_row(name, description)
    out_console.print(table)


@app.command()
def analyze(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Recompute and print a run's analyses from its results."""
    from .report import analyze as analyze_results
    from .report import print_report
    from .runner import load_run

    try:
        study, results = load_run(run_dir)
    except InputError as exc:
        _fail_input(exc)
    report = analyze_results(results, study.config)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    else:
        print_report(report, out_console)


def main() -> None:
    """Console-script entry point."""
    app()
