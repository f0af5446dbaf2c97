"""semverlite: dependency-free Semantic Versioning 2.0.0 parsing and ordering."""

from semverlite.version import Version, latest

__all__ = ["Version", "latest"]
__version__ = "1.2.0"
