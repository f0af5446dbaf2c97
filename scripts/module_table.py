"""Rewrite the package map of docs/architecture.md from the tree: one row per package (with
its floor from ``tests/test_layout.py``'s FLOORS) and one row per module under it.

The list of modules and the floors come from the tree; the one-line descriptions are the
page's own, kept as written. A module new to the table gets the first sentence of its
docstring (edit it in the page if it reads badly); a row for a module that is gone is
dropped. ``tests/test_architecture_doc.py`` fails while the page differs from what this
writes, so a split or a rename is: run this, read the new rows, commit.

    .venv/bin/python scripts/module_table.py           # rewrite the table in place
    .venv/bin/python scripts/module_table.py --check   # exit 1 when it would change
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "runner"
PAGE = ROOT / "docs" / "architecture.md"
START = (
    "<!-- module-table:start (scripts/module_table.py writes the rows; edit descriptions only) -->"
)
END = "<!-- module-table:end -->"
HEADER = "| floor | package or module | what it holds |\n|---|---|---|"
ROW = re.compile(r"^\|\s*([^|]*?)\s*\|\s*(?:\*\*)?`([^`]+)`(?:\*\*)?\s*\|\s*(.*?)\s*\|\s*$")
SENTENCE_END = re.compile(r"(?<=[.;])\s")
COMMAND = ".venv/bin/python scripts/module_table.py"
LONG = 140  # characters of a seeded description before it is cut at its colon


def floors() -> list[set[str]]:
    """``FLOORS`` of tests/test_layout.py, bottom first (loaded by path: tests is no
    package this script may import)."""
    spec = importlib.util.spec_from_file_location("_layout", ROOT / "tests" / "test_layout.py")
    assert spec is not None and spec.loader is not None
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    return list(layout.FLOORS)


@dataclass(frozen=True)
class Row:
    """One row: a package (``runner/x/``, with its floor when it is a floor's entry) or a
    module (``runner/x/y.py``)."""

    path: str
    floor: str  # "" for a module or a sub-package; "—" for runner/ itself
    seed: str  # the docstring's first sentence, for a row the page has no line for

    @property
    def package(self) -> bool:
        return self.path.endswith("/")


def docstring_seed(path: Path) -> str:
    """The first sentence of a module's docstring, on one line, its final period dropped."""
    text = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(text.strip().split("\n\n")[0].split())
    first = SENTENCE_END.split(first, maxsplit=1)[0].rstrip(".;")
    if len(first) > LONG and ": " in first:  # a long sentence: what comes before its colon
        first = first.split(": ", 1)[0]
    while first.count("(") > first.count(")"):  # a sentence cut inside parentheses
        first = first[: first.rfind("(")].rstrip(" ,")
    first = first.replace("``", "`").replace("|", "\\|")
    return first or "TODO: one line on what this module holds"


def _package_rows(directory: Path, floor: str) -> list[Row]:
    """A package's row, its modules' rows (``__init__.py`` is the package's own row), then
    each sub-package the same way."""
    init = directory / "__init__.py"
    relative = directory.relative_to(ROOT).as_posix() + "/"
    rows = [Row(relative, floor, docstring_seed(init) if init.exists() else "")]
    children = sorted(p for p in directory.iterdir() if p.suffix == ".py")
    rows += [
        Row(p.relative_to(ROOT).as_posix(), "", docstring_seed(p))
        for p in children
        if p.name != "__init__.py"
    ]
    for sub in sorted(p for p in directory.iterdir() if (p / "__init__.py").exists()):
        rows += _package_rows(sub, "")
    return rows


def tree_rows(floor_sets: list[set[str]] | None = None) -> list[Row]:
    """Every module of runner/, top floor first; within a floor, by name. A FLOORS name
    that is a single module is its own row with the floor; a package is followed by its
    modules and sub-packages. ``runner/__init__.py`` comes last, floor "—"."""
    floor_sets = floors() if floor_sets is None else floor_sets
    rows: list[Row] = []
    for number in range(len(floor_sets), 0, -1):
        for name in sorted(floor_sets[number - 1]):
            package = RUNNER / name
            if (package / "__init__.py").exists():
                rows += _package_rows(package, str(number))
            elif package.with_suffix(".py").exists():
                module = package.with_suffix(".py")
                rows.append(Row(f"runner/{name}.py", str(number), docstring_seed(module)))
    rows.append(Row("runner/__init__.py", "—", docstring_seed(RUNNER / "__init__.py")))
    return rows


def table_of(page: str) -> str:
    """The text between the markers (ValueError when they are missing)."""
    if START not in page or END not in page:
        raise ValueError(f"{PAGE.name}: the markers {START!r} and {END!r} are missing")
    return page.split(START, 1)[1].split(END, 1)[0]


def parse(table: str) -> list[tuple[str, str, str]]:
    """The (floor, path, description) of each row of the table."""
    found = []
    for line in table.splitlines():
        match = ROW.match(line)
        if match and match.group(2) != "package or module":
            found.append((match.group(1), match.group(2), match.group(3)))
    return found


def render(rows: list[Row], descriptions: dict[str, str]) -> str:
    lines = [HEADER]
    for row in rows:
        text = descriptions.get(row.path) or row.seed
        shown = f"**`{row.path}`**" if row.package else f"`{row.path}`"
        lines.append(f"| {row.floor} | {shown} | {text} |")
    return "\n" + "\n".join(lines) + "\n"


def generate(page: str, floor_sets: list[set[str]] | None = None) -> str:
    """The page with its table rewritten from the tree, keeping the page's descriptions."""
    descriptions = {path: text for _, path, text in parse(table_of(page)) if text}
    table = render(tree_rows(floor_sets), descriptions)
    before, rest = page.split(START, 1)
    return before + START + table + END + rest.split(END, 1)[1]


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    new = generate(page)
    if "--check" in argv:
        if new != page:
            print(f"{PAGE.relative_to(ROOT)}: the package map is stale; run {COMMAND}")
            return 1
        return 0
    if new != page:
        PAGE.write_text(new, encoding="utf-8")
        old = {path for _, path, _ in parse(table_of(page))}
        now = {path for _, path, _ in parse(table_of(new))}
        for path in sorted(now - old):
            print(f"added   {path}  (described from its docstring: read it)")
        for path in sorted(old - now):
            print(f"dropped {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
