"""cfgini: a small INI reader."""

from cfgini.errors import IniError
from cfgini.parser import parse, parse_file

__all__ = ["IniError", "parse", "parse_file"]
