"""sizefmt: human-readable byte sizes."""

from sizefmt.format import format_size
from sizefmt.parse import parse_size

__all__ = ["format_size", "parse_size"]
