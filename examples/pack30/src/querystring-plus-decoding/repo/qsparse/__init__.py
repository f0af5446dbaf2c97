"""qsparse: parse and build URL query strings."""

from qsparse.build import build_query
from qsparse.parse import Query, get_first, parse_query

__all__ = ["Query", "build_query", "get_first", "parse_query"]
