"""Sandbox text made safe to show: cut to a bounded size, patches decoded, failing tests
picked out of a verify log (the harness's canaries set aside: a log recorded now has
their lines left out and says how they behaved on its last line; an older one names the
must-fail canaries there). Pure.

Everything here is hostile input: a log may hold a 10 MB line, invalid UTF-8 (already
replaced by the reader), markup or control characters. Nothing is interpreted; text is
only cut (with a note saying how much was left out), never rewritten.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

LINE_CHARS = 4000  # one line longer than this is cut
TEXT_CHARS = 200_000  # a log or patch longer than this is cut
FAILING_MAX = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FAILED = re.compile(r"^(?:FAILED|ERROR)\s+(\S+)|^(\S+::\S+)\s+(?:FAILED|ERROR)\b")
_HEADER = re.compile(r"^_{3,} (\S.*?) _{3,}\Z")  # pytest's section per failure, without -rA
_RULE = re.compile(r"^(.*) \(([a-z]+)\)\Z")
# The line the harness appended to a verify log naming the must-fail canaries it planted,
# before their lines were left out of the log (kept for the ledgers that have it); the
# log's last line, so the tests' own output cannot forge it.
_CANARIES = re.compile(r"^\[deltarun\] \d+ canary tests? .*failure is expected: (\S.*)\Z")
# The line the harness ends a verify log with now (runner.grading.verify_log): how its
# canaries behaved; their lines are already left out of the log above it.
_CANARY_LINE = "[deltarun] canaries: "
# Why the grading policy drops a section, by rule (runner.grading.patch_policy's table).
RULES = {
    "forbidden": "a path under tools.forbidden_paths",
    "hidden": "a hidden test file or a directory on its path: the hidden file stands as written",
    "declared": "a file holding declared tests: the pristine file stands",
    "harness": "__init__.py or conftest.py beside hidden or declared tests",
    "runner": "a file that configures the test runner",
    "metadata": "packaging metadata: plugin entry points and import hooks",
    "bytecode": "Python bytecode, which may be preferred over the edited source",
    "shadow": "a new module that shadows one the image or the tests import",
    "pattern": "a path matching tools.grading_paths",
}


def clip(text: str, limit: int = TEXT_CHARS, line_limit: int = LINE_CHARS) -> tuple[str, bool]:
    """``text`` with each line cut to ``line_limit`` characters and the whole to ``limit``,
    control characters (but tab and newline) shown as U+FFFD; and whether anything was cut."""
    more = len(text) - limit
    head = text[:limit] if more > 0 else text
    lines = head.split("\n")
    cut = more > 0
    for number, line in enumerate(lines):
        if len(line) > line_limit:
            lines[number] = f"{line[:line_limit]}… [line cut: {len(line) - line_limit} more chars]"
            cut = True
    shown = _CONTROL.sub("\ufffd", "\n".join(lines))
    return (shown + f"\n… [cut: {more} more chars]" if more > 0 else shown), cut


def shown_text(value: Any, limit: int = TEXT_CHARS) -> dict[str, Any]:
    """``{"text", "cut"}`` of any value (a string as is, anything else as its ``str``)."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    clipped, cut = clip(text, limit)
    return {"text": clipped, "cut": cut}


def patch_view(patch: Any, encoding: Any, truncated: Any) -> dict[str, Any]:
    """How to show a record's patch: ``kind`` text (a diff to render), binary (base64 of
    bytes that are not UTF-8: their size only) or empty; with notes."""
    notes: list[str] = []
    if truncated is True:
        notes.append("the patch was cut at the size cap when recorded (patch_truncated)")
    if not isinstance(patch, str) or not patch:
        return {"kind": "empty", "text": "", "notes": notes}
    if encoding == "base64":
        try:
            data = base64.b64decode(patch, validate=True)
        except (binascii.Error, ValueError):
            notes.append("patch_encoding is base64 but the text is not base64; shown as is")
            return {"kind": "text", **_clipped(patch, notes)}
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            notes.append(f"binary patch (base64 in the record): {len(data)} bytes, not shown")
            return {"kind": "binary", "text": "", "notes": notes}
        notes.append("stored as base64 (patch_encoding); decoded as UTF-8 for display")
        return {"kind": "text", **_clipped(decoded, notes)}
    return {"kind": "text", **_clipped(patch, notes)}


def _clipped(text: str, notes: list[str]) -> dict[str, Any]:
    clipped, cut = clip(text)
    if cut:
        notes.append("cut for display (very long patch or line)")
    return {"text": clipped, "notes": notes}


def canaries(log: str) -> list[str]:
    """The must-fail canaries the harness says it planted, from the log's last line: their
    failure is expected and says nothing about the patch."""
    match = _CANARIES.match(_last_line(log)[:LINE_CHARS].strip())
    if match is None:
        return []
    return [name.strip()[:300] for name in match.group(1).split(", ")][:FAILING_MAX]


def _last_line(log: str) -> str:
    return next((line for line in reversed(log[-20_000:].splitlines()) if line.strip()), "")


def canary_note(log: str) -> str:
    """The harness's last line on its canaries (how many behaved as planted, any that did
    not, tampering), "" when the log does not end with one."""
    last = _last_line(log)[:LINE_CHARS].strip()
    return last.removeprefix(_CANARY_LINE) if last.startswith(_CANARY_LINE) else ""


def failing_tests(log: str) -> list[str]:
    """Test ids a pytest log names as failed or in error (its summary lines; else the
    headers of its failure sections), in order, each once; the canaries aside."""
    planted = canaries(log)
    short = {name.split("::")[-1] for name in planted}
    found: list[str] = []
    headers: list[str] = []
    for line in log.splitlines():
        line = line[:LINE_CHARS].strip()
        match = _FAILED.match(line)
        header = _HEADER.match(line) if match is None else None
        if header is not None and header.group(1) not in (*headers, *short):
            headers.append(header.group(1)[:300])
        if match is None:
            continue
        name = next(group for group in match.groups() if group)
        if name not in found and name not in planted:
            found.append(name[:300])
            if len(found) >= FAILING_MAX:
                break
    return found or headers[:FAILING_MAX]


def dropped_view(entries: list[str]) -> list[dict[str, str]]:
    """Each dropped path (``path (rule)`` as recorded) with its rule and why."""
    shown = []
    for entry in entries:
        match = _RULE.match(entry)
        path, rule = (match.group(1), match.group(2)) if match else (entry, "")
        shown.append({"path": path, "rule": rule, "why": RULES.get(rule, "")})
    return shown


def lines_with(log: str, needles: list[str]) -> list[int]:
    """Numbers (0-based) of the lines of ``log`` that mention one of ``needles`` with a
    failure word: the lines a reader looks at first."""
    if not needles:
        return []
    marks = []
    for number, line in enumerate(log.split("\n")):
        if ("FAILED" in line or "ERROR" in line or "Error" in line) and any(
            needle.split("::")[-1] in line for needle in needles
        ):
            marks.append(number)
            if len(marks) >= FAILING_MAX:
                break
    return marks
