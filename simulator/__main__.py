"""``python -m biasim.simulator`` runs the CLI (``python -m biasim`` too)."""

from .cli import main

main()
