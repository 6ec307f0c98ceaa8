"""``python -m sweeper`` runs the command line."""

from sweeper.cli import main

main()
