"""``python -m simulator`` runs the CLI."""

from .cli import main

main()
