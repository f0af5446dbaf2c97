"""Help that renders as paragraphs whatever the width: every command's and option's help
reflowed before Typer draws it.

Typer's rich help keeps a docstring's single line breaks in a command's summary (the
``Commands`` box) and in every paragraph after the first, so a docstring wrapped at the
source's line length shows as broken lines inside the boxes. ``ParagraphHelp``, the class
of the ``deltarun`` group, joins the lines of each paragraph of every command, subcommand
and option it holds when the command line is built, so no docstring can bring that back.
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperGroup

# click's markers: a paragraph starting with \b is kept as written; from \f on, not help
# (dropped here, since Typer's list of commands would show it).
NO_REWRAP = "\b"
END_OF_HELP = "\f"


def paragraphs(text: str) -> str:
    """``text`` up to a ``\\f``, with the lines of each paragraph (blank-line separated)
    joined by a space, paragraphs kept apart by one blank line."""
    shown = text.partition(END_OF_HELP)[0]
    parts = [
        part.strip("\n") if part.lstrip("\n").startswith(NO_REWRAP) else " ".join(part.split())
        for part in re.split(r"\n[ \t]*\n", shown)
    ]
    return "\n\n".join(part for part in parts if part)


def reflow(command: object) -> None:
    """The help of ``command`` (a click command or group), its options and arguments and,
    for a group, of every command below it, made ``paragraphs``."""
    for holder in (command, *getattr(command, "params", ())):
        for name in ("help", "short_help", "epilog"):
            text = getattr(holder, name, None)
            if isinstance(text, str):
                setattr(holder, name, paragraphs(text))
    for sub in getattr(command, "commands", {}).values():
        reflow(sub)


class ParagraphHelp(TyperGroup):
    """The group of the ``deltarun`` command line: its help and all below it reflowed."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        reflow(self)
