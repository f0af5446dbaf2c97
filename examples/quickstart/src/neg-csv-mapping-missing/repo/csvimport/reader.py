"""Reading contacts from a CSV export."""

from __future__ import annotations

import csv
from typing import Dict, Iterator, Mapping, Optional, TextIO

from csvimport.schema import DEFAULT_MAPPING, REQUIRED_FIELDS


class ImportRowError(ValueError):
    """A row cannot be imported; ``line`` is its 1-based line number in the file."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def read_contacts(
    stream: TextIO, mapping: Optional[Mapping[str, str]] = None
) -> Iterator[Dict[str, str]]:
    """Yield one dict per data row, keyed by field name.

    Columns not in *mapping* (default: ``DEFAULT_MAPPING``) are dropped and
    values are stripped of surrounding whitespace.
    """
    mapping = DEFAULT_MAPPING if mapping is None else mapping
    reader = csv.DictReader(stream)
    for row in reader:
        contact = {
            field: (row.get(column) or "").strip()
            for column, field in mapping.items()
            if column in row
        }
        missing = [f for f in REQUIRED_FIELDS if not contact.get(f)]
        if missing:
            raise ImportRowError(reader.line_num, f"missing {', '.join(missing)}")
        yield contact
