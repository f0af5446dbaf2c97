"""``python -m runner.cli``: the same entry point as ``deltarun``."""

from runner.cli import main

main()
