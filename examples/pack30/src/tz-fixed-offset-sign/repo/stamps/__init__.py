"""stamps: timestamps with fixed UTC offsets."""

from stamps.offsets import format_offset, parse_offset
from stamps.parse import format_timestamp, parse_timestamp, to_utc

__all__ = ["format_offset", "format_timestamp", "parse_offset", "parse_timestamp", "to_utc"]
