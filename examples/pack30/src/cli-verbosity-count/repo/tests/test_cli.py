import logging

import pytest

from mirrortool.cli import main, parse_args


def test_default_level():
    args = parse_args(["src", "host:dst"])
    assert args.log_level == logging.WARNING
    assert (args.source, args.dest, args.dry_run) == ("src", "host:dst", False)


def test_verbose_and_quiet():
    assert parse_args(["-v", "src", "dst"]).log_level == logging.INFO
    assert parse_args(["--quiet", "src", "dst"]).log_level == logging.ERROR


def test_dry_run():
    assert parse_args(["--dry-run", "src", "dst"]).dry_run is True


def test_missing_dest_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        parse_args(["src"])
    assert info.value.code == 2


def test_main():
    assert main(["-v", "src", "dst"]) == 0
