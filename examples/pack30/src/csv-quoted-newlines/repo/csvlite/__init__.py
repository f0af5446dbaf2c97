"""csvlite: a tiny CSV reader."""

from csvlite.errors import CsvError
from csvlite.reader import read_dicts, read_records, split_fields

__all__ = ["CsvError", "read_dicts", "read_records", "split_fields"]
