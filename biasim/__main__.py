"""``python -m biasim`` runs the CLI."""

from biasim.simulator.cli import main

main()
