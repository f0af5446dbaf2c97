"""runner.grading.canaries: canaries written into the declared test files (pure).

What the test process can see of a canary is the file on disk and the plugin's
selection. These tests hold the planter to: the file still parses and keeps every line
it had, in order; each canary is a test of the file's own shape (a function, or a method
of the declared class, ``assert`` or ``self.assertEqual`` as the file does) whose outcome
is the one the harness expects; and the selection names a canary only where a declared
entry does not already cover it, sorted among the declared node ids.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.grading.canaries import Canary, plant

FUNCTIONS = (
    b'"""Tests of calc."""\n'
    b"from __future__ import annotations\n\n"
    b"import pytest\n\nfrom calc import add\n\n\n"
    b"def test_add():\n    assert add(1, 2) == 3\n\n\n"
    b"@pytest.mark.parametrize('a', [1, 2])\n"
    b"def test_add_twice(a):\n    assert add(a, a) == 2 * a\n"
)
UNITTEST = (
    b"import unittest\n\nfrom calc import add\n\n\n"
    b"class TestAdd(unittest.TestCase):\n"
    b'    """Adding."""\n\n'
    b"    def setUp(self):\n        self.base = 1\n\n"
    b"    def test_add_one(self):\n        self.assertEqual(add(self.base, 1), 2)\n"
)


def _run(source: bytes, canary: Canary) -> bool:
    """Does the canary fail when its file runs (imports and the project stubbed out)?"""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)]
    scope: dict[str, Any] = {"unittest": __import__("unittest"), "pytest": __import__("pytest")}
    exec(compile(tree, "<planted>", "exec"), scope)
    function: Callable[..., Any]
    if canary.owner:
        instance = scope[canary.owner]("run") if _is_case(scope[canary.owner]) else None
        function = getattr(instance or scope[canary.owner](), canary.name)
    else:
        function = scope[canary.name]
    try:
        function()
    except AssertionError:
        return True
    return False


def _is_case(cls: type) -> bool:
    import unittest

    return issubclass(cls, unittest.TestCase)


def _is_subsequence(original: list[bytes], planted: list[bytes]) -> bool:
    lines = iter(planted)
    return all(any(line == other for other in lines) for line in original)


def test_three_canaries_per_file_of_the_files_shape_with_their_expected_outcomes() -> None:
    found = plant(
        ["tests/test_a.py::test_add", "tests/test_b.py::TestAdd::test_add_one"],
        {"tests/test_a.py": FUNCTIONS, "tests/test_b.py": UNITTEST},
        random.Random(3),
    )
    assert sorted((c.file, c.fail) for c in found.canaries) == [
        ("tests/test_a.py", False),
        ("tests/test_a.py", True),
        ("tests/test_a.py", True),
        ("tests/test_b.py", False),
        ("tests/test_b.py", True),
        ("tests/test_b.py", True),
    ]
    for canary in found.canaries:
        source = found.files[canary.file]
        assert _run(source, canary) is canary.fail, canary
        assert canary.name.encode() not in (FUNCTIONS + UNITTEST)
    functions = [c for c in found.canaries if c.file == "tests/test_a.py"]
    methods = [c for c in found.canaries if c.file == "tests/test_b.py"]
    assert all(c.owner == "" for c in functions)
    assert all(c.owner == "TestAdd" for c in methods)
    assert b"self.assertEqual(" in found.files["tests/test_b.py"].split(b"def test_add_one")[0]
    # a must-fail canary is the last test of its place (the module, the class)
    for file in ("tests/test_a.py", "tests/test_b.py"):
        tree = ast.parse(found.files[file])
        body = (
            tree.body
            if file.endswith("a.py")
            else next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
        )
        last = [n.name for n in body if isinstance(n, ast.FunctionDef)][-1]
        assert any(c.name == last and c.fail for c in found.canaries), (file, last)
    # the future import and the docstring stay first
    assert found.files["tests/test_a.py"].startswith(FUNCTIONS[:60])


def test_the_selection_names_a_canary_only_where_no_declared_entry_covers_it() -> None:
    exact = plant(["tests/test_a.py::test_add"], {"tests/test_a.py": FUNCTIONS}, random.Random(1))
    assert set(exact.select) == {"tests/test_a.py::test_add", *(c.nodeid for c in exact.canaries)}
    assert list(exact.select) == sorted(exact.select)
    whole = plant(["tests/test_a.py"], {"tests/test_a.py": FUNCTIONS}, random.Random(1))
    assert whole.select == ("tests/test_a.py",)  # the file entry runs them: nothing said
    narrowed = plant(
        ["tests/test_a.py"], {"tests/test_a.py": FUNCTIONS}, random.Random(1), ["-k", "add"]
    )
    assert set(narrowed.select) > {"tests/test_a.py"}  # -k could drop them: named


def test_a_declared_directory_gets_canaries_in_its_test_modules_only() -> None:
    found = plant(
        ["tests"],
        {"tests/test_x.py": FUNCTIONS, "tests/helper.py": b"X = 1\n", "docs/test_y.py": FUNCTIONS},
        random.Random(1),
    )
    assert {c.file for c in found.canaries} == {"tests/test_x.py"}
    assert set(found.files) == {"tests/test_x.py"}


def test_the_rng_decides_names_and_places_not_the_input() -> None:
    one = plant(["t/test_a.py::test_add"], {"t/test_a.py": FUNCTIONS}, random.Random(1))
    two = plant(["t/test_a.py::test_add"], {"t/test_a.py": FUNCTIONS}, random.Random(2))
    assert one.canaries != two.canaries or one.files != two.files


def test_a_file_python_cannot_parse_gets_them_at_its_end() -> None:
    broken = b"def test_add(:\n    pass"
    found = plant(["t/test_a.py::test_add"], {"t/test_a.py": broken}, random.Random(1))
    assert found.files["t/test_a.py"].startswith(broken + b"\n")
    assert len(found.canaries) == 3


NAMES = st.sampled_from(["add", "parse", "dates", "total", "empty", "Case"])


@st.composite
def modules(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A test module: a docstring or not, imports, functions (some decorated), a class."""
    parts = [b'"""Doc."""\n'] if draw(st.booleans()) else []
    parts.append(b"import os\n\n\n")
    names: list[str] = []
    for i in range(draw(st.integers(1, 4))):
        name = f"test_{draw(NAMES).lower()}_{i}"
        names.append(name)
        if draw(st.booleans()):
            parts.append(b"@(lambda f: f)\n")
        parts.append(f"def {name}():\n    assert os.sep\n".encode())
        parts.append(b"\n" * draw(st.integers(0, 3)))
    if draw(st.booleans()):
        parts.append(b"class TestThing:\n    def test_m(self):\n        pass\n")
    if draw(st.booleans()):
        parts.append(b"X = 1; Y = 2\n")
    return b"".join(parts), names


