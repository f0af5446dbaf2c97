"""iniread: a small, strict INI reader."""

from iniread.parser import IniError, parse

__all__ = ["IniError", "parse"]
