"""docs/architecture.md cannot drift from the code.

The package map: every module of runner/ is listed once, under its own package, on the
floor ``tests/test_layout.py`` gives it, and the table is what ``scripts/module_table.py``
writes (the fix, when it is not, is to run that script).

The path of one trial: each numbered step of the page starts with the function it is
about (``N. `runner.package.module.function```); each must be a function defined in that
module, and one real trial (Docker), run in-process through ``deltarun run`` under a
profiler that records every call of a ``runner`` function on every thread (trials run
on the local pool's threads), must call them in the page's order.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
import threading
from functools import cache
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

from tests.helpers import ADD_GOLD, make_suite, repo_task
from tests.test_layout import FLOORS, modules

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
STEP = re.compile(r"^(\d+)\. `(runner(?:\.\w+)+)`", re.M)
PATH_SECTION = "## The path of one trial"


@cache
def module_table() -> ModuleType:
    """scripts/module_table.py, loaded by its path."""
    spec = importlib.util.spec_from_file_location(
        "module_table", ROOT / "scripts" / "module_table.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["module_table"] = script  # dataclasses look their module up
    spec.loader.exec_module(script)
    return script


# --- the package map ------------------------------------------------------------------


def test_the_package_map_is_what_the_script_writes() -> None:
    script = module_table()
    page = PAGE.read_text(encoding="utf-8")
    written = script.generate(page)
    listed = {path for _, path, _ in script.parse(script.table_of(page))}
    wanted = {path for _, path, _ in script.parse(script.table_of(written))}
    if written != page:
        pytest.fail(
            f"docs/architecture.md's package map is not the tree's (to add: "
            f"{sorted(wanted - listed)}; to drop: {sorted(listed - wanted)}; else rows out "
            f"of order or floors moved): run `{script.COMMAND}` and read the rows it writes"
        )


def dotted(path: str) -> str:
    """``runner/a/b.py`` → ``runner.a.b``; ``runner/a/`` and ``runner/__init__.py`` → the
    package."""
    parts = path.rstrip("/").removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_package_map_lists_every_module_once_in_its_package() -> None:
    """Read independently of the script: the rows name each module of the tree once, each
    module row sits under its own package's row, and the floors are FLOORS'."""
    rows = module_table().parse(module_table().table_of(PAGE.read_text(encoding="utf-8")))
    names = [dotted(path) for _, path, _ in rows]
    assert sorted(names) == sorted(modules()), "every module of runner/ once, no other"
    package = None
    misplaced = []
    for _, path, _ in rows:
        if path.endswith("/"):
            package = path
        elif path.count("/") > 1 and (package is None or path.rpartition("/")[0] + "/" != package):
            misplaced.append(f"{path} under {package}")
    assert misplaced == []
    floors = {path: floor for floor, path, _ in rows if floor}
    expected = {
        f"runner/{name}/" if (ROOT / "runner" / name).is_dir() else f"runner/{name}.py": str(n)
        for n, names_on in enumerate(FLOORS, start=1)
        for name in names_on
    }
    expected["runner/__init__.py"] = "—"
    assert floors == expected, "the map's floors are tests/test_layout.py's FLOORS"
    descriptions = [path for _, path, text in rows if not text or text.startswith("TODO")]
    assert descriptions == [], "write one line on what each of these holds"


def test_the_script_seeds_a_new_module_and_drops_a_gone_one() -> None:
    script = module_table()
    page = PAGE.read_text(encoding="utf-8")
    rows = script.parse(script.table_of(page))
    gone = "| 99 | `runner/no_such_module.py` | kept nowhere |\n"
    edited = page.replace(f"| `{rows[1][1]}` | {rows[1][2]} |", f"| `{rows[1][1]}` |  |")
    edited = edited.replace(script.END, gone + script.END)
    regenerated = script.generate(edited)
    assert "no_such_module" not in regenerated
    seeded = dict((path, text) for _, path, text in script.parse(script.table_of(regenerated)))
    assert seeded[rows[1][1]] == script.docstring_seed(ROOT / rows[1][1])
    assert script.generate(regenerated) == regenerated


# --- the path of one trial ------------------------------------------------------------


def steps() -> list[tuple[int, str]]:
    """The numbered steps of the path of one trial: (number, the function it names)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(PATH_SECTION, 1)[1].split("\n## ", 1)[0]
    return [(int(number), name) for number, name in STEP.findall(section)]


