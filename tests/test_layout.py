"""The package layout holds: imports only go down the floors, no module circle, no module
over 500 lines, no function over 60 lines without its reason in the docstring.

Every ``import`` counts, at module level, inside functions and under ``TYPE_CHECKING``:
a circle through a function-level import is still a circle a reader has to untangle.
``docs/architecture.md`` draws the same floors.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "runner"

# Bottom first. A module may import its own package's modules (no circle) and anything on
# a lower floor; never a higher floor. Names are top-level modules or packages of runner.
FLOORS: list[set[str]] = [
    {
        "errors",
        "sizes",
        "atomic",
        "hashing",
        "bounded_json",
        "setup_signals",
        "gateway",
        "pyparse",
        "tar_headers",
    },
    {"telemetry", "bounded_input", "paths"},
    {"records"},
    {"evidence", "gitpatch"},
    {"trees"},
    {"config"},
    {"store"},
    {"report"},
    {"view"},
    {"sandbox", "sandbox_scripts"},
    {"suite"},
    {"grading"},
    {"agents"},
    {"trial"},
    {"executors"},
    {"distributed"},
    {"run"},
    {"export", "swebench", "seedkits"},
    {"cli"},
]
FLOOR = {name: number for number, names in enumerate(FLOORS) for name in names}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
LONG_REASON = "Longer than"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(RUNNER.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The runner modules ``name`` imports (``from runner.x import y`` is ``runner.x.y``
    when that is a module, else ``runner.x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "runner")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "runner":
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield full if full in known else target


def floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {m for m in imports(name, path, known) if m in known and m != name}
        for name, path in known.items()
    }


def test_every_top_level_module_and_package_has_a_floor() -> None:
    tops = {floor_of(name) for name in modules()} - {""}
    assert tops - FLOOR.keys() == set(), "add the new module or package to FLOORS"


# The reading half: the report and the viewer read a run directory through ``store`` and
# score it with ``evidence``; they never start a sandbox, an agent or a run.
READERS = {"report", "view"}
READERS_MAY_IMPORT = FLOORS[0] | FLOORS[1] | {"records", "evidence", "config", "store"} | READERS


def test_report_and_view_read_only_the_store() -> None:
    reaching = sorted(
        f"{a} -> {b}"
        for a, targets in graph().items()
        if floor_of(a) in READERS
        for b in targets
        if floor_of(b) not in READERS_MAY_IMPORT
    )
    assert reaching == []


def test_imports_only_go_down() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in graph().items()
        for b in targets
        if floor_of(b)
        and floor_of(a)
        and floor_of(a) != floor_of(b)
        and FLOOR[floor_of(b)] >= FLOOR[floor_of(a)]
    ]
    assert upward == []


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    assert circles(graph()) == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_size(name: str) -> None:
    lines = modules()[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines; split it by concept"


def test_long_functions_say_why() -> None:
    unexplained = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if length > MAX_FUNCTION_LINES and LONG_REASON not in doc:
                unexplained.append(f"{name}.{node.name}: {length} lines")
    assert unexplained == []


def test_no_two_modules_share_a_file_name() -> None:
    """A traceback or a search names a file, not its package: two ``checks.py`` or two
    ``model.py`` would be confused there (packages' ``__init__.py`` aside)."""
    by_name: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(name)
    assert {name: found for name, found in by_name.items() if len(found) > 1} == {}
