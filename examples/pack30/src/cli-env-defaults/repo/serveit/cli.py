"""Command line and environment."""

from __future__ import annotations

import argparse
import os
from typing import Mapping, Optional, Sequence

from serveit.settings import Settings

ENV_PREFIX = "SERVEIT_"
DEFAULTS = Settings()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serveit", description="Serve a directory over HTTP.")
    parser.add_argument("--host", default=DEFAULTS.host)
    parser.add_argument("--port", type=int, default=DEFAULTS.port)
    parser.add_argument("--workers", type=int, default=DEFAULTS.workers)
    parser.add_argument("--debug", action="store_true", default=DEFAULTS.debug)
    parser.add_argument("root", nargs="?", default=DEFAULTS.root)
    return parser


def load_settings(
    argv: Optional[Sequence[str]] = None, environ: Optional[Mapping[str, str]] = None
) -> Settings:
    """Settings from the command line and the ``SERVEIT_*`` environment variables."""
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    for field in ("host", "port", "workers", "debug"):
        name = ENV_PREFIX + field.upper()
        if name in environ:
            setattr(args, field, environ[name])
    return Settings(
        host=args.host, port=args.port, workers=args.workers, debug=args.debug, root=args.root
    )
