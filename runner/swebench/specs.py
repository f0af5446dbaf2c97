"""Per-repository specs for ``deltarun import swebench --specs FILE``, in the shape of
SWE-bench's ``MAP_REPO_VERSION_TO_SPECS``: ``{repo: {version: {key: value}}}`` (YAML or
JSON), so a team brings the specs it already has. Pure: parsing and what each spec means.

==================  ============================================================================
key                 what deltarun does with it
==================  ============================================================================
``install``         the task's install step (after ``pre_install``): run offline as the
                    agent's uid in both sandboxes (``RepoTask.install``)
``pre_install``     steps run before ``install`` (a list, or one command)
``pip_packages``    requirements fetched on this machine with pip for the image's Python and
                    installed into the environment image (offline, from the fetched wheels):
                    exact pins (``name==1.2``), or a name with or without a version range
                    (``name``, ``name>=1.2,<2``), which the import pins once, to the version
                    pip finds then, with a warning (``runner.swebench.pins``)
``python``          the Python the environment must have: checked when its image is built
``env_vars``        environment variables of the environment image (``ENV``)
``test_cmd``        the command SWE-bench grades with; it names the task's test runner
                    (``runner.grading.runners``): a pytest command (its options become the
                    task's ``pytest_args``), Django's ``tests/runtests.py`` (its
                    ``--settings`` kept), sympy's ``bin/test`` (``-C`` kept), or
                    ``python -m unittest``; ``NAME=value`` words before it become the
                    test's environment
==================  ============================================================================

SWE-bench keys deltarun has no use for (``packages``, ``eval_commands``,
``execute_test_as_nonroot``, ``nano_cpus``, ``no_use_env``, ``docker_specs``) are accepted
and ignored, each named once in a warning; any other key is an error naming it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from runner.bounded_input import YamlBounds, excerpt, load_yaml
from runner.bounded_json import BoundsError
from runner.errors import UsageError

USED = ("install", "pre_install", "pip_packages", "python", "env_vars", "test_cmd")
IGNORED = (
    "packages",
    "eval_commands",
    "execute_test_as_nonroot",
    "nano_cpus",
    "no_use_env",
    "docker_specs",
    "env_patches",
)
# Matched whole (``fullmatch``, ``\A``/``\Z``): ``$`` also matches before a final newline,
# and each of these values is written into the environment's Dockerfile.
PIN_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+\Z")
# A requirement the import pins (runner.swebench.pins): a name, its extras, and a version
# range of PEP 440 comparisons, with no space, URL, path, marker or option (it reaches pip's
# command line and a Dockerfile).
_CLAUSE = r"(~=|==|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+"
REQUIREMENT_RE = re.compile(
    rf"\A(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?)({_CLAUSE}(,{_CLAUSE})*)?\Z"
)
ENV_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
PYTHON_RE = re.compile(r"\A3\.\d{1,2}\Z")
# A line break or a NUL ends a command early wherever it lands (a Dockerfile line, a shell
# script, an argv element), and Docker's ENV has no escape for a control character.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
SPECS_MAX_BYTES = 16 << 20
"""The largest specs file read (SWE-bench's whole map is well under 1 MiB)."""
SPECS_YAML = YamlBounds(max_chars=SPECS_MAX_BYTES, max_depth=16, max_nodes=1_000_000)


@dataclass(frozen=True)
class Spec:
    """One (repo, version)'s spec, as deltarun uses it."""

    install: tuple[str, ...] = ()  # pre_install then install
    pip_packages: tuple[str, ...] = ()
    python: str = ""
    env_vars: Mapping[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()
    test_runner: str = "pytest"
    runner_args: tuple[str, ...] = ()
    test_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def unpinned(self) -> tuple[str, ...]:
        """The ``pip_packages`` that are not exact pins: the import pins them."""
        return tuple(p for p in self.pip_packages if not PIN_RE.fullmatch(p))

    @property
    def needs_environment(self) -> bool:
        return bool(self.pip_packages or self.python or self.env_vars)


@dataclass(frozen=True)
class Specs:
    """Every spec of a specs file, by (repo, version), and the warnings parsing gave."""

    by_key: Mapping[tuple[str, str], Spec]
    warnings: tuple[str, ...] = ()
    source: str = ""  # the file, for messages

    def of(self, repo: str, version: str) -> Spec | None:
        return self.by_key.get((repo, version))


def parse_specs(text: str, source: str) -> Specs:
    """The specs of ``text`` (YAML or JSON); one ``UsageError`` line naming the file, the
    repo, the version and the key otherwise."""
    try:
        data = load_yaml(text, SPECS_YAML)
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML or JSON ({exc})".splitlines()[0]) from exc
    except BoundsError as exc:
        raise UsageError(f"{source}: refused: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source}: must map each repo (owner/name) to its versions' specs")
    found: dict[tuple[str, str], Spec] = {}
    ignored: set[str] = set()
    for repo, versions in data.items():
        where = f"{source}: {excerpt(repo)[1:-1] if isinstance(repo, str) else excerpt(repo)}"
        if not isinstance(repo, str) or repo.count("/") != 1:
            raise UsageError(f"{where}: a repo is written owner/name")
        if not isinstance(versions, dict):
            raise UsageError(f"{where}: must map each version to its spec")
        for version, raw in versions.items():
            here = f"{where} {excerpt(str(version))[1:-1]}"
            if not isinstance(raw, dict):
                raise UsageError(f"{here}: a spec is a mapping of keys (install, test_cmd, …)")
            found[(repo, str(version))] = _spec(raw, here, ignored)
    warnings = tuple(
        f"{source}: {key} is a SWE-bench key deltarun does not use; ignored"
        for key in sorted(ignored)
    )
    return Specs(found, warnings, source)


def _spec(raw: dict[Any, Any], where: str, ignored: set[str]) -> Spec:
    for key in raw:
        if key in IGNORED:
            ignored.add(key)
        elif key not in USED:
            known = ", ".join(USED)
            raise UsageError(
                f"{where}: unknown key {excerpt(key)}; the keys deltarun uses: {known}"
            )
    pre = raw.get("pre_install") or []
    steps = [pre] if isinstance(pre, str) else pre
    if not isinstance(steps, list) or not all(_command(s) for s in steps):
        raise UsageError(
            f"{where}: pre_install must be a command or a list of commands, each one line"
        )
    install = raw.get("install")
    if install is not None and not _command(install):
        raise UsageError(f"{where}: install must be one shell command on one line")
    pins = raw.get("pip_packages") or []
    bad = (
        [p for p in pins if not (isinstance(p, str) and REQUIREMENT_RE.fullmatch(p))]
        if isinstance(pins, list)
        else [pins]
    )
    if bad:
        raise UsageError(
            f"{where}: pip_packages: {excerpt(bad[0])} is not a requirement deltarun takes; give "
            "each as name==version (pytest-cov==5.0.0), or a name with an optional version "
            "range (pytest-cov, pytest-cov>=5,<6), without spaces, URLs, paths or options"
        )
    python = raw.get("python") or ""
    if python and not (isinstance(python, str) and PYTHON_RE.fullmatch(python)):
        # A number is refused too: unquoted, YAML reads 3.10 as 3.1.
        raise UsageError(
            f"{where}: python must be a version like 3.11, quoted, not {excerpt(python)}"
        )
    env = raw.get("env_vars") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and ENV_RE.fullmatch(k) and _env_value(v) for k, v in env.items()
    ):
        raise UsageError(
            f"{where}: env_vars must map NAME to a value (one line, no control characters)"
        )
    command = _test_command(raw.get("test_cmd"), where)
    return Spec(
        install=(*steps, *([install] if install else [])),
        pip_packages=tuple(pins),
        python=python,
        env_vars={k: str(v) for k, v in sorted(env.items())},
        pytest_args=command.args if command.runner == "pytest" else (),
        test_runner=command.runner,
        runner_args=command.args if command.runner != "pytest" else (),
        test_env=command.env,
    )


def _command(value: object) -> bool:
    """One shell command: a non-blank string on one line, without NUL."""
    return isinstance(value, str) and bool(value.strip()) and not CONTROL_RE.search(value)


def _env_value(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    return not CONTROL_RE.search(str(value))


@dataclass(frozen=True)
class TestCommand:
    """What a spec's ``test_cmd`` says: the runner, the options kept, the environment."""

    runner: str = "pytest"
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


# Options of the project's runner the harness sets itself (selection, output, parallelism):
# dropped from a test_cmd; every other option is kept for the runner.
_DJANGO_OWN = ("--verbosity", "-v", "--parallel", "--noinput", "--no-input", "--timing")
_SYMPY_KEPT = ("-C", "--no-cache")


def _test_command(command: object, where: str) -> TestCommand:
    """The runner and options of a ``test_cmd``: pytest (``pytest -rA``, ``python -m
    pytest …``), Django's ``tests/runtests.py``, sympy's ``bin/test``, or ``python -m
    unittest``. Leading ``NAME=value`` words are the test's environment."""
    if command is None:
        return TestCommand()
    if not _command(command):
        raise UsageError(f"{where}: test_cmd must be one command on one line")
    assert isinstance(command, str)
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"{where}: test_cmd: {exc}") from exc
    env: dict[str, str] = {}
    while words and "=" in words[0] and ENV_RE.fullmatch(words[0].split("=", 1)[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    for start, word in enumerate(words):
        rest = words[start + 1 :]
        if word in ("pytest", "py.test"):
            return TestCommand("pytest", tuple(rest), env)
        if words[start : start + 2] == ["-m", "pytest"]:
            return TestCommand("pytest", tuple(words[start + 2 :]), env)
        if word.endswith("runtests.py"):
            return TestCommand("django", _django_options(rest), env)
        if word == "bin/test" or word.endswith("/bin/test"):
            return TestCommand("sympy", tuple(w for w in rest if w in _SYMPY_KEPT), env)
        if words[start : start + 2] == ["-m", "unittest"]:
            return TestCommand("unittest", (), env)
    raise UsageError(
        f"{where}: test_cmd {excerpt(command)} names no test runner deltarun knows; give a "
        "pytest command, Django's tests/runtests.py, sympy's bin/test or python -m unittest"
    )


def _django_options(words: list[str]) -> tuple[str, ...]:
    """The options of a ``runtests.py`` command the harness keeps (``--settings=…``, …):
    not the test labels, not the options it sets itself (``runner.grading.runners``)."""
    kept: list[str] = []
    skip_value = False
    for word in words:
        if skip_value:
            skip_value = False
            continue
        name = word.split("=", 1)[0]
        if name in _DJANGO_OWN:
            skip_value = "=" not in word and name in ("--verbosity", "-v", "--parallel")
            continue
        if word == "--settings":
            kept.append(word)
            continue
        if word.startswith("-") or (kept and kept[-1] == "--settings"):
            kept.append(word)
    return tuple(kept)


def _env_quoted(value: str) -> str:
    """A value as Docker's ``ENV`` reads it back unchanged: double-quoted with backslash
    escapes (JSON's, which escapes only quotes, backslashes and the control characters
    refused above) and ``$`` escaped, which ENV would otherwise expand."""
    return json.dumps(value, ensure_ascii=False).replace("$", "\\$")


def dockerfile(spec: Spec, base: str, wheels: bool) -> str:
    """The environment of a spec: ``base`` plus the pinned packages (installed offline from
    the fetched wheels in the context's ``wheels/``), the Python check and the variables."""
    lines = [f"FROM {base}", "USER root"]
    if spec.python:
        major, minor = spec.python.split(".")
        lines.append(
            'RUN python3 -c "import sys; v = sys.version_info[:2]; assert v == '
            f"({major}, {minor}), 'the specs ask for Python {spec.python}; the image has %d.%d'"
            ' % v"'
        )
    if wheels:
        pins = " ".join(shlex.quote(p) for p in spec.pip_packages)
        # pip before 23.0.1 (bullseye's 20.3) has no --break-system-packages, nor needs it.
        lines += [
            "COPY wheels/ /tmp/deltarun-wheels/",
            "RUN if python3 -m pip install --help | grep -q -e --break-system-packages; then "
            "set -- --break-system-packages; fi; "
            'python3 -m pip install --no-index --find-links /tmp/deltarun-wheels "$@" '
            f"--no-compile --disable-pip-version-check {pins} "
            "&& rm -rf /tmp/deltarun-wheels",
        ]
    # Docker's ENV reads a double-quoted value with backslash escapes and expands $NAME:
    # JSON's quoting with \$ keeps the value as written (control characters were refused).
    lines += [f"ENV {k}={_env_quoted(v)}" for k, v in spec.env_vars.items()]
    lines.append("USER agent")
    return "\n".join(lines) + "\n"
