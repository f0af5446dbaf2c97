"""staticpaths: request paths to safe relative file paths."""

from staticpaths.errors import UnsafePath
from staticpaths.normalize import normalize, to_filesystem

__all__ = ["UnsafePath", "normalize", "to_filesystem"]