def resolve(name: str) -> tuple[str, str, Any]:
    """``runner.a.b.C.f`` → (``runner.a.b``, ``C.f``, the function): the longest prefix
    that imports is the module, the rest attributes of it."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        found: Any = module
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
        return module.__name__, ".".join(parts[cut:]), found
    raise AssertionError(f"{name}: no module of it imports")


def test_each_step_names_a_function_defined_where_the_page_says() -> None:
    found = steps()
    assert len(found) >= 10, f"the steps are numbered `N. `runner.x.f`` lines in {PAGE.name}"
    assert [number for number, _ in found] == list(range(1, len(found) + 1))
    wrong = []
    for number, name in found:
        module, qualname, function = resolve(name)
        function = inspect.unwrap(function) if callable(function) else function
        code = getattr(function, "__code__", None)
        if code is None:
            wrong.append(f"step {number}: {name} is no function")
        elif (function.__module__, code.co_qualname) != (module, qualname):
            where = f"{function.__module__}.{code.co_qualname}"
            wrong.append(f"step {number}: {name} is defined as {where}")
    assert wrong == []


class Calls:
    """Every call of a function of ``runner`` as (module, qualified name), in order, on
    every thread started while recording (and this one)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("runner."):
                self.seen.append((module, frame.f_code.co_qualname))

    def __enter__(self) -> Calls:
        self.before = sys.getprofile(), threading.getprofile()
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self.before[0])
        threading.setprofile(self.before[1])


def out_of_order(
    calls: list[tuple[str, str]], wanted: list[tuple[int, str, str, str]]
) -> str | None:
    """None when the wanted calls occur in ``calls`` in that order (each the first call of
    its function after the previous step's); else what went wrong."""
    at, previous = 0, ""
    for number, name, module, qualname in wanted:
        try:
            at = calls.index((module, qualname), at) + 1
        except ValueError:
            before = f" after step {number - 1} `{previous}`" if previous else ""
            called = (module, qualname) in calls
            return f"step {number} `{name}` was not called{before}" + (
                " (it was called, earlier)" if called else " at all in the run"
            )
        previous = name
    return None


def test_out_of_order_names_the_step() -> None:
    calls = [("m", "a"), ("m", "c"), ("m", "b")]
    assert out_of_order(calls, [(1, "m.a", "m", "a"), (2, "m.b", "m", "b")]) is None
    problem = out_of_order(calls, [(1, "m.b", "m", "b"), (2, "m.c", "m", "c")])
    assert problem == "step 2 `m.c` was not called after step 1 `m.b` (it was called, earlier)"
    assert "not called at all" in str(out_of_order(calls, [(1, "m.z", "m", "z")]))


@pytest.mark.docker
def test_one_trial_takes_the_path_the_page_tells(tmp_path: Path, docker_api: Any) -> None:
    """One task, a control arm (``noop``) and a candidate replaying the gold patch, one
    trial at a time: the page's steps follow the candidate's trial (its agent step is
    ``Replay.run``), and every step is a call the run makes, in the page's order."""
    from typer.testing import CliRunner

    from runner.cli import app

    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t0.diff").write_text(ADD_GOLD)
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
    ]
    controls = make_suite(tmp_path, [repo_task("t0")], arms)
    out = tmp_path / "run"
    wanted = [(number, name, *resolve(name)[:2]) for number, name in steps()]
    with Calls() as calls:
        result = CliRunner().invoke(app, ["run", str(controls), "--out", str(out), "-j", "1"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2
    assert (out / "report.md").is_file()
    problem = out_of_order(calls.seen, wanted)
    assert problem is None, f"{problem}: make docs/architecture.md's steps say what runs"
