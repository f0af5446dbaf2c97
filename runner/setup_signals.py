"""What a record says about the setup rather than the agent: the few signals. Pure.

Read from a record's ``reason`` and ``agent_log`` once, when it is recorded or
scored, so that ``deltarun validate`` (``runner.grading.validation``) and the report's
"Setup warnings" (``runner.store.setup_warnings``) read them the same way.
"""

from __future__ import annotations

import re

NO_TEST_RAN = "no-test-ran"
NO_OUTPUT = "no-recorded-output"
# What a patch arm's agent logs when its directory has nothing for the task.
NO_OUTPUT_LOG = "no recorded output for this task"
# What the harness says when the runner ran no test (runner.trees.declared, verify).
NOT_COLLECTED = (
    "no test ran",
    "did not run",
    "pytest exit status 4",
    "pytest exit status 5",
    "(exit 4) before pytest reported",
    "(exit 5) before pytest reported",
)


# What a test log says when the setup broke before any test ran, and the fix to try.
_SETUP_LINES = (
    ("No module named", "a module is not importable: if it is the project's own package, "
     "give the task an install step (specs: install) or declare its src/ folder in the "
     "packaging metadata; if it is a dependency, add it to the environment"),
    ("ImportError while loading conftest", "a conftest.py does not import: add what it "
     "needs to the environment, or an install step"),
    ("ImportError while importing test module", "a test module does not import: add what "
     "it needs to the environment, or an install step"),
    ("ERROR collecting", "collection failed: run the declared tests by hand in the image"),
    ("INTERNALERROR", "pytest crashed before the tests ran: check the plugins and settings"),
    ("deltarun: the project ships its own", "a project that is pytest, or ships a package "
     "pytest runs on, cannot be graded with the harness's pytest: leave the task out "
     "(suite.exclude)"),
)  # fmt: skip
INSTALL_FIX = (
    "the install step failed: run it by hand in the image (offline) and fix the step or "
    "the environment"
)
# The reasons of an install step that failed (runner.trees.install.failure,
# runner.grading.install_step): only these say the install step failed.
_INSTALL_FAILED = re.compile(r"\Ainstall step `.*?` failed \((exit -?\d+|exit None|timed out)\)")
_INSTALL_BROKE = "failed during the install step"
# The install script's own lines (runner.trees.install.install_script): where a step starts
# (``[deltarun] install step N: <step>``), and the one saying which step failed.
INSTALL_STEP = "[deltarun] install step"
INSTALL_STEP_FAILED = re.compile(r"\[deltarun\] install step (\d{1,6}) failed \(exit \d{1,3}\)")
# pip's last word when the step asked an index (sandboxes have none) for a requirement.
_NO_DISTRIBUTION = re.compile(r"No matching distribution found for ([^\s|]{1,120})")
# A module the step's Python could not import: a build backend, or what setup.py imports.
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]{1,100})'")
# pip's words while it installs the build backend in an isolated environment (PEP 517):
# "Installing build dependencies" (20.x), "pip subprocess to install build dependencies" (23.x).
_BUILD_ISOLATION = ("build dependencies", "pip-build-env-")
# The plugins behind options test settings often carry (prefix of the option -> package).
_PLUGIN_OPTIONS = (
    ("--cov", "pytest-cov"),
    ("--no-cov", "pytest-cov"),
    ("--timeout", "pytest-timeout"),
    ("-n", "pytest-xdist"),
    ("--numprocesses", "pytest-xdist"),
    ("--dist", "pytest-xdist"),
    ("--reruns", "pytest-rerunfailures"),
    ("--benchmark", "pytest-benchmark"),
    ("--asyncio-mode", "pytest-asyncio"),
    ("--html", "pytest-html"),
    ("--mypy", "pytest-mypy"),
    ("--flake8", "pytest-flake8"),
    ("--black", "pytest-black"),
    ("--mpl", "pytest-mpl"),
    ("--ds", "pytest-django"),
    ("--hypothesis", "hypothesis"),
    ("--randomly", "pytest-randomly"),
    ("-p", "a plugin"),
)
# Reasons of a verify phase whose tests never ran (runner.grading.verdict).
_NEVER_RAN = (
    "before pytest reported",
    "collection failed",
    "did not run",
    "no test ran",
    "install step",
)


def setup_failure(reason: str | None, log: str) -> str | None:
    """When the tests never ran because the setup broke: the first error line of the test
    log and the fix to try; None otherwise (tests ran, or nothing says why not)."""
    if not reason or not any(marker in reason for marker in _NEVER_RAN):
        return None
    failed = _INSTALL_FAILED.match(reason)
    if failed is not None:
        return _install_failure(failed.group(0), reason, log)
    if _INSTALL_BROKE in reason:
        return f"{reason[:200]} -> {INSTALL_FIX}"
    # The harness's own lines (the install step's echoes) are not the setup's errors.
    lines = [
        line.strip()
        for line in log.splitlines()
        if line.strip() and not line.startswith("[deltarun]")
    ]
    for line in lines:
        if "unrecognized arguments:" in line:
            return _unrecognized(line)
    for marker, fix in _SETUP_LINES:
        for line in lines:
            if marker in line:
                return f"{_first_error(lines, line)[:200]} -> {fix}"
    return None


