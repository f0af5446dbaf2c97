"""datesniff: lenient date parsing."""

from datesniff.parse import parse_date

__all__ = ["parse_date"]
