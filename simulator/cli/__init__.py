"""The ``biasim`` command line. Exit codes: 0 success, 2 bad input, 1 runtime failure.

Each command lives in the module of its group; importing them registers them on :data:`app`.
"""

from __future__ import annotations

# `biasim --help` lists the commands in the order they register: a run's commands first.
from biasim.simulator.cli import study_commands

# isort: split
from biasim.simulator.cli import analyze_commands, estimate_commands, tool_commands
from biasim.simulator.cli.common import app

__all__ = [
    "analyze_commands",
    "app",
    "estimate_commands",
    "main",
    "study_commands",
    "tool_commands",
]


def main() -> None:
    """Console-script entry point."""
    app()
