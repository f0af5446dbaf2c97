"""The grading policy and the test files the harness owns: hidden and declared tests.

Two properties of ``runner.grading.patch_policy``: nothing a patch adds takes the import
name of a hidden or declared test module or of a package on its path, wherever it
is put; and a fixture file that holds declared tests (SWE-bench's PASS_TO_PASS) is
the harness's, so a change to it is dropped and counted.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.gitpatch import FileDiff
from runner.grading.patch_policy import Ground, screen_files
from runner.trees.declared import holds_declared

MODULES = frozenset({"json", "os", "pytest"})
# tests/ is an import root (no __init__.py); tests/pkg is a package inside it.
FIXTURE = frozenset(
    {
        "calc/__init__.py",
        "calc/core.py",
        "tests/test_other.py",
        "tests/pkg/__init__.py",
        "tests/pkg/test_old.py",
        "tests/data/input.txt",
        "src/README.md",
        "README.md",
    }
)
HIDDEN = frozenset({"tests/test_hidden.py", "tests/pkg/test_deep.py"})
DECLARED = (
    "tests/test_hidden.py::test_add",
    "tests/test_other.py::TestSub::test_sub[1]",
    "tests/pkg",
)
GROUND = Ground(FIXTURE, HIDDEN, MODULES, declared=DECLARED)


def add(path: str, mode: str = "100644") -> FileDiff:
    return FileDiff(0, 0, None, path, None, mode)


def change(path: str) -> FileDiff:
    return FileDiff(0, 0, path, path, "100644", "100644")


def dropped(*files: FileDiff, ground: Ground = GROUND) -> dict[str, tuple[str, bool]]:
    return {d.path: (d.rule, d.violation) for _, d in screen_files(list(files), ground)}


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_hidden/__init__.py",  # a package beside the hidden module
        "tests/test_hidden.cpython-311-x86_64-linux-gnu.so",  # an extension module beside it
        "test_hidden.py",  # the same import name at the repository root
        "src/test_hidden.py",  # ... or in any other import root
        "tests/pkg/test_deep/__init__.py",  # inside the package on a hidden module's path
        "pkg.py",  # the top-level name of tests/pkg/test_deep.py (pkg.test_deep)
        "tests/test_other/__init__.py",  # a declared fixture module's name
    ],
)
def test_nothing_takes_a_test_modules_import_name(path: str) -> None:
    rule, violation = dropped(add(path))[path]
    assert rule.startswith("shadow of module") and violation


def test_a_symlink_named_like_a_test_module_is_dropped() -> None:
    path = "tests/test_hidden"
    assert dropped(add(path, mode="120000"))[path][0].startswith("shadow of module")


@pytest.mark.parametrize(
    "section",
    [
        add("tests/test_hidden_data/input.txt"),  # a folder that is no package
        add("tests/test_hidden_helpers.py"),
        add("calc/test_hidden.py"),  # inside a package: never an import root
        change("calc/core.py"),
        add("tests/data/more.txt"),
    ],
)
def test_honest_neighbours_pass(section: FileDiff) -> None:
    assert dropped(section) == {}


@pytest.mark.parametrize(
    "section",
    [
        change("tests/test_other.py"),  # a declared test the fixture holds
        FileDiff(0, 0, "tests/test_other.py", None, "100644", None),  # deleted
        change("tests/pkg/test_old.py"),  # a test module under a declared directory
        add("tests/pkg/test_new.py"),  # a new one there would join the declared tests
    ],
)
def test_declared_test_files_are_the_harness(section: FileDiff) -> None:
    path = section.new_path or section.old_path or ""
    rule, violation = dropped(section)[path]
    assert rule.startswith("declared test file") and violation


def test_an_init_beside_declared_tests_is_the_harness() -> None:
    rule, violation = dropped(change("tests/pkg/__init__.py"))["tests/pkg/__init__.py"]
    assert "harness file beside" in rule and violation


def test_without_declared_tests_the_fixture_tests_are_the_agents() -> None:
    ground = Ground(FIXTURE, HIDDEN, MODULES)
    assert dropped(change("tests/test_other.py"), ground=ground) == {}


NAMES = st.sampled_from(["test_hidden", "test_deep", "pkg", "test_other", "calc", "util"])
DIRS = st.sampled_from(["", "tests", "tests/pkg", "src", "calc", "tests/data"])
FORMS = st.sampled_from([".py", "/__init__.py", ".cpython-311-x86_64-linux-gnu.so", ".pyc"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(DIRS, NAMES, FORMS), min_size=1, max_size=4))
def test_what_is_kept_never_takes_a_protected_name(adds: list[tuple[str, str, str]]) -> None:
    """Property: after screening, no kept module is importable under a protected test
    module's name where Python would look for it first."""
    sections = [add(f"{d}/{n}{form}" if d else f"{n}{form}") for d, n, form in adds]
    gone = {id(f) for f, _ in screen_files(sections, GROUND)}
    kept = [f.new_path for f in sections if id(f) not in gone]
    roots = {"", "tests", "src", "tests/data"}  # directories without __init__.py
    for path in kept:
        assert path is not None
        parent, _, entry = path.rpartition("/")
        name = (
            entry.split(".", 1)[0]
            if not entry.startswith("__init__")
            else parent.rsplit("/", 1)[-1]
        )
        where = parent if not entry.startswith("__init__") else parent.rpartition("/")[0]
        if where in roots:
            assert name not in {"test_hidden", "test_other", "pkg"}, path
        if where == "tests/pkg":
            assert name not in {"test_deep", "test_old"}, path


def test_holds_declared() -> None:
    assert holds_declared("tests/test_other.py", DECLARED)
    assert holds_declared("tests/pkg/sub/test_x.py", DECLARED)
    assert holds_declared("tests/pkg/x_test.py", DECLARED)
    assert not holds_declared("tests/pkg/helper.py", DECLARED)
    assert not holds_declared("tests/test_otherwise.py", DECLARED)
