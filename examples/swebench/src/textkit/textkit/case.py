"""Identifier case conversions."""

import re


def camel_to_snake(name: str) -> str:
    """HTTPRequest -> http_request, orderItem -> order_item."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


def snake_to_camel(name: str) -> str:
    """order_item -> orderItem."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)
