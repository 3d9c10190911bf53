"""The ``biasim`` command line. Exit codes: 0 success, 2 bad input, 1 runtime failure.

Each command lives in the module of its group; importing them registers them on :data:`app`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer

# `biasim --help` lists the commands in the order they register: a run's commands first.
from biasim.simulator.cli import study_commands

# isort: split
from biasim.simulator.cli import analyze_commands, demo_commands, estimate_commands, tool_commands
from biasim.simulator.cli.common import app, err_console, fail_input, styled
from biasim.simulator.common.errors import InputError

__all__ = [
    "add_family_commands",
    "analyze_commands",
    "app",
    "demo_commands",
    "estimate_commands",
    "main",
    "study_commands",
    "tool_commands",
]


def add_family_commands() -> None:
    """Add each study family's command (``biasim NAME ...``) to :data:`app`. Every family is
    loaded (its ``register()`` names paths, so this imports only the commands' modules); a
    family or command that fails to load is one line on stderr, and the rest still work. A
    family's command that raises :class:`InputError` prints it as a built-in command does."""
    from biasim.registry import COMMANDS, load_families

    problems = load_families()
    taken = {group.name for group in app.registered_groups} | {
        command.name or command.callback.__name__.replace("_", "-")
        for command in app.registered_commands
        if command.callback is not None
    }
    for name in COMMANDS.names():
        if name in taken:
            problems.append(f"command `{name}` not added: `biasim {name}` is a built-in command")
            continue
        try:
            app.add_typer(_inputs_located(COMMANDS.load(name)), name=name)
        except Exception as exc:  # a broken plug-in is reported, never a traceback
            problems.append(f"command `{name}` not loaded: {type(exc).__name__}: {exc}")
    for problem in problems:
        err_console.print(styled("warning", "yellow", f" {problem}"), highlight=False)


def _inputs_located(family_app: typer.Typer) -> typer.Typer:
    """``family_app`` with each of its commands (its groups' too) wrapped by :func:`_located`."""
    for command in family_app.registered_commands:
        command.callback = _located(command.callback)
    for group in family_app.registered_groups:
        if group.typer_instance is not None:
            _inputs_located(group.typer_instance)
    return family_app


def _located(callback: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``callback`` printing an :class:`InputError` it raises as ``error FILE:LINE: ...`` lines
    and exiting 2, as the built-in commands do, not as a traceback (a family's command reading
    a folder that is no run). Typer reads the parameters through ``functools.wraps``."""
    if callback is None:
        return None

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except InputError as exc:
            fail_input(exc)

    return run


def main() -> None:
    """Console-script entry point."""
    add_family_commands()
    app()
