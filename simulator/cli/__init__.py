"""The ``biasim`` command line. Exit codes: 0 success, 2 bad input, 1 runtime failure.

Each command lives in the module of its group; importing them registers them on :data:`app`.
"""

from __future__ import annotations

# `biasim --help` lists the commands in the order they register: a run's commands first.
from biasim.simulator.cli import study_commands

# isort: split
from biasim.simulator.cli import analyze_commands, demo_commands, estimate_commands, tool_commands
from biasim.simulator.cli.common import app, err_console, styled

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
    family or command that fails to load is one line on stderr, and the rest still work."""
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
            app.add_typer(COMMANDS.load(name), name=name)
        except Exception as exc:  # a broken plug-in is reported, never a traceback
            problems.append(f"command `{name}` not loaded: {type(exc).__name__}: {exc}")
    for problem in problems:
        err_console.print(styled("warning", "yellow", f" {problem}"), highlight=False)


def main() -> None:
    """Console-script entry point."""
    add_family_commands()
    app()
