"""SWE-bench's test ids, as its log parsers write them, into deltarun's node ids. Pure.

deltarun declares every runner's tests as node ids (``runner.grading.runners``):
``tests/app/tests.py::Class::test_x`` or ``sympy/core/tests/test_x.py::test_y``. SWE-bench
writes what each runner's log shows, and each becomes node ids so:

- pytest: ``tests/test_x.py::test_y[a b]`` stays as it is; one SWE-bench's parser cut at
  a space (``tests/test_x.py::test_y[a``) names every test it prefixes
  (``runner.trees.declared.cut_at_space``);
- django: ``test_x (app.tests.Class)`` (Python 3.11 writes ``(app.tests.Class.test_x)``)
  is ``tests/app/tests.py::Class::test_x``; a docstring's first line, which Django's
  verbose log prints in place of the id, is every test method of the test patch's files
  whose docstring starts with that line;
- sympy: ``test_rotate`` is ``<file>::test_rotate`` for each test patch file defining it;
- unittest: ``test_x (pkg.test_mod.Class)`` is ``pkg/test_mod.py::Class::test_x``.

The test patch's files are the ones SWE-bench runs (its test directives), so they are
where every id is looked for. An id that names nothing there is an error naming it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from runner.errors import UserError
from runner.grading.runners import DJANGO_TOP
from runner.pyparse import LOCK
from runner.swebench.instances import check_pytest_ids
from runner.trees.archives import Member

_UNITTEST_ID = re.compile(r"\A(?P<method>[A-Za-z_]\w*) \((?P<dotted>[A-Za-z_][\w.]*)\)\Z")


def node_ids(
    runner: str, ids: Sequence[str], sources: Mapping[str, bytes], where: str
) -> list[str]:
    """``ids`` (FAIL_TO_PASS + PASS_TO_PASS) as node ids, in order, each once; ``sources``
    maps the test patch's files (repository-relative) to their text after the patch."""
    if runner == "pytest":
        return list(dict.fromkeys(ids))
    found: dict[str, None] = {}
    for test in ids:
        if "::" in test and test.split("::", 1)[0].endswith(".py"):
            found.setdefault(test)  # already a node id
            continue
        for nodeid in _resolve(runner, test, sources, where):
            found.setdefault(nodeid)
    return list(found)


def _resolve(runner: str, test: str, sources: Mapping[str, bytes], where: str) -> list[str]:
    if runner == "sympy":
        named = [f"{path}::{test}" for path in sorted(sources) if test in _functions(sources[path])]
        if not named:
            raise UserError(
                f"{where}: {test!r} is no test function of the test patch's files "
                f"({', '.join(sorted(sources)) or 'none'})"
            )
        return named
    top = DJANGO_TOP if runner == "django" else ""
    match = _UNITTEST_ID.match(test)
    if match is not None:
        method, dotted = match.group("method"), match.group("dotted")
        if dotted.endswith("." + method):  # Python 3.11's form: (module.Class.method)
            dotted = dotted[: -len(method) - 1]
        module, _, cls = dotted.rpartition(".")
        if module and cls:
            return [f"{_file_of(module, top, sources)}::{cls}::{method}"]
    named = _by_docstring(test, sources)
    if not named:
        raise UserError(
            f"{where}: {test!r} is neither 'test_x (module.Class)' nor the first line of a "
            "test's docstring in the test patch's files"
        )
    return named


def _file_of(module: str, top: str, sources: Mapping[str, bytes]) -> str:
    """The file a dotted module name stands for: a module or a package's ``__init__.py``."""
    base = "/".join([*([top] if top else []), *module.split(".")])
    if f"{base}.py" not in sources and f"{base}/__init__.py" in sources:
        return f"{base}/__init__.py"
    return f"{base}.py"


def _parse(data: bytes) -> ast.Module | None:
    try:
        with LOCK:  # one parse at a time (runner.pyparse)
            return ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _functions(data: bytes) -> set[str]:
    """The module-level ``test_*`` functions of a file (what sympy's runner collects)."""
    tree = _parse(data)
    if tree is None:
        return set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return {n.name for n in tree.body if isinstance(n, kinds) and n.name.startswith("test")}


def _by_docstring(line: str, sources: Mapping[str, bytes]) -> list[str]:
    """Every test method whose docstring's first line is ``line`` (unittest's
    ``shortDescription``, which its verbose log prints in place of the id)."""
    found: list[str] = []
    for path in sorted(sources):
        if not path.endswith(".py"):
            continue
        tree = _parse(sources[path])
        if tree is None:
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(item, clean=False)
                if item.name.startswith("test") and doc and _first_line(doc) == line.strip():
                    found.append(f"{path}::{node.name}::{item.name}")
    return found


def _first_line(doc: str) -> str:
    return doc.strip().split("\n")[0].strip()


def declare(
    line: dict[str, Any],
    runner: str,
    args: Sequence[str],
    hidden: Sequence[Member],
    tests: Sequence[str],
    where: str,
) -> None:
    """Set a task line's declared tests, runner and runner options from an instance's ids
    and its hidden members (``runner.trees.archives.Member``: the test patch's files)."""
    sources = {m.path: m.data for m in hidden if not m.is_dir and m.path.endswith(".py")}
    if runner == "pytest":
        check_pytest_ids(tuple(tests), where)
    line["hidden_tests"] = node_ids(runner, tests, sources, where)
    if runner != "pytest":
        line["test_runner"] = runner
        if args:
            line["runner_args"] = list(args)
