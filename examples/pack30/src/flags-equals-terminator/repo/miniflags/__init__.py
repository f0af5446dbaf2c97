"""miniflags: a tiny long-option parser."""

from miniflags.errors import FlagError
from miniflags.parser import parse_flags

__all__ = ["FlagError", "parse_flags"]