@settings(max_examples=60, deadline=None)
@given(modules(), st.integers(0, 2**32), st.booleans())
def test_planting_keeps_the_file_and_its_lines_and_the_outcomes_hold(
    made: tuple[bytes, list[str]], seed: int, whole_file: bool
) -> None:
    source, names = made
    entries = ["t/test_p.py"] if whole_file else [f"t/test_p.py::{names[0]}"]
    found = plant(entries, {"t/test_p.py": source}, random.Random(seed))
    planted = found.files["t/test_p.py"]
    ast.parse(planted)
    assert _is_subsequence(source.splitlines(), planted.splitlines())
    for canary in found.canaries:
        assert _run(planted, canary) is canary.fail
        assert canary.name not in names


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32))
def test_under_unittest_a_must_fail_canary_runs_last_in_its_class(seed: int) -> None:
    """unittest's loader runs a class's tests in name order: with ``by_name`` one must-fail
    canary sorts after every test of its class, the declared ones and the other canaries."""
    zeta = UNITTEST + b"\n    def test_zeta(self):\n        self.assertTrue(True)\n"
    found = plant(
        ["tests/test_b.py::TestAdd::test_add_one"],
        {"tests/test_b.py": zeta},
        random.Random(seed),
        by_name=True,
    )
    tree = ast.parse(found.files["tests/test_b.py"])
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    names = sorted(
        n.name for n in cls.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    )
    last = next(c for c in found.canaries if c.name == names[-1])
    assert last.fail and last.owner == "TestAdd", names
    for canary in found.canaries:
        assert _run(found.files["tests/test_b.py"], canary) is canary.fail
