"""Build a SWE-bench-format dataset over real Python projects, from their PyPI sdists.

Modelled on examples/swebench/build_dataset.py, but the projects are real releases
with their own layouts and pytest settings (see PROJECTS). Written into ``--out``::

    repos/<owner>__<name>/       a git repository per project: the sdist as released
                                 (less PKG-INFO and *.egg-info), then one commit per
                                 instance that injects a bug and drops the test that
                                 catches it (that commit is the instance's base_commit)
    instances.jsonl              the instances (BUGS), in SWE-bench's fields
    instances-broken.jsonl       one instance whose environment is broken on purpose: its
                                 specs entry lacks pytest-cov while the project's pytest
                                 settings carry --cov, so no test can run ("setup-broken");
                                 its gold patch is right (it is wcwidth-1's)
    specs.yaml                   {repo: {version: spec}}, in the shape of SWE-bench's
                                 MAP_REPO_VERSION_TO_SPECS (python, pip_packages, install,
                                 test_cmd, env_vars)

The sdists are downloaded once with ``python -m pip download`` into
``$DELTARUN_TEST_CACHE`` (default ``~/.cache/deltarun/test-inputs/sdists``), then reused;
each file must have the sha256 pinned below. Commits carry fixed names and dates and the
files are written in sorted order: the same sdists give the same commit ids and the same
bytes in every file written, except the repositories' .git internals.

    python -m tests.realprojects.build --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

CACHE_ENV = "DELTARUN_TEST_CACHE"
DEFAULT_CACHE = Path("~/.cache/deltarun/test-inputs/sdists")
DATE = "2024-01-01T00:00:00+0000"
ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "deltarun-tests",
    "GIT_AUTHOR_EMAIL": "tests@deltarun.invalid",
    "GIT_AUTHOR_DATE": DATE,
    "GIT_COMMITTER_NAME": "deltarun-tests",
    "GIT_COMMITTER_EMAIL": "tests@deltarun.invalid",
    "GIT_COMMITTER_DATE": DATE,
}
PYTHON = "3.11"
TEST_CMD = "pytest -rA"
# pytest-cov 5.0 takes pytest >= 4.6, so Debian bookworm's pytest 7.2.1; both have
# py3-none / cp311 wheels.
COV_PINS = ("pytest-cov==5.0.0", "coverage==7.6.1")


@dataclass(frozen=True)
class Project:
    """A release on PyPI whose sdist carries its tests."""

    repo: str  # owner/name on GitHub
    dist: str  # name on PyPI
    release: str  # exact version on PyPI
    sdist: str  # the file pip downloads
    sha256: str
    version: str  # the instances' SWE-bench "version": the key in specs.yaml
    source_root: str  # where `import pkg` finds the package: "." or "src"
    features: tuple[str, ...]  # the layout traits it brings to the dataset
    pip_packages: tuple[str, ...] = ()
    install: str = ""

    @property
    def dirname(self) -> str:
        return self.repo.replace("/", "__")

    def spec(self, *, pip_packages: tuple[str, ...] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"python": PYTHON, "test_cmd": TEST_CMD, "env_vars": {}}
        packages = self.pip_packages if pip_packages is None else pip_packages
        if packages:
            spec["pip_packages"] = list(packages)
        if self.install:
            spec["install"] = self.install
        return spec


PROJECTS = (
    Project(
        "pytoolz/toolz",
        "toolz",
        "0.12.1",
        "toolz-0.12.1.tar.gz",
        "ecca342664893f177a13dac0e6b41cbd8ac25a358e5f215316d43e2100224f4d",
        "0.12",
        ".",
        (
            "flat package at the root",
            "tests inside the package (toolz/tests/, no __init__.py)",
            "no pytest settings at all",
        ),
    ),
    Project(
        "jquast/wcwidth",
        "wcwidth",
        "0.2.13",
        "wcwidth-0.2.13.tar.gz",
        "72ea0c06399eb286d978fdedb6923a9eb47e1c486ce63e9b4e64fc18303972b5",
        "0.2",
        ".",
        (
            "flat package at the root",
            "[pytest] in tox.ini",
            "--cov=wcwidth and --cov-report=html in addopts (upstream's own)",
            "filterwarnings = error",
        ),
        pip_packages=COV_PINS,
    ),
    Project(
        "python-semver/python-semver",
        "semver",
        "3.0.2",
        "semver-3.0.2.tar.gz",
        "6253adb39c70f6e51afed2fa7152bcd414c411286088fb4b9effb133885ab4cc",
        "3.0",
        "src",
        (
            "src/ layout (setup.cfg package_dir)",
            "[tool:pytest] in setup.cfg, with pythonpath = src tests",
            "--cov=semver in addopts (upstream's own), --import-mode=importlib",
            "tests/conftest.py with fixtures (version, autouse add_semver); it imports "
            "packaging, which comes with pytest",
        ),
        pip_packages=COV_PINS,
    ),
    Project(
        "pallets/click",
        "click",
        "8.1.3",
        "click-8.1.3.tar.gz",
        "7682dc8afb30297001674575ea00d1814d808d6a36af415a82bd481d37ba7b8e",
        "8.1",
        "src",
        (
            "src/ layout (setup.cfg package_dir), installed by the specs' install",
            "[tool:pytest] in setup.cfg, filterwarnings = error",
            "tests/conftest.py with the runner fixture most tests take",
            "setup.py and no pyproject.toml",
        ),
        # No pyproject.toml: pip builds it with setuptools' legacy backend, which needs
        # setuptools (and, before 70.1, wheel) in the environment without build isolation.
        pip_packages=("setuptools==75.3.0",),
        install="python -m pip install -e . --no-deps --no-build-isolation",
    ),
    Project(
        "tkem/cachetools",
        "cachetools",
        "5.3.3",
        "cachetools-5.3.3.tar.gz",
        "ba29e2dfa0b8b556606f097407ed1aa62080ee108ab0dc5ec9d6a723a007d105",
        "5.3",
        "src",
        (
            "src/ layout (setup.cfg package_dir), not installed: `import cachetools` "
            "fails unless src/ is on the path",
            "unittest-style test classes, tests/__init__.py",
            "no pytest settings",
        ),
    ),
    Project(
        "jaraco/jaraco.path",
        "jaraco.path",
        "3.7.1",
        "jaraco_path-3.7.1.tar.gz",
        "e17c0c0b686022a9b10dc7230b21ce353f5626cf079db3780c405f58501ed78e",
        "3.7",
        ".",
        (
            "PEP 420 namespace package: jaraco/ has no __init__.py (jaraco/path.py)",
            "pytest.ini: --doctest-modules, --import-mode importlib, and "
            "consider_namespace_packages (unknown to pytest 7.2.1: a warning)",
        ),
    ),
    Project(
        "gweis/isodate",
        "isodate",
        "0.7.2",
        "isodate-0.7.2.tar.gz",
        "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6",
        "0.7",
        "src",
        (
            "src/ layout found by setuptools' discovery (pyproject.toml, setuptools_scm); "
            "src/isodate/version.py is generated and git-ignored upstream, kept here",
            "[tool.pytest.ini_options] in pyproject.toml, filterwarnings = error",
        ),
    ),
)
PROJECT = {project.repo: project for project in PROJECTS}


@dataclass(frozen=True)
class Bug:
    """One instance: a bug injected into a source file, and the test that catches it."""

    instance_id: str
    repo: str
    problem: str
    source: str
    fixed: str  # text in the released source
    broken: str  # what it becomes at base_commit
    test_file: str
    test_name: str  # the test function or method dropped at base_commit
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


BUGS = (
    Bug(
        "pytoolz__toolz-1",
        "pytoolz/toolz",
        "partition_all loses the last chunk of an iterator\n\n"
        "`list(partition_all(4, iter(range(7))))` gives `[(0, 1, 2, 3), ()]`; the last "
        "chunk should hold what is left: `[(0, 1, 2, 3), (4, 5, 6)]`. A list works.",
        "toolz/itertoolz.py",
        "                if prev[mid] is no_pad:\n",
        "                if prev[mid] is not no_pad:\n",
        "toolz/tests/test_itertoolz.py",
        "test_partition_all",
        ("toolz/tests/test_itertoolz.py::test_partition_all",),
        (
            "toolz/tests/test_itertoolz.py::test_partition",
            "toolz/tests/test_itertoolz.py::test_sliding_window",
            "toolz/tests/test_itertoolz.py::test_count",
        ),
    ),
    Bug(
        "pytoolz__toolz-2",
        "pytoolz/toolz",
        "thread_last threads the value first\n\n"
        "`thread_last([1, 2, 3], (map, inc))` calls `map([1, 2, 3], inc)`; thread_last "
        "should pass the value as the last argument of each form: `map(inc, [1, 2, 3])`.",
        "toolz/functoolz.py",
        "            args = args + (val,)\n",
        "            args = (val,) + args\n",
        "toolz/tests/test_functoolz.py",
        "test_thread_last",
        ("toolz/tests/test_functoolz.py::test_thread_last",),
        (
            "toolz/tests/test_functoolz.py::test_thread_first",
            "toolz/tests/test_functoolz.py::test_apply",
            "toolz/tests/test_functoolz.py::test_pipe",
            "toolz/tests/test_itertoolz.py::test_partition_all",
        ),
    ),
    Bug(
        "jquast__wcwidth-1",
        "jquast/wcwidth",
        "wcswidth() no longer reports control characters\n\n"
        "`wcswidth('\\x1b[0m')` returns 3. As documented, a string holding a C0 or C1 "
        "control character measures -1.",
        "wcwidth/wcwidth.py",
        "            # early return -1 on C0 and C1 control characters\n            return wcw\n",
        "            # C0 and C1 control characters take no cell\n            wcw = 0\n",
        "tests/test_core.py",
        "test_control_c0_width_negative_1",
        ("tests/test_core.py::test_control_c0_width_negative_1",),
        (
            "tests/test_core.py::test_hello_jp",
            "tests/test_core.py::test_wcswidth_substr",
            "tests/test_core.py::test_null_width_0",
            "tests/test_core.py::test_combining_width",
        ),
    ),
    Bug(
        "python-semver__python-semver-1",
        "python-semver/python-semver",
        "bump_prerelease('') uses the rc token\n\n"
        "`Version.parse('3.4.5').bump_prerelease('')` gives `3.4.5-rc.1`; an empty token "
        "should give a bare number, `3.4.5-1` (None keeps the default, `rc`).",
        "src/semver/version.py",
        '        elif token == "":\n            prerelease = "0"\n        elif token is None:\n',
        "        elif not token:\n",
        "tests/test_bump.py",
        "test_should_versioninfo_bump_prerelease_with_empty_str",
        ("tests/test_bump.py::test_should_versioninfo_bump_prerelease_with_empty_str",),
        (
            "tests/test_bump.py::test_should_versioninfo_bump_prerelease_with_none",
            "tests/test_bump.py::test_should_bump_major",
            "tests/test_immutable.py::test_immutable_major",
            "tests/test_immutable.py::test_immutable_prerelease",
        ),
    ),
    Bug(
        "pallets__click-1",
        "pallets/click",
        "Hidden options are listed in --help\n\n"
        "An option declared with `hidden=True` shows up in its command's `--help` page; "
        "it should be left out.",
        "src/click/core.py",
        "    def get_help_record(self, ctx: Context) -> t.Optional[t.Tuple[str, str]]:\n"
        "        if self.hidden:\n"
        "            return None\n"
        "\n"
        "        any_prefix_is_slash = False\n",
        "    def get_help_record(self, ctx: Context) -> t.Optional[t.Tuple[str, str]]:\n"
        "        any_prefix_is_slash = False\n",
        "tests/test_basic.py",
        "test_hidden_option",
        ("tests/test_basic.py::test_hidden_option",),
        (
            "tests/test_basic.py::test_hidden_command",
            "tests/test_basic.py::test_required_option",
            "tests/test_basic.py::test_basic_functionality",
            "tests/test_formatting.py::test_removing_multiline_marker",
        ),
    ),
    Bug(
        "tkem__cachetools-1",
        "tkem/cachetools",
        "LRUCache evicts an item that was just read\n\n"
        "Reading a key of an `LRUCache` does not make it the most recently used one, so "
        "the next insertion past `maxsize` evicts it rather than the least recently used.",
        "src/cachetools/__init__.py",
        '    """Least Recently Used (LRU) cache implementation."""\n'
        "\n"
        "    def __init__(self, maxsize, getsizeof=None):\n"
        "        Cache.__init__(self, maxsize, getsizeof)\n"
        "        self.__order = collections.OrderedDict()\n"
        "\n"
        "    def __getitem__(self, key, cache_getitem=Cache.__getitem__):\n"
        "        value = cache_getitem(self, key)\n"
        "        if key in self:  # __missing__ may not store item\n"
        "            self.__update(key)\n"
        "        return value\n",
        '    """Least Recently Used (LRU) cache implementation."""\n'
        "\n"
        "    def __init__(self, maxsize, getsizeof=None):\n"
        "        Cache.__init__(self, maxsize, getsizeof)\n"
        "        self.__order = collections.OrderedDict()\n"
        "\n"
        "    def __getitem__(self, key, cache_getitem=Cache.__getitem__):\n"
        "        return cache_getitem(self, key)\n",
        "tests/test_lru.py",
        "test_lru",
        ("tests/test_lru.py::LRUCacheTest::test_lru",),
        (
            "tests/test_lru.py::LRUCacheTest::test_lru_getsizeof",
            "tests/test_keys.py::CacheKeysTest::test_hashkey",
            "tests/test_ttl.py::TTLCacheTest::test_ttl",
        ),
    ),
    Bug(
        "jaraco__jaraco.path-1",
        "jaraco/jaraco.path",
        "is_hidden('some/dir/.') is True\n\n"
        "`jaraco.path.is_hidden` looks at the last component of the path as given, so a "
        "visible directory written as `some/dir/.` counts as hidden. It should look at the "
        "absolute path.",
        "jaraco/path.py",
        "    full_path = os.path.abspath(path)\n",
        "    full_path = path\n",
        "tests/test_path.py",
        "test_is_hidden_not_abspath",
        ("tests/test_path.py::test_is_hidden_not_abspath",),
        ("tests/test_path.py::test_is_hidden_not", "tests/test_path.py::test_is_hidden"),
    ),
    Bug(
        "gweis__isodate-1",
        "gweis/isodate",
        "str(Duration(months=1)) says '1 months'\n\n"
        "`str(Duration(months=1))` gives `'1 months, 0:00:00'`; one month is singular: "
        "`'1 month, 0:00:00'`.",
        "src/isodate/duration.py",
        "            if self.months <= 1:\n",
        "            if self.months < 1:\n",
        "tests/test_duration.py",
        "test_repr",
        ("tests/test_duration.py::test_repr",),
        (
            "tests/test_duration.py::test_neg",
            "tests/test_duration.py::test_equal",
            "tests/test_duration.py::test_hash",
            "tests/test_pickle.py::test_pickle_duration",
        ),
    ),
)
# The broken instance: wcwidth-1's commit and patches under another version, whose spec
# has no pytest-cov while wcwidth's tox.ini [pytest] addopts carry --cov.
BROKEN = ("jquast__wcwidth-nocov-1", "jquast__wcwidth-1", "0.2-nocov")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=ENV, check=True, capture_output=True, text=True
    ).stdout


def replaced(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"realprojects: {where}: expected the text once: {old!r}")
    return text.replace(old, new)


def without_test(text: str, name: str, where: str) -> str:
    """``text`` less the test ``name`` (a function or method: its decorators, its body
    and the blank lines after it)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {name}(")]
    if len(starts) != 1:
        raise SystemExit(f"realprojects: {where}: expected one test {name}, found {len(starts)}")
    indent = _indent(lines[starts[0]])
    start = starts[0]
    while start > 0 and lines[start - 1].lstrip().startswith("@"):
        start -= 1
    end = starts[0] + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return "".join(lines[:start] + lines[end:])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sdist(project: Project, cache: Path) -> Path:
    """The project's sdist in ``cache``, downloaded with pip when missing; its sha256
    must be the pinned one."""
    path = cache / project.sdist
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", f"{project.dist}=={project.release}"]
        done = subprocess.run(
            [*command, "-d", str(cache)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or not path.is_file():
            raise SystemExit(
                f"realprojects: could not download {project.dist}=={project.release} "
                f"(expected {path}):\n{done.stdout}{done.stderr}"
            )
    found = sha256_of(path)
    if found != project.sha256:
        raise SystemExit(
            f"realprojects: {path}: sha256 {found}, pinned {project.sha256}; the file is "
            "not the sdist this dataset was made from (delete it to download it again)"
        )
    return path


def unpack(
    archive: Path, into: Path, keep: Callable[[tuple[str, ...]], bool] | None = None
) -> None:
    """The sdist's files under its top folder, less PKG-INFO and *.egg-info, written in
    sorted order with the executable bit the archive gives; with ``keep``, only the files
    whose path (its parts below the top folder) it keeps."""
    with tarfile.open(archive) as tar:
        members = sorted(tar.getmembers(), key=lambda member: member.name)
        for member in members:
            parts = PurePosixPath(member.name).parts[1:]
            if not member.isfile() or not parts or (keep is not None and not keep(parts)):
                continue
            if parts == ("PKG-INFO",) or any(part.endswith(".egg-info") for part in parts):
                continue
            if any(part in ("", ".", "..") for part in parts) or parts[0].startswith("/"):
                raise SystemExit(f"realprojects: {archive}: unsafe member {member.name!r}")
            target = into.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member)
            assert data is not None
            target.write_bytes(data.read())
            executable = member.mode & stat.S_IXUSR
            target.chmod(0o755 if executable else 0o644)


def diff_after(repo: Path, base: str, edits: dict[str, str]) -> str:
    """The patch that turns ``base`` into it with ``edits`` (path -> new text)."""
    git(repo, "checkout", "-q", "--detach", base)
    for path, text in edits.items():
        (repo / path).write_text(text, encoding="utf-8")
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    return patch


def make_repo(project: Project, archive: Path, repo: Path) -> str:
    """The project's repository, its first commit the released sdist; that commit's id."""
    repo.mkdir(parents=True)
    unpack(archive, repo)
    git(repo, "init", "-q", "-b", "main")
    # -f: files that the project's .gitignore names (isodate's generated version.py) are
    # part of the release all the same.
    git(repo, "add", "-f", "-A")
    git(repo, "commit", "-q", "-m", f"{project.dist} {project.release}, as released on PyPI")
    return git(repo, "rev-parse", "HEAD").strip()


def add_instance(repo: Path, clean: str, bug: Bug, version: str) -> dict[str, str]:
    """Commit ``bug`` on top of ``clean``; its SWE-bench row."""
    git(repo, "checkout", "-q", "--detach", clean)
    fixed_source = (repo / bug.source).read_text(encoding="utf-8")
    fixed_test = (repo / bug.test_file).read_text(encoding="utf-8")
    broken = replaced(fixed_source, bug.fixed, bug.broken, bug.source)
    (repo / bug.source).write_text(broken, encoding="utf-8")
    base_test = without_test(fixed_test, bug.test_name, bug.test_file)
    (repo / bug.test_file).write_text(base_test, encoding="utf-8")
    git(repo, "commit", "-q", "-am", f"{bug.instance_id}: before the fix")
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "branch", "-q", "-f", bug.instance_id, base)
    return {
        "instance_id": bug.instance_id,
        "repo": bug.repo,
        "base_commit": base,
        "patch": diff_after(repo, base, {bug.source: fixed_source}),
        "test_patch": diff_after(repo, base, {bug.test_file: fixed_test}),
        "problem_statement": bug.problem,
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": version,
        "environment_setup_commit": clean,
        "FAIL_TO_PASS": json.dumps(list(bug.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(bug.pass_to_pass)),
    }


def specs() -> dict[str, dict[str, dict[str, Any]]]:
    found = {project.repo: {project.version: project.spec()} for project in PROJECTS}
    _, of, version = BROKEN
    repo = next(bug.repo for bug in BUGS if bug.instance_id == of)
    found[repo][version] = PROJECT[repo].spec(pip_packages=())
    return found


def build(out: Path, cache: Path | None = None) -> dict[str, Path]:
    """Write the dataset into ``out`` (replaced); the paths of what it wrote."""
    archives = {project.repo: sdist(project, cache or cache_dir()) for project in PROJECTS}
    if out.exists():
        shutil.rmtree(out)
    rows: dict[str, dict[str, str]] = {}
    for project in PROJECTS:
        repo = out / "repos" / project.dirname
        clean = make_repo(project, archives[project.repo], repo)
        for bug in BUGS:
            if bug.repo == project.repo:
                rows[bug.instance_id] = add_instance(repo, clean, bug, project.version)
        git(repo, "checkout", "-q", "main")
    broken_id, of, version = BROKEN
    broken = {**rows[of], "instance_id": broken_id, "version": version}
    paths = {
        "repos": out / "repos",
        "instances": out / "instances.jsonl",
        "broken": out / "instances-broken.jsonl",
        "specs": out / "specs.yaml",
    }
    _write_rows(paths["instances"], [rows[bug.instance_id] for bug in BUGS])
    _write_rows(paths["broken"], [broken])
    paths["specs"].write_text(yaml.safe_dump(specs(), sort_keys=True), encoding="utf-8")
    return paths


def _write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--cache",
        type=Path,
        help=f"where the sdists are kept (default: ${CACHE_ENV}, else {DEFAULT_CACHE})",
    )
    args = parser.parse_args()
    paths = build(args.out, args.cache)
    print(
        f"wrote {args.out}: {len(BUGS)} instances over {len(PROJECTS)} projects, "
        f"1 broken instance, repositories in {paths['repos']}"
    )


if __name__ == "__main__":
    main()
