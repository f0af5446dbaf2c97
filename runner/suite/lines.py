"""The lines of ``tasks.jsonl``, read once within bounds and split as JSON Lines are.

Every reader of the task lines (``load.read_tasks``, ``seal``, ``build``'s pins and the
line numbers of its messages) goes through ``task_lines``, so they agree on what a line is
and none of them parses more than the bounds allow (DESIGN.md, rule 6):

- the file is at most ``TASKS_MAX_BYTES`` (a 2,294-instance SWE-bench suite is about
  50 MB), read by ``bounded_input.read_capped``, of at most ``MAX_TASKS`` task lines;
- a line ends at ``\\n`` (a ``\\r`` before it is dropped), never at the other characters
  ``str.splitlines`` breaks at: U+2028, U+0085 and the like may stand unescaped inside a
  JSON string, and ``seal`` writes them that way (``ensure_ascii=False``);
- each line is parsed by ``bounded_json.loads_bounded`` within ``LINE_BOUNDS``: strict
  UTF-8, nesting, number length and value count measured before ``json.loads`` runs,
  no NaN or Infinity, no lone surrogates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.bounded_input import TASKS_MAX_BYTES, read_capped
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import UserError

MAX_TASKS = 100_000
"""The most task lines of one suite (SWE-bench's full set is 2,294): 128 MiB of minimal
answer tasks would be over a million, several GB once validated, before any check."""

LINE_BOUNDS = JsonBounds(max_bytes=8 << 20, max_depth=64, max_items=1_000_000)
"""One task line: 8 MiB (a long problem statement and thousands of declared tests fit),
64 levels (an answer task's oracle and schema), numbers of at most 64 characters."""

_BLANK = b" \t\r"


@dataclass(frozen=True)
class TaskLine:
    """One non-blank line of tasks.jsonl: its number (from 1), its text and its JSON value."""

    number: int
    text: str
    data: Any


def parse_json_line(line: str | bytes, source: str) -> Any:
    """The JSON value of one line, or a ``UserError`` naming ``source`` and the reason."""
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    try:
        return loads_bounded(raw, LINE_BOUNDS)
    except BoundsError as exc:
        reason = str(exc).removeprefix("not JSON: ")
        raise UserError(f"{source}: not valid JSON ({reason})") from None


def task_lines(path: Path) -> list[TaskLine]:
    """Every non-blank line of ``path`` with its JSON value; ``UserError`` in one line naming
    ``path:LINE`` otherwise (a missing or unreadable file too)."""
    try:
        data = read_capped(path, TASKS_MAX_BYTES, "tasks.jsonl")
    except FileNotFoundError as exc:
        raise UserError(f"{path}: tasks file not found; check suite.file in controls") from exc
    except OSError as exc:
        raise UserError(f"{path}: cannot read the tasks file ({exc.strerror})") from exc
    return lines_of(data, path)


def lines_of(data: bytes, path: Path) -> list[TaskLine]:
    """Every non-blank line of tasks.jsonl's bytes ``data`` (read from ``path``, which the
    messages name) with its JSON value, split as ``task_lines`` splits them."""
    found: list[TaskLine] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip(_BLANK):
            continue
        if len(found) >= MAX_TASKS:  # before the line is parsed: each task costs memory
            raise UserError(f"{path}:{number}: more than {MAX_TASKS} tasks; split the suite")
        raw = raw.removesuffix(b"\r")
        value = parse_json_line(raw, f"{path}:{number}")
        found.append(TaskLine(number, raw.decode("utf-8"), value))
    return found
