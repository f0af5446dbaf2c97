"""durations: short duration strings such as ``90s`` or ``1h30m``."""

from durations.format import format_duration
from durations.parse import parse_duration
from durations.units import MILLIS, UNITS

__all__ = ["MILLIS", "UNITS", "format_duration", "parse_duration"]
