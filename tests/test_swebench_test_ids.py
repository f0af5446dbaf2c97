"""runner.swebench.test_ids: SWE-bench's ids, as its log parsers write them, into node ids
(pure), and the cut-at-a-space ids matched as SWE-bench matches them."""

from __future__ import annotations

import pytest

from runner.errors import UserError
from runner.swebench.test_ids import declare, node_ids
from runner.trees.declared import matches

DJANGO_FILE = "tests/admin_x/tests.py"
DJANGO_SOURCE = b'''from django.test import TestCase


class ThingTests(TestCase):
    def test_plain(self):
        pass

    def test_documented(self):
        """
        Regression for #1: the thing holds.

        More words.
        """

    def test_same_doc(self):
        """Shared first line."""


class OtherTests(TestCase):
    def test_same_doc(self):
        """Shared first line."""
'''


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ("test_plain (admin_x.tests.ThingTests)", [f"{DJANGO_FILE}::ThingTests::test_plain"]),
        (  # Python 3.11's unittest writes the method again
            "test_plain (admin_x.tests.ThingTests.test_plain)",
            [f"{DJANGO_FILE}::ThingTests::test_plain"],
        ),
        ("Regression for #1: the thing holds.", [f"{DJANGO_FILE}::ThingTests::test_documented"]),
        (
            "Shared first line.",
            [
                f"{DJANGO_FILE}::ThingTests::test_same_doc",
                f"{DJANGO_FILE}::OtherTests::test_same_doc",
            ],
        ),
        # a module of the test patch that is a package
        ("test_y (pkg_app.C)", ["tests/pkg_app/__init__.py::C::test_y"]),
        # already a node id
        (f"{DJANGO_FILE}::ThingTests::test_plain", [f"{DJANGO_FILE}::ThingTests::test_plain"]),
    ],
)
def test_django_ids(test: str, expected: list[str]) -> None:
    sources = {DJANGO_FILE: DJANGO_SOURCE, "tests/pkg_app/__init__.py": b"class C: pass\n"}
    assert node_ids("django", [test], sources, "w") == expected


def test_a_django_id_that_names_nothing_is_an_error_naming_it() -> None:
    with pytest.raises(UserError, match=r"w: 'No such docstring\.' is neither"):
        node_ids("django", ["No such docstring."], {DJANGO_FILE: DJANGO_SOURCE}, "w")


def test_sympy_bare_names_are_each_test_patch_file_defining_them() -> None:
    sources = {
        "sympy/a/tests/test_a.py": b"def test_rotate():\n    pass\n\ndef helper():\n    pass\n",
        "sympy/b/tests/test_b.py": b"def test_rotate():\n    pass\n",
    }
    assert node_ids("sympy", ["test_rotate"], sources, "w") == [
        "sympy/a/tests/test_a.py::test_rotate",
        "sympy/b/tests/test_b.py::test_rotate",
    ]
    with pytest.raises(UserError, match="'helper' is no test function"):
        node_ids("sympy", ["helper"], sources, "w")


def test_unittest_ids_are_relative_to_the_root() -> None:
    found = node_ids("unittest", ["test_x (pkg.tests.test_m.C)"], {}, "w")
    assert found == ["pkg/tests/test_m.py::C::test_x"]


def test_pytest_ids_must_be_pytest_ids() -> None:
    line: dict[str, object] = {}
    with pytest.raises(UserError, match=r"'test_x \(app\.tests\.T\)' is not a pytest test id"):
        declare(line, "pytest", (), [], ["test_x (app.tests.T)"], "i.jsonl: o__r-1")
    declare(line, "pytest", (), [], ["t/test_a.py::test_b[x y]"], "w")
    assert line == {"hidden_tests": ["t/test_a.py::test_b[x y]"]}


def test_an_id_cut_at_a_space_names_every_test_it_prefixes() -> None:
    """SWE-bench's parser reads ``test_b[a b]`` as ``test_b[a``: the cut id names the tests
    it prefixes, never more, and whole ids keep their exact rule."""
    cut = "t/test_a.py::test_b[a"
    assert matches("t/test_a.py::test_b[a b]", cut)
    assert matches("t/test_a.py::test_b[a c]", cut)
    assert not matches("t/test_a.py::test_b[b a]", cut)
    assert not matches("t/test_a.py::test_bc", "t/test_a.py::test_b")
    assert matches("t/test_a.py::test_b[x]", "t/test_a.py::test_b[x]")
    assert not matches("t/test_a.py::test_b[x]2", "t/test_a.py::test_b[x]")
