"""minitpl: a tiny ``{{ name }}`` template engine."""

from minitpl.template import Template, TemplateError, render

__all__ = ["Template", "TemplateError", "render"]
