"""``deltarun seal``: resolve what the user pointed at, seal the suite, pin it in controls."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from runner.config.loader import LoadedControls
from runner.errors import UserError
from runner.suite import seal

_SHA_LINE = re.compile(r"^(\s*suite:\s*\{.*?\bsha256:\s*)(\"?[0-9a-f]*\"?)(.*)$")


def pin_suite_digest(text: str, digest: str) -> str | None:
    """Write ``digest`` into the ``suite.sha256`` of controls YAML text, keeping the rest intact.

    Supports the flow form ``suite: {file: ..., sha256: ...}`` and the block form
    with an indented ``sha256:`` under ``suite:``. Returns None if neither is found.
    """
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = _SHA_LINE.match(line.rstrip("\n"))
        if match:
            lines[index] = f"{match.group(1)}{digest}{match.group(3)}\n"
            return "".join(lines)
    in_suite = False
    for index, line in enumerate(lines):
        if re.match(r"^suite:\s*$", line):
            in_suite = True
            continue
        if in_suite and line and not line[0].isspace():
            break
        if in_suite and re.match(r"^\s+sha256:", line):
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = f"{indent}sha256: {digest}\n"
            return "".join(lines)
    return None


def seal_target(target: Path, load: Callable[[Path], LoadedControls]) -> tuple[str, list[Path]]:
    """Seal a suite directory, a tasks.jsonl, or the suite of a controls.yaml (and pin it)."""
    if target.is_dir():
        tasks = target / "tasks.jsonl"
        return seal(tasks), [tasks]
    if target.suffix in (".yaml", ".yml"):
        loaded = load(target)
        tasks = loaded.suite_path
        digest = seal(tasks)
        text = target.read_text(encoding="utf-8")
        pinned = pin_suite_digest(text, digest)
        if pinned is None:
            raise UserError(
                f"{target}: suite.sha256: cannot find where to write the digest; "
                f"add 'sha256: {digest}' under 'suite:'"
            )
        if pinned != text:
            target.write_text(pinned, encoding="utf-8")
        return digest, [tasks, target]
    if target.is_file():
        return seal(target), [target]
    raise UserError(f"{target}: not found; pass a suite directory, tasks.jsonl or controls.yaml")
