"""Template parsing and rendering.

The only syntax is ``{{ expression }}``, where an expression is a name
optionally followed by dotted lookups: ``{{ order.customer.email }}``.
Everything outside the braces is copied verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

_TAG = re.compile(r"\{\{\s*(.*?)\s*\}\}")


class TemplateError(Exception):
    """Raised for undefined names and malformed expressions."""


class Template:
    """A template that can be rendered many times with different contexts."""

    def __init__(self, source: str) -> None:
        self.source = source

    def render(self, context: Optional[Mapping] = None, **kwargs: Any) -> str:
        """Return the source with every tag replaced by its value as ``str``.

        Values come from *context* and from keyword arguments, which win.
        """
        scope = dict(context or {}, **kwargs)
        return _TAG.sub(lambda match: str(self._evaluate(match.group(1), scope)), self.source)

    def _evaluate(self, expression: str, scope: Mapping) -> Any:
        if not expression:
            raise TemplateError("empty tag")
        return _lookup(expression, scope)


def _lookup(expression: str, scope: Mapping) -> Any:
    """Resolve ``name.attr.attr`` against *scope*."""
    name, *path = expression.split(".")
    if name not in scope:
        raise TemplateError(f"undefined name {name!r}")
    value = scope[name]
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise TemplateError(f"cannot resolve {part!r} in {expression!r}")
    return value


def render(source: str, context: Optional[Mapping] = None, **kwargs: Any) -> str:
    """Render *source* once; shorthand for ``Template(source).render(...)``."""
    return Template(source).render(context, **kwargs)
