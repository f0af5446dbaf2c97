"""Authoring mistakes ``seal`` catches in a task line before they become numbers. Pure.

- ``problems``: errors. A negative task with a hidden side (only abstaining is
  correct on a negative task, so nothing may grade a change); a hidden test that
  names a test file neither the hidden archive nor the fixture has (declared
  tests, and the file arguments of a ``pytest`` or ``python`` command).
- ``top_folder``: a warning. Every entry of a fixture under one top-level folder
  puts the code at ``/workspace/<folder>/``, where the hidden test may import the
  image's own copy of the package instead and pass without any fix.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable

from runner.records import RepoTask, TaskKind
from runner.sandbox.base import WORKSPACE

# pytest options whose value is the next word (never a test file to look for).
_VALUED = {
    "-k", "-m", "-p", "-c", "-o", "-W", "-n", "--ignore", "--ignore-glob", "--deselect",
    "--rootdir", "--confcutdir", "--basetemp", "--junitxml", "--tb", "--maxfail",
}  # fmt: skip
_SEPARATORS = {"&&", "||", ";", "|", "&"}


def problems(task: RepoTask, fixture: set[str], hidden: set[str]) -> list[str]:
    """What is wrong with a repository task (``fixture``/``hidden``: each archive's paths)."""
    found: list[str] = []
    if task.kind is TaskKind.NEGATIVE:
        if task.hidden is not None or task.hidden_test or task.hidden_tests:
            found.append(
                "is a negative task (only abstaining is correct) but has a hidden side; "
                "remove hidden, hidden_test and hidden_tests"
            )
        return found
    have = fixture | hidden
    for path in named_test_files(task):
        if path not in have:
            found.append(
                f"its hidden test names {path}, which neither the hidden archive nor the "
                "fixture has; fix the path or add the file to the hidden archive"
            )
    return found


def named_test_files(task: RepoTask) -> list[str]:
    """The test files a task's hidden test names, relative to the workspace root."""
    if task.hidden_tests is not None:
        return _files(entry.split("::", 1)[0] for entry in task.hidden_tests)
    if not task.hidden_test:
        return []
    try:
        lexer = shlex.shlex(task.hidden_test, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    named: list[str] = []
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        if segment and segment[0] == "cd":
            return []  # paths relative to another directory: not checked
        named += _command_files(segment)
        segment = []
    return _files(named)


def _command_files(words: list[str]) -> list[str]:
    """File arguments of one simple command, when it runs pytest or a python file."""
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return []
    program = posixpath.basename(words[0])
    rest = words[1:]
    if program.startswith("python"):
        if rest[:2] == ["-m", "pytest"]:
            rest = rest[2:]
        elif rest and not rest[0].startswith("-"):
            return [rest[0]] if rest[0].endswith(".py") else []
        else:
            return []
    elif program not in ("pytest", "py.test"):
        return []
    files: list[str] = []
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _VALUED
        else:
            files.append(word.split("::", 1)[0])
    return files


def _files(paths: Iterable[str]) -> list[str]:
    """The ``.py`` files among ``paths``, relative to the workspace, without duplicates."""
    found: dict[str, None] = {}
    for path in paths:
        if path.startswith(WORKSPACE + "/"):
            path = path[len(WORKSPACE) + 1 :]
        if path.startswith("/") or not path.endswith(".py") or any(c in path for c in "*?[$"):
            continue
        found.setdefault(posixpath.normpath(path.removeprefix("./")))
    return list(found)


def top_folder(paths: Iterable[str]) -> str | None:
    """The one folder every entry sits under (nothing else at the root), unless it is a
    Python package (an ``__init__.py`` right inside: a fixture may be just a package)."""
    listed = list(paths)
    tops = {path.split("/", 1)[0] for path in listed}
    if len(tops) != 1:
        return None
    (top,) = tops
    if f"{top}/__init__.py" in listed or not any(p.startswith(top + "/") for p in listed):
        return None
    return top
