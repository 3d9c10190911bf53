"""What every command shares: the application object, its consoles, common options and messages."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from biasim.simulator.common.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Agent-based simulation for auditing social bias in language models.",
)
# Markup and emoji codes off: study text, file names and error messages are printed as
# written (a key like "[/foo]" would otherwise crash the printer, ":x:" become an emoji).
# Styled words are Text spans, never markup around user text.
out_console = Console(markup=False, emoji=False)
err_console = Console(stderr=True, markup=False, emoji=False)


def styled(label: str, style: str, rest: str) -> Text:
    """``label`` in ``style`` followed by ``rest`` printed literally."""
    return Text.assemble((label, style), rest)


MASKED_LM_OPTION = typer.Option(
    "--masked-lm",
    help="PRISM: the masked LM (local folder or hub id) of every `prism` analysis.",
)
POSTINGS_OPTION = typer.Option(
    help="PRISM: CSV of job postings (columns posting, posting_text) replacing the study's.",
)
COST_LIMIT_OPTION = typer.Option(
    min=0.0,
    help="US dollars: stop sending calls once the run's cost (every session of it) with the "
    "calls in flight could pass this; exit 4, resumable with a higher limit.",
)
PRICES_OPTION = typer.Option(
    help="YAML file of model prices (USD per million tokens: input, output, batch_input, "
    "batch_output) over the shipped table.",
)
BIOGRAPHIES_OPTION = typer.Option(
    help="Letters from biographies: CSV of seed biographies (first_name, last_name, gender f/m, "
    "info, occupation) replacing the study's; with seed_first_name and seed_last_name too (the "
    "authors' preprocessed_bios) it is already augmented and paired as given.",
)


def fail_input(exc: InputError) -> NoReturn:
    for problem in exc.problems:
        err_console.print(
            styled("error", "red", f" {str(problem).removeprefix(': ')}"),
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(2)


def say_failed_analyses(summary: dict, then: str) -> bool:
    """Say on standard error which analyses failed (``then``: what to do about it), as
    ``run``, ``analyze run`` and ``compare`` do; whether any failed (they exit 1)."""
    from biasim.simulator.report.outputs import analysis_failure

    failure = analysis_failure(summary)
    if failure:
        err_console.print(styled("analysis failed", "red", f": {failure}\n") + then)
    return bool(failure)


def comma_list(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def print_written(directory: Path, summary: dict) -> None:
    """Where the tables, figures, report and summary were written, one path a line."""
    from biasim.simulator.common.rundir import SUMMARY
    from biasim.simulator.report.outputs import FIGURES_DIR, TABLES_DIR
    from biasim.simulator.report.page import REPORT_HTML

    outputs = summary.get("outputs", [])
    tables = sum(str(p).endswith(".csv") for p in outputs)
    figures = sum(str(p).endswith(".png") for p in outputs)
    lines = []
    if tables:
        lines.append(f"tables:  {directory / TABLES_DIR}  ({tables} CSV)")
    if figures:
        lines.append(f"figures: {directory / FIGURES_DIR}  ({figures} PNG)")
    if summary.get("report_error"):
        lines.append(f"report.html not written: {summary['report_error']}")
    elif (directory / REPORT_HTML).is_file():
        lines.append(f"report:  {directory / REPORT_HTML}")
    if (directory / SUMMARY).is_file():
        lines.append(f"summary: {directory / SUMMARY}")
    for line in lines:
        # Never hard-wrapped: paths stay copyable (and a `[` in one is not markup).
        out_console.print(line, soft_wrap=True, highlight=False, markup=False)