def _install_failure(failed: str, reason: str, log: str) -> str:
    """A failed install step, told from its own reason and its part of the log (never the
    test log: a canary's failure there is the harness's, not the install's): what pip or
    the build said the step lacked, with its fix; else the step's last line."""
    # The reason keeps the step's last lines; pip's own word may be earlier in the log.
    text = f"{reason}\n{_install_section(log)}"
    missing = _NO_DISTRIBUTION.search(text)
    if missing is not None:
        # pip 20 writes the marker after the pin: "flake8==3.7.8; extra == "dev""
        return _offline_fix(failed, missing.group(1).rstrip(";,"), text)
    if "editable mode currently requires a setup.py" in text:
        return (
            f"{failed[:160]}: the image's pip cannot install a project without setup.py in "
            "editable mode (pip before 21.3; the Python 3.9 base has 20.3) -> give a newer "
            "pip in the spec's pip_packages (pip==23.1.2)"
        )
    if "unable to detect version" in text:
        return (
            f"{failed[:160]}: setuptools-scm was unable to detect the version -> a workspace "
            "holds the tree at the commit, not the repository's tags: give the version in "
            "the spec's env_vars (SETUPTOOLS_SCM_PRETEND_VERSION: 5.4.0)"
        )
    module = _NO_MODULE.search(text)
    if module is not None:
        return (
            f"{failed[:160]}: no module named {module.group(1)} -> the step needs a package "
            "the environment lacks (a build backend such as flit_core, hatchling or "
            "setuptools_scm, or what setup.py imports): give it in the spec's pip_packages"
        )
    last = reason[len(failed) :].removeprefix(": ").split(" | ")[-1].strip()
    said = failed + (f": {last}" if last else "")
    return f"{said[:200]} -> {INSTALL_FIX}"


def _install_section(log: str) -> str:
    """The install step's part of a verify log: from its first line to the line saying
    which step failed (the tests' output after it is not the step's)."""
    lines = log.splitlines()
    first = f"{INSTALL_STEP} 1:"
    start = next((i for i, line in enumerate(lines) if line.startswith(first)), len(lines))
    section = []
    for line in lines[start:]:
        section.append(line)
        if INSTALL_STEP_FAILED.fullmatch(line):
            break
    return "\n".join(section)


def _offline_fix(failed: str, requirement: str, text: str) -> str:
    """An install step that asked pip for ``requirement`` from an index (``text``: what the
    step said): the sandbox is offline, so it comes from the environment or not at all."""
    said = f"{failed[:160]}: pip found no {requirement} (the sandbox has no index)"
    if "fetch_build_egg" in text or "setup_requires" in text:
        return (
            f"{said} -> the project's setup.py fetches {requirement} while it builds "
            "(setup_requires): give it in the spec's pip_packages"
        )
    if any(mark in text for mark in _BUILD_ISOLATION):
        return (
            f"{said} -> the step builds the project in an isolated environment, which "
            f"fetches {requirement} from an index: add --no-build-isolation to the step, so "
            "the build uses the environment's own backend (the image's setuptools, or one "
            "given in the spec's pip_packages)"
        )
    return (
        f"{said} -> the step installs dependencies from an index: give them in the spec's "
        "pip_packages (the import fetches them into the environment image), or add --no-deps "
        "to the step when the environment has what the tests import"
    )


def _unrecognized(line: str) -> str:
    """The options pytest refused, the plugin each belongs to (when known) and the fix."""
    options = line.split("unrecognized arguments:", 1)[1].split()
    named = [f"{o} ({_plugin_of(o)})" if _plugin_of(o) else o for o in options]
    plugins = sorted({p for p in map(_plugin_of, options) if p and p != "a plugin"})
    which = " and ".join(plugins) if plugins else "the plugin"
    return (
        f"pytest: unrecognized arguments: {' '.join(named)}"[:300]
        + f" -> the test settings carry options of {which}, which the image lacks: add "
        f"{which} to the environment (specs: pip_packages) or drop the options"
    )


def _plugin_of(option: str) -> str | None:
    name = option.split("=")[0]
    for prefix, plugin in _PLUGIN_OPTIONS:
        if name == prefix or (prefix.startswith("--") and name.startswith(prefix)):
            return plugin
    return None


def _first_error(lines: list[str], found: str) -> str:
    """The most telling line near ``found``: the first ``E   ...Error`` line from it on,
    else it. A failed assertion is a test's outcome (a must-fail canary's, say), never
    what broke the setup, so it is passed over."""
    start = lines.index(found) if found in lines else 0
    for line in lines[start:]:
        text = line.removeprefix("E").strip()
        error = line.startswith("E ") and ("Error" in line or "error" in line)
        if error and not text.startswith(("AssertionError", "assert ")):
            return text
    return found


def not_collected(reason: str | None) -> bool:
    return reason is not None and any(s in reason for s in NOT_COLLECTED)


def signal_of(reason: str | None, agent_log: str) -> str | None:
    """``NO_TEST_RAN``, ``NO_OUTPUT`` or None for one record."""
    if not_collected(reason):
        return NO_TEST_RAN
    if agent_log.strip() == NO_OUTPUT_LOG:
        return NO_OUTPUT
    return None
