"""Merging configuration layers."""

from __future__ import annotations

from functools import reduce
from typing import Any, Dict, Mapping


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> Dict[str, Any]:
    """*base* with the values of *override* on top; neither input is modified."""
    result = dict(base)
    result.update(override)
    return result


def merge_all(*layers: Mapping[str, Any]) -> Dict[str, Any]:
    """Merge *layers* from first (lowest priority) to last."""
    return reduce(merge, layers, {})
