"""Grading by declared tests under pytest: the harness's invocation and its verdict. Pure.

A repository task that declares ``hidden_tests`` is graded on evidence the
harness reads after the test process ended, not on an exit status alone:

- the harness starts pytest itself (``run_pytest.py``) with the fixture's
  pristine runner settings (``-c``), ``--rootdir /workspace``, plugin
  autoloading off, no cache, no bytecode written or trusted, and the task's own
  ``pytest_args``; only the declared tests run;
- its plugin writes each test's outcome, with a nonce only that process knew,
  when the session finishes;
- a pass needs exit status 0, a finished results file with the right nonce,
  every declared entry matched by at least one test and every matched test
  passed, no test failed or errored, no collection error, at least one test run.

What code inside the test process can still do (rewrite the runner in memory,
find the nonce there) is stated in README "What remains the operator's job".
"""

from __future__ import annotations

import configparser
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.archives import Member
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded

RESULTS_CAP = 16 << 20
_RESULTS_BOUNDS = JsonBounds(max_bytes=RESULTS_CAP, max_depth=8, max_items=2_000_000)
PASSING = frozenset({"passed", "xpassed"})
# Where pytest 7 looks for its settings at the root, in its order.
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_SECTION = re.compile(rb"^\[(pytest|tool:pytest)\]\s*$", re.MULTILINE)


@dataclass(frozen=True)
class RunnerConfig:
    """The runner settings the harness hands pytest with ``-c``: the fixture's, byte for byte."""

    source: str  # the fixture file they come from, or "" (none: an empty [pytest])
    suffix: str  # .ini, .toml or .cfg: pytest reads the copy by its suffix
    data: bytes


@dataclass(frozen=True)
class Verdict:
    """A declared-tests verdict and, for a miss, why."""

    passed: bool
    reason: str | None
    executed: int = 0


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
    return nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "/")


def grade(
    selected: Sequence[str], results: bytes | None, nonce: str, exit_code: int | None
) -> Verdict:
    """The verdict on the results file read after the test process ended."""
    if results is None:
        return Verdict(False, f"the test process ended (exit {exit_code}) before pytest reported")
    try:
        data: Any = loads_bounded(results, _RESULTS_BOUNDS)
    except BoundsError as exc:
        return Verdict(False, f"the results file is damaged ({exc})")
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return Verdict(False, "the results file was not written by the harness's plugin")
    tests = data.get("tests")
    if data.get("finished") is not True or not isinstance(tests, dict):
        return Verdict(False, "the results file is incomplete")
    outcomes = {str(k): str(v) for k, v in tests.items()}
    executed = sum(1 for v in outcomes.values() if v != "skipped")
    bad = sorted(k for k, v in outcomes.items() if v in ("failed", "error"))
    if bad:
        return Verdict(False, f"{len(bad)} test(s) failed or errored, first {bad[0]}", executed)
    errors = data.get("collect_errors") or []
    if errors:
        return Verdict(False, f"collection failed for {errors[0]}", executed)
    for entry in selected:
        named = [k for k in outcomes if matches(k, entry)]
        if not named:
            return Verdict(False, f"declared test {entry} did not run", executed)
        missed = [k for k in named if outcomes[k] not in PASSING]
        if missed:
            return Verdict(False, f"{missed[0]}: {outcomes[missed[0]]}", executed)
    if executed == 0:
        return Verdict(False, "no test ran", executed)
    reported = data.get("exitstatus")
    if exit_code != 0 or reported != 0:
        return Verdict(False, f"pytest exit status {reported}, process exit {exit_code}", executed)
    return Verdict(True, None, executed)
