"""The grading policy (``runner.grading.patch_policy``): examples of each rule and properties.

Sections are built directly as ``FileDiff`` values; Hypothesis draws fixtures,
hidden files and changes over a small alphabet of names that hit every rule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.gitpatch import FileDiff
from runner.grading.patch_policy import (
    Ground,
    path_rule,
    screen,
    screen_files,
    shadows,
)

MODULES = frozenset({"json", "os", "pytest", "_pytest", "pluggy", "typing", "test", "six"})
FIXTURE = frozenset(
    {
        "calc/__init__.py",
        "calc/core.py",
        "calc/json.py",  # a submodule named like the standard library: the project's own
        "tests/__init__.py",
        "tests/test_visible.py",
        "tests/conftest.py",
        "src/six.py",  # vendored, shadows an installed module already: the project's own
        "pyproject.toml",
        "setup.cfg",
        "README.md",
    }
)
HIDDEN = frozenset({"tests/test_hidden.py"})
GROUND = Ground(FIXTURE, HIDDEN, MODULES, forbidden=(".git/",))


def add(path: str, mode: str = "100644") -> FileDiff:
    return FileDiff(0, 0, None, path, None, mode)


def change(path: str) -> FileDiff:
    return FileDiff(0, 0, path, path, "100644", "100644")


def delete(path: str) -> FileDiff:
    return FileDiff(0, 0, path, None, "100644", None)


def rules(*files: FileDiff, ground: Ground = GROUND) -> dict[str, tuple[str, bool]]:
    return {d.path: (d.rule, d.violation) for _, d in screen_files(list(files), ground)}


@pytest.mark.parametrize(
    ("section", "rule"),
    [
        (add("conftest.py"), "harness file beside the hidden tests"),
        (change("tests/conftest.py"), "harness file beside the hidden tests"),
        (change("tests/__init__.py"), "harness file beside the hidden tests"),
        (
            add("tests/__init__.cpython-311-x86_64-linux-gnu.so"),
            "harness file beside the hidden tests",
        ),
        (add("tests/__init__.pyw"), "harness file beside the hidden tests"),
        (add("lib/conftest.py"), "test runner configuration"),
        (add("pytest.ini"), "test runner configuration"),
        (add("tox.ini"), "test runner configuration"),
        (add("calc/.pytest.ini"), "test runner configuration"),
        (add("evil-1.0.dist-info/entry_points.txt"), "package metadata or import hook"),
        (add("src/x.egg-info/PKG-INFO"), "package metadata or import hook"),
        (add("hook.pth"), "package metadata or import hook"),
        (add("calc/__pycache__/core.cpython-311.pyc"), "bytecode"),
        (add("calc/core.pyc"), "bytecode"),
        (add(".git/config"), "forbidden path"),
        (add("json.py"), "shadow of module 'json' at json"),
        (add("pytest/__init__.py"), "shadow of module 'pytest' at pytest"),
        (add("_pytest.cpython-311-x86_64-linux-gnu.so"), "shadow of module '_pytest' at _pytest"),
        (add("sitecustomize.py"), "shadow of module 'sitecustomize' at sitecustomize"),
        (add("typing", "120000"), "shadow of module 'typing' at typing"),
        (add("scripts/os.py"), "shadow of module 'os' at scripts/os"),
        (add("src/json/__init__.py"), "shadow of module 'json' at src/json"),
    ],
)
def test_each_rule_drops_and_counts(section: FileDiff, rule: str) -> None:
    assert rules(section) == {section.new_path or section.old_path: (rule, True)}


def test_a_hidden_test_path_is_dropped_without_a_violation() -> None:
    assert rules(add("tests/test_hidden.py")) == {
        "tests/test_hidden.py": ("hidden test path", False)
    }
    assert rules(add("tests/test_hidden.py/x"))["tests/test_hidden.py/x"][1] is False


@pytest.mark.parametrize(
    "section",
    [
        change("calc/core.py"),
        change("calc/json.py"),  # inside a package: not a top-level module
        add("calc/typing.py"),
        add("calc/sub/__init__.py"),
        change("src/six.py"),  # the fixture's own module
        change("pyproject.toml"),  # runner settings come from the pristine copy
        change("setup.cfg"),
        add("tests/test_new.py"),
        add("docs/index.md"),
        delete("README.md"),
        add("calc/data.json"),
    ],
)
def test_ordinary_changes_pass_whole(section: FileDiff) -> None:
    assert rules(section) == {}


def test_deleting_an_init_that_exposes_a_module_is_dropped() -> None:
    # Without calc/__init__.py, calc/ becomes an import root and calc/json.py shadows json.
    dropped = rules(delete("calc/__init__.py"))
    assert dropped == {"calc/__init__.py": ("shadow of module 'json' at calc/json", True)}


def test_a_new_package_is_dropped_with_every_file_in_it() -> None:
    dropped = rules(add("os/__init__.py"), add("os/path.py"), change("calc/core.py"))
    assert set(dropped) == {"os/__init__.py", "os/path.py"}


def test_user_patterns_still_apply() -> None:
    ground = Ground(FIXTURE, HIDDEN, MODULES, patterns=("*.cfg",))
    assert rules(change("setup.cfg"), ground=ground) == {"setup.cfg": ("tools.grading_paths", True)}


# --- properties ---------------------------------------------------------------------------

NAMES = st.sampled_from(
    [
        "calc/core.py",
        "calc/__init__.py",
        "calc/json.py",
        "json.py",
        "os/__init__.py",
        "os/path.py",
        "tests/__init__.py",
        "tests/conftest.py",
        "tests/test_hidden.py",
        "tests/helper.py",
        "conftest.py",
        "pytest.ini",
        "lib/x.pth",
        "a.dist-info/RECORD",
        "calc/__pycache__/core.pyc",
        "src/six.py",
        "src/typing/__init__.py",
        "src/__init__.py",
        "README.md",
        "scripts/run.py",
        "sitecustomize.py",
    ]
)


@st.composite
def sections(draw: st.DrawFn) -> list[FileDiff]:
    paths = draw(st.lists(NAMES, unique=True, max_size=8))
    out: list[FileDiff] = []
    for path in paths:
        kind = draw(st.sampled_from(["add", "change", "delete", "link"]))
        if kind == "delete" and path in FIXTURE:
            out.append(delete(path))
        elif kind == "link":
            out.append(add(path, "120000"))
        elif path in FIXTURE:
            out.append(change(path))
        else:
            out.append(add(path))
    return out


@settings(max_examples=300, deadline=None)
@given(files=sections())
def test_dropped_paths_are_touched_and_what_is_kept_is_clean(files: list[FileDiff]) -> None:
    dropped = screen_files(files, GROUND)
    touched = {p for f in files for p in f.paths}
    assert {d.path for _, d in dropped} <= touched  # never flags a path the patch does not touch
    gone = {id(f) for f, _ in dropped}
    kept = [f for f in files if id(f) not in gone]
    # What is kept passes the policy untouched (a fixed point) ...
    assert screen_files(kept, GROUND) == []
    # ... leaves no new shadow, no runner file, bytecode or metadata, no hidden path touched.
    assert shadows(FIXTURE, kept, MODULES) <= shadows(FIXTURE, [], MODULES)
    for f in kept:
        for path in f.paths:
            assert path_rule(path) is None
            assert path not in HIDDEN and not path.startswith("tests/__init__")


@settings(max_examples=200, deadline=None)
@given(files=sections())
def test_the_policy_does_not_depend_on_section_order(files: list[FileDiff]) -> None:
    forward = {(d.path, d.rule) for _, d in screen_files(files, GROUND)}
    backward = {(d.path, d.rule) for _, d in screen_files(list(reversed(files)), GROUND)}
    assert {p for p, _ in forward} == {p for p, _ in backward}


def test_screen_reads_a_real_git_diff(tmp_path: Path) -> None:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(tmp_path)}

    def git(*args: str) -> bytes:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=True,
        ).stdout

    (tmp_path / "calc").mkdir()
    (tmp_path / "calc" / "__init__.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / "calc" / "__init__.py").write_text("x = 2\n")
    (tmp_path / "conftest.py").write_text("evil\n")
    (tmp_path / "json.py").write_text("evil\n")
    git("add", "-A")
    patch = git("diff", "--cached", "--binary", "HEAD")
    screened = screen(patch, Ground(frozenset({"calc/__init__.py"}), frozenset(), MODULES))
    assert [d.path for d in screened.dropped] == ["conftest.py", "json.py"]
    assert screened.violation
    assert b"calc/__init__.py" in screened.patch and b"conftest" not in screened.patch


def test_the_directories_of_a_tree_are_every_ancestor_of_every_path() -> None:
    """``_directories`` (linear, stops at a directory seen) against the definition."""
    import random

    from runner.grading.patch_policy import _ancestors, _directories

    rng = random.Random(7)
    for _ in range(200):
        paths = {
            "/".join(rng.choice("abc") for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(0, 30))
        }
        assert _directories(paths) == {d for p in paths for d in _ancestors(p)} | {""}
