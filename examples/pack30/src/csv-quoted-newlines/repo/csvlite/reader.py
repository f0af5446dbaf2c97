"""Splitting CSV text into records and fields."""

from __future__ import annotations

from typing import Dict, List

from csvlite.errors import CsvError

QUOTE = '"'


def split_fields(record: str, delimiter: str = ",") -> List[str]:
    """Split one record into its fields.

    A field in double quotes may contain the delimiter; ``""`` inside it
    stands for one quote character. Raises ``ValueError`` when a quote is
    left open.
    """
    fields: List[str] = []
    buf: List[str] = []
    quoted = False
    i = 0
    while i < len(record):
        ch = record[i]
        if quoted:
            if ch == QUOTE and record[i + 1 : i + 2] == QUOTE:
                buf.append(QUOTE)
                i += 1
            elif ch == QUOTE:
                quoted = False
            else:
                buf.append(ch)
        elif ch == QUOTE:
            quoted = True
        elif ch == delimiter:
            fields.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    if quoted:
        raise ValueError("unterminated quoted field")
    fields.append("".join(buf))
    return fields


def read_records(text: str, delimiter: str = ",") -> List[List[str]]:
    """Return every record of *text* as a list of fields; blank lines are skipped."""
    records: List[List[str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        try:
            records.append(split_fields(line, delimiter))
        except ValueError as exc:
            raise CsvError(number, str(exc)) from None
    return records


def read_dicts(text: str, delimiter: str = ",") -> List[Dict[str, str]]:
    """Return the records after the first as dicts keyed by the first (the header)."""
    records = read_records(text, delimiter)
    if not records:
        return []
    header, rows = records[0], records[1:]
    return [dict(zip(header, row)) for row in rows]
