"""``--smoke``, the same flag in every benchmark: each step once, at the smallest size.

``tests/test_bench_smoke.py`` runs every benchmark this way, so a change that breaks
one fails the tests within seconds. The code path is the full run's (same baseline,
same ratio lines); only the sizes shrink, so the figures printed are not measurements
and nothing asserts them.
"""

from __future__ import annotations

import argparse

HELP = (
    "run each step once at the smallest size, in seconds (a check that the benchmark "
    "works, as tests/test_bench_smoke.py does); the figures printed mean nothing"
)


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help=HELP)


def announce(name: str, sizes: str) -> None:
    """The first line of a smoke run: its sizes, and that its figures are no measurement."""
    print(f"{name}: --smoke: {sizes}; a check that the benchmark runs, not a measurement")
