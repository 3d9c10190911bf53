"""``biasim estimate``: a study's calls, tokens, cost and time before any request."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from biasim.simulator.cli.common import (
    BIOGRAPHIES_OPTION,
    MASKED_LM_OPTION,
    POSTINGS_OPTION,
    PRICES_OPTION,
    app,
    fail_input,
    out_console,
)
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.tables import print_table


@app.command()
def estimate(
    study: Annotated[str, typer.Argument(help="Study file or built-in study name.")],
    backend: Annotated[str | None, typer.Option(help="Backend for every role (or --role).")] = None,
    model: Annotated[str | None, typer.Option(help="Model id for every role (or --role).")] = None,
    role: Annotated[
        list[str] | None,
        typer.Option(help="Apply --backend and --model to this role only (repeatable)."),
    ] = None,
    agents: Annotated[int | None, typer.Option(help="Agents per persona value.")] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Calls in flight per backend.")
    ] = None,
    prices: Annotated[Path | None, PRICES_OPTION] = None,
    store: Annotated[
        Path | None,
        typer.Option(help="A run directory whose stored answers are not asked again (resume)."),
    ] = None,
    pilot: Annotated[
        int,
        typer.Option(
            min=0,
            help="Send this many real calls per stage and model to measure tokens and time "
            "(they are paid; nothing is stored).",
        ),
    ] = 0,
    allow_endpoint: Annotated[
        list[str] | None,
        typer.Option(help="HOST a --pilot may send requests and keys to (as `biasim run`)."),
    ] = None,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            help="Every role (or the --role ones) through its provider's batch API, as "
            "`biasim run --batch`.",
        ),
    ] = False,
    masked_lm: Annotated[str | None, MASKED_LM_OPTION] = None,
    postings: Annotated[Path | None, POSTINGS_OPTION] = None,
    biographies: Annotated[Path | None, BIOGRAPHIES_OPTION] = None,
) -> None:
    """Estimate a study's calls, tokens, cost (live and batch) and time; sends no request
    unless --pilot asks for some."""
    from biasim.simulator.engine.runner import RunOptions
    from biasim.simulator.study.load import load_study
    from biasim.simulator.study.options import command_line_overrides
    from biasim.simulator.tools.estimate import estimate as estimate_study

    options = RunOptions(
        study=study,
        backend=backend,
        model=model,
        agents=agents,
        max_concurrency=max_concurrency,
        prices=prices,
        batch=batch,
        # As `biasim run` takes them: the postings and biographies set the number of calls,
        # and a study whose analysis needs a masked LM is refused without one.
        masked_lm=masked_lm,
        postings=postings,
        biographies=biographies,
    )
    try:
        overrides = _for_roles(command_line_overrides(options), role or [], study)
        loaded = load_study(study, overrides)
        if store is not None and not (store / "calls.sqlite").is_file():
            raise InputError([Problem("--store", None, "", f"{store} has no calls.sqlite")])
        figures = estimate_study(loaded, store)
        if pilot:
            _pilot(loaded, figures, pilot, allow_endpoint or [])
    except InputError as exc:
        fail_input(exc)
    print_estimate(figures)


def _pilot(loaded: Any, figures: Any, n: int, allowed: list[str]) -> None:
    """Measure with ``n`` real calls per line, within the allow-list; note what they cost."""
    from biasim.simulator.llm.allowlist import endpoint_problems, user_allowed_hosts
    from biasim.simulator.tools.pilot import run_pilot

    allowed = [*allowed, *user_allowed_hosts()]
    problems = endpoint_problems(loaded.config, loaded.source_map, allowed)
    if problems:
        raise InputError(problems)
    results = run_pilot(loaded, figures, n, allowed)
    calls = sum(r.calls for r in results.values())
    failed = sum(r.failed for r in results.values())
    costs = [r.cost for r in results.values()]
    spent = None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)
    figures.notes.insert(
        0,
        f"pilot: {calls} real calls ({failed} failed), cost {_usd(spent)}; prompt and output "
        "tokens and seconds per call of the piloted lines are their means",
    )


def _for_roles(overrides: list[Any], roles: list[str], study: str) -> list[Any]:
    """``--backend``, ``--model`` and ``--batch`` narrowed from every role to the ``--role`` ones.

    Raises:
        InputError: A ``--role`` the study does not have.
    """
    if not roles:
        return overrides
    from biasim.simulator.study.load import load_study

    known = load_study(study, check_backends=False).config.roles
    unknown = [r for r in roles if r not in known]
    if unknown:
        raise InputError(
            [
                Problem("--role", None, "", f"no role `{r}`; roles: {', '.join(known)}")
                for r in unknown
            ]
        )
    out = []
    for override in overrides:
        if override.option in {"--backend", "--model", "--batch"}:
            out += [
                dataclasses.replace(override, path=("roles", r, *override.path[2:])) for r in roles
            ]
        else:
            out.append(override)
    return out


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    # Cents hide a pilot's or a small study's cost: four decimals below a dollar.
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def totals(figures: Any) -> str:
    """The estimate in one line: calls, tokens, cost live and batch, time."""
    prompt, output = figures.tokens()
    bound = "up to " if figures.upper_bound else ""
    measured = all(line.piloted for line in figures.lines if line.new_calls)
    batched = sorted({line.role for line in figures.lines if line.batched and line.new_calls})
    configured = (
        f"; as configured (batch: {', '.join(batched)}) {bound}{_usd(figures.configured_cost())}"
        if batched
        else ""
    )
    return (
        f"{bound}{figures.calls:,} new calls, {prompt:,.0f} prompt tokens, "
        f"{'about' if measured else 'up to'} {output:,.0f} output tokens; "
        f"cost {bound}{_usd(figures.cost())} live, "
        f"{_usd(figures.cost(batch=True))} through a batch API{configured}; time about "
        f"{_duration(figures.seconds)}"
    )


def print_estimate(figures: Any, console: Any = out_console) -> None:
    """The estimate's table, totals and notes."""
    table = Table(title=f"estimate for {figures.study} (no request sent)", show_header=True)
    for column in (
        "stage",
        "role",
        "model",
        "calls",
        "stored",
        "prompt tok/call",
        "output tok/call",
        "cost",
        "batch cost",
        "time",
    ):
        table.add_column(column)
    for line in figures.lines:
        table.add_row(
            line.stage,
            line.role,
            f"{line.backend}:{line.model}" + (f" [{line.label}]" if line.label else ""),
            ("<= " if line.upper_bound else "") + f"{line.calls:,}",
            f"{line.cached:,}",
            f"{line.prompt_tokens:,.0f}",
            f"{'~' if line.piloted else '<='} {line.output_tokens:,.0f}",
            _usd(line.cost()),
            _usd(line.cost(batch=True))
            if line.price and line.price.batch_input is not None
            else "no batch API",
            _duration(line.seconds),
        )
    print_table(console, table)
    console.print(
        f"total: {totals(figures)} ({figures.cached:,} answered in the store)",
        highlight=False,
        soft_wrap=True,
    )
    for note in figures.notes:
        console.print(f"  {note}", highlight=False, soft_wrap=True, markup=False)
