"""serveit: serve a directory over HTTP."""

from serveit.cli import build_parser, load_settings
from serveit.settings import Settings

__all__ = ["Settings", "build_parser", "load_settings"]
