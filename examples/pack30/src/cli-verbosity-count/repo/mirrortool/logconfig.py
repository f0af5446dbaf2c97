"""Log levels for the command line."""

from __future__ import annotations

import logging


def level_for(verbose: bool, quiet: bool) -> int:
    """The logging level for the ``-v`` / ``-q`` switches."""
    if quiet:
        return logging.ERROR
    if verbose:
        return logging.INFO
    return logging.WARNING
