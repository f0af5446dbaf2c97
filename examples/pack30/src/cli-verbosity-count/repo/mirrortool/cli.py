"""The ``mirror`` command line."""

from __future__ import annotations

import argparse
import logging
from typing import Optional, Sequence

from mirrortool.logconfig import level_for


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirror", description="Mirror a directory to a remote host.")
    parser.add_argument("-v", "--verbose", action="store_true", help="more output")
    parser.add_argument("-q", "--quiet", action="store_true", help="less output")
    parser.add_argument("--dry-run", action="store_true", help="show what would be copied")
    parser.add_argument("source", help="local directory")
    parser.add_argument("dest", help="host:path")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line; adds ``log_level``."""
    args = build_parser().parse_args(argv)
    args.log_level = level_for(args.verbose, args.quiet)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(message)s")
    log = logging.getLogger("mirror")
    log.info("mirroring %s to %s%s", args.source, args.dest, " (dry run)" if args.dry_run else "")
    log.debug("arguments: %r", vars(args))
    return 0
