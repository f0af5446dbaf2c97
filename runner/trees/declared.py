"""Declared tests under pytest: what the harness hands pytest, and which files hold them. Pure.

A repository task that declares ``hidden_tests`` runs them through the harness's
own pytest (``run_pytest.py``): the fixture's *pristine* runner settings (``-c``,
``runner_config``), the declared files as arguments (``test_files``), only the
declared tests kept (``matches``, the same rule as the plugin's). The files that
hold declared tests are the harness's in the verify sandbox, hidden or not
(``holds_declared``). The verdict on what pytest reported is
``runner.grading.verdict``.
"""

from __future__ import annotations

import configparser
import fnmatch
import posixpath
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass

from runner.trees.archives import Member

# Where pytest 7 looks for its settings at the root, in its order.
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_SECTION = re.compile(rb"^\[(pytest|tool:pytest)\]\s*$", re.MULTILINE)


@dataclass(frozen=True)
class RunnerConfig:
    """The runner settings the harness hands pytest with ``-c``: the fixture's, byte for byte."""

    source: str  # the fixture file they come from, or "" (none: an empty [pytest])
    suffix: str  # .ini, .toml or .cfg: pytest reads the copy by its suffix
    data: bytes


def runner_config(fixture: Sequence[Member]) -> RunnerConfig:
    """The settings pytest would read at the root of the *pristine* fixture."""
    files = {m.path: m.data for m in fixture if not m.is_dir and "/" not in m.path}
    for name in CONFIG_FILES:
        data = files.get(name)
        if data is None:
            continue
        if name in ("pytest.ini", ".pytest.ini"):
            return RunnerConfig(name, ".ini", data)
        if name == "pyproject.toml" and _pyproject_has_pytest(data):
            return RunnerConfig(name, ".toml", data)
        if name in ("tox.ini", "setup.cfg") and _ini_has_pytest(data, name):
            return RunnerConfig(name, ".ini" if name == "tox.ini" else ".cfg", data)
    return RunnerConfig("", ".ini", b"[pytest]\n")


def _pyproject_has_pytest(data: bytes) -> bool:
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    tool = parsed.get("tool")
    return (
        isinstance(tool, dict)
        and isinstance(tool.get("pytest"), dict)
        and ("ini_options" in tool["pytest"])
    )


def _ini_has_pytest(data: bytes, name: str) -> bool:
    section = "pytest" if name == "tox.ini" else "tool:pytest"
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(data.decode("utf-8", "replace"))
    except configparser.Error:
        return any(m.group(1).decode() == section for m in _SECTION.finditer(data))
    return parser.has_section(section)


def test_files(selected: Sequence[str]) -> list[str]:
    """The paths pytest is given: each declared entry's file part, once, in order."""
    return list(dict.fromkeys(entry.split("::", 1)[0] for entry in selected))


def matches(nodeid: str, entry: str) -> bool:
    """Does a declared entry (node id, file, directory or ``file::Class``) name this test?
    The same rule as the plugin's selection (``deltarun_results._selected``)."""
    entry = entry.rstrip("/")
    if cut_at_space(entry):
        return nodeid.startswith(entry)
    return nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "/")


def cut_at_space(entry: str) -> bool:
    """Is ``entry`` a parametrised id SWE-bench's log parser cut at a space
    (``test_x[a b]`` read as ``test_x[a``)? It names every test it prefixes, as in
    SWE-bench, where such an id stands for the tests whose log line starts with it."""
    name = entry.rsplit("::", 1)[-1]
    return "::" in entry and name.count("[") > name.count("]")


# pytest's default ``python_files``: the modules it collects under a declared directory.
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")


def holds_declared(path: str, selected: Sequence[str]) -> bool:
    """Is ``path`` a file that holds declared tests: a declared file, or a test module
    (pytest's default names) under a declared directory?"""
    name = posixpath.basename(path)
    for part in test_files(selected):
        part = part.rstrip("/")
        if path == part:
            return True
        if path.startswith(part + "/") and any(
            fnmatch.fnmatchcase(name, p) for p in TEST_FILE_PATTERNS
        ):
            return True
    return False
