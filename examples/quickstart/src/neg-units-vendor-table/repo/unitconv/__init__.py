"""unitconv: convert between metric and US customary units."""

from unitconv.convert import IncompatibleUnits, convert

__all__ = ["IncompatibleUnits", "convert"]
