"""``python -m biasim.simulator`` runs the CLI (``python -m biasim`` too)."""

from biasim.simulator.cli import main

main()
