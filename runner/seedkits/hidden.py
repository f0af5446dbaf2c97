"""A seed-004 task's hidden side: its ``hidden_test`` command read as declared tests, and
its fixture split into what the agent gets and what only the verify phase sees.

Seed 004 keeps the hidden test inside the repository tarball and hides it from the
agent with ``forbidden_paths``; deltarun keeps hidden tests in a tar of their own,
laid over the workspace in the verify sandbox only. So the files the command names,
and every fixture file under a forbidden path, move from the fixture into the
hidden tar: the agent can never read them, whatever the sandbox does.

A plain pytest command (``pytest -q tests/test_hidden.py``, ``python3 -m pytest ...``)
becomes ``hidden_tests`` (every named test must run and pass, as its exit status 0
meant) with its selecting options as ``pytest_args``; output-only options are
dropped (the harness runs pytest its own way). Any other command stays a
``hidden_test`` graded by its exit status alone, which deltarun's checklist marks
as weaker.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from runner.errors import UserError
from runner.paths import is_forbidden
from runner.trees.archives import Member, normalise_member_name

PYTHON_RE = re.compile(r"\A(?:/usr(?:/local)?/bin/)?python(?:3(?:\.\d+)?)?\Z")
# Options that only shape pytest's output or stop early: the verdict is the same without.
DROPPED = {"-q", "-qq", "--quiet", "-v", "-vv", "-vvv", "--verbose", "-s", "-x", "--exitfirst"}
DROPPED |= {"--no-header", "--disable-warnings", "-l", "--showlocals", "--strict-markers"}
DROPPED_PREFIXES = ("-r", "--tb=", "--color=", "--capture=", "--durations=")
DROPPED_WITH_VALUE = {"--tb", "--color", "--capture", "--durations"}
# Options that select or configure the tests: kept as pytest_args, with their value.
KEPT_WITH_VALUE = {"-k", "-m", "-p", "-W", "-o", "--deselect"}
SHELL_CHARS = set(";&|<>$`(){}*?~\n")


@dataclass(frozen=True)
class HiddenCommand:
    """What a ``hidden_test`` command becomes: declared tests (``declared`` set) or the
    command itself, graded by its exit status (``declared`` None, ``why`` says why)."""

    command: str
    declared: tuple[str, ...] | None
    pytest_args: tuple[str, ...]
    paths: tuple[str, ...]  # the repository paths (files or folders) the command names
    why: str = ""


def parse_hidden_command(command: str, where: str) -> HiddenCommand:
    """Read ``command`` as a pytest run over named tests, when it is one."""
    if SHELL_CHARS & set(command):
        return _kept(command, "it uses the shell: operators, variables or globs")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UserError(
            f"{where}: hidden_test: not a shell command ({exc}); fix its quoting"
        ) from exc
    if words[:1] in (["pytest"], ["py.test"]):
        rest = words[1:]
    elif len(words) >= 3 and PYTHON_RE.match(words[0]) and words[1:3] == ["-m", "pytest"]:
        rest = words[3:]
    else:
        return _kept(command, "it is not a pytest command")
    args: list[str] = []
    tests: list[str] = []
    index = 0
    while index < len(rest):
        word = rest[index]
        index += 1
        if word in DROPPED or word.startswith(DROPPED_PREFIXES):
            continue
        if word in DROPPED_WITH_VALUE or word in KEPT_WITH_VALUE:
            if index >= len(rest):
                raise UserError(f"{where}: hidden_test: {word} needs a value; complete the command")
            value = rest[index]
            index += 1
            if word in KEPT_WITH_VALUE and not (word == "-p" and value == "no:cacheprovider"):
                args += [word, value]
            continue
        if word.startswith("-"):
            return _kept(command, f"deltarun's harness cannot take its option {word}")
        tests.append(_test_id(word, where))
    if not tests:
        return _kept(command, "it names no test file")
    paths = tuple(dict.fromkeys(test.split("::", 1)[0] for test in tests))
    return HiddenCommand(command, tuple(tests), tuple(args), paths)


def _kept(command: str, why: str) -> HiddenCommand:
    return HiddenCommand(command, None, (), (), why)


def _test_id(word: str, where: str) -> str:
    path, sep, rest = word.partition("::")
    try:
        norm = normalise_member_name(path.rstrip("/") if path != "./" else ".")
    except ValueError:
        norm = ""
    if not norm:
        raise UserError(
            f"{where}: hidden_test: {word!r} is not a test inside the repository; name it "
            "relative to the repository root (tests/test_hidden.py)"
        )
    return norm + sep + rest


@dataclass(frozen=True)
class Split:
    """A fixture split in two: what the agent's workspace holds, and the hidden files."""

    fixture: list[Member]
    hidden: list[Member]
    declared: tuple[str, ...] | None  # the declared tests, folders expanded to test files
    stripped: str  # the single top folder taken off, or ""


def split_fixture(
    members: Sequence[Member], command: HiddenCommand, forbidden: Sequence[str], where: str
) -> Split:
    """Move the named test files (and folders) and whatever lies under a forbidden path out
    of the fixture; ``.git`` is dropped (the fixture is the tree, never its history)."""
    members = [m for m in members if not is_forbidden(m.path, [".git/"])]
    members, stripped = _strip_top(members, command.paths)
    files = {m.path for m in members if not m.is_dir}
    folders = {m.path for m in members if m.is_dir}
    for path in command.paths:
        if path not in files and path not in folders:
            raise UserError(
                f"{where}: hidden_test names {path}, which the fixture lacks; the kit's "
                "fixture must hold its hidden test (the import moves it into the hidden tar)"
            )
    hide = [p for p in forbidden if p.rstrip("/") not in (".git", "")]
    named = [f"{p}/" if p in folders else p for p in command.paths]
    moved = [m for m in members if not m.is_dir and is_forbidden(m.path, [*named, *hide])]
    if not moved:
        raise UserError(
            f"{where}: no hidden file: hidden_test names no test file of the fixture and no "
            "fixture file lies under forbidden_paths; name the test (pytest -q tests/test_x.py)"
        )
    gone = {m.path for m in moved}
    kept = [m for m in members if m.path not in gone]
    return Split(kept, moved, _declared(command, folders, gone), stripped)


def _declared(command: HiddenCommand, folders: set[str], moved: set[str]) -> tuple[str, ...] | None:
    """The declared tests, a folder standing for the test files under it."""
    if command.declared is None:
        return None
    found: list[str] = []
    for test in command.declared:
        if test in folders:
            found += sorted(p for p in moved if p.startswith(f"{test}/") and _is_test_file(p))
        else:
            found.append(test)
    return tuple(dict.fromkeys(found))


def _is_test_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _strip_top(members: list[Member], named: Sequence[str]) -> tuple[list[Member], str]:
    """Take off a single top folder that every entry sits under when the named tests are
    found only below it (``tar cf repo.tar repo/``): the workspace is the repository root."""
    tops = {m.path.split("/", 1)[0] for m in members}
    if len(tops) != 1 or not named:
        return members, ""
    (top,) = tops
    paths = {m.path for m in members}
    if all(p in paths for p in named) or not all(f"{top}/{p}" in paths for p in named):
        return members, ""
    inner = [
        Member(m.path[len(top) + 1 :], m.is_dir, m.data, m.executable)
        for m in members
        if m.path != top
    ]
    return inner, top
