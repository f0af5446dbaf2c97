"""What a command prints once a report is built: the headline, then where it was written.

``deltarun run``, ``report`` and ``replay`` print the same lines: the summary of each
candidate (``markdown.headline_lines``) with the failing checklist rows named, or,
when two or more rows fail, one line saying the headline is withheld.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runner.report.assemble import BuiltReport
from runner.report.markdown import headline_lines


def headline(built: BuiltReport, paths: Sequence[Path] = ()) -> list[str]:
    """The summary line(s), withheld when two or more checklist rows fail; then ``paths``."""
    failing = [row.item for row in built.rows if not row.ok]
    if built.withheld:
        lines = [
            f"headline withheld: {len(failing)} checklist rows fail ({'; '.join(failing)}); "
            "see the report"
        ]
    else:
        lines = headline_lines(built.scores)
        if failing:
            lines.append(f"verdict: demo (failing: {'; '.join(failing)})")
    return lines + [f"report: {path}" for path in paths]
