import logging

import pytest

from mirrortool.cli import main, parse_args
from mirrortool.logconfig import level_for


@pytest.mark.parametrize(
    "flags,verbosity,level",
    [
        ([], 0, logging.WARNING),
        (["-v"], 1, logging.INFO),
        (["-vv"], 2, logging.DEBUG),
        (["-v", "-v"], 2, logging.DEBUG),
        (["--verbose", "--verbose"], 2, logging.DEBUG),
        (["-vvvv"], 4, logging.DEBUG),
        (["-q"], -1, logging.ERROR),
        (["-qq"], -2, logging.CRITICAL),
        (["-qqq"], -3, logging.CRITICAL),
        (["-v", "-q"], 0, logging.WARNING),
        (["-vv", "-q"], 1, logging.INFO),
    ],
)
def test_counted_flags(flags, verbosity, level):
    args = parse_args([*flags, "src", "dst"])
    assert args.verbosity == verbosity
    assert args.log_level == level


@pytest.mark.parametrize(
    "verbosity,level",
    [(-9, logging.CRITICAL), (-2, logging.CRITICAL), (-1, logging.ERROR), (0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG), (7, logging.DEBUG)],
)
def test_level_for_net_count(verbosity, level):
    assert level_for(verbosity) == level


def test_main_with_debug_output():
    assert main(["-vv", "--dry-run", "src", "dst"]) == 0
