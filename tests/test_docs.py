"""The README and docs/: short README with the two commands, links that resolve, pages
that name only modules (and functions in them) that exist, a command table that lists
every command the CLI has. Fast: no Docker, no Redis; the CLI is asked in-process."""

from __future__ import annotations

import ast
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest
import typer

from runner.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target up to whitespace or ")".
LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(])*?\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks (links inside code are not links)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    kept = []
    for char in text:
        if char in " -_" or unicodedata.category(char)[0] in "LN":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(prose(path.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", prose(path.read_text(encoding="utf-8")))
    return LINK.findall(text)


def test_readme_is_short_and_has_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    assert "make demo" in text
    assert "make test" in text
    # The two commands come first: in the first code block of the README.
    first_block = FENCE.search(text)
    assert first_block is not None
    assert "make demo" in first_block.group(0)
    assert "make test" in first_block.group(0)


def test_the_docs_pages_exist() -> None:
    names = {path.name for path in DOCS.glob("*.md")}
    for name in (
        "suite-format.md",
        "many-machines.md",
        "verdicts-and-sandbox.md",
        "outcomes-and-statistics.md",
        "benchmarks.md",
        "commands.md",
        "models.md",
        "architecture.md",
    ):
        assert name in names, name
        assert f"docs/{name}" in README.read_text(encoding="utf-8"), f"README links {name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, file:
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            problems.append(f"{target}: no such file")
            continue
        if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{target}: no heading #{anchor} in {destination.name}")
    assert not problems, problems


RUNNER_PATH = re.compile(r"\brunner/[\w./]*[\w/]")
RUNNER_NAME = re.compile(r"\brunner(?:\.\w+)+")


@cache
def top_level_names(source: Path) -> dict[str, frozenset[str]]:
    """A module's top-level names, each with the names in its body when it is a class."""
    names: dict[str, frozenset[str]] = {}
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            inner = {n.name for n in node.body if isinstance(n, DEFINITIONS)}
            inner |= {t.id for n in node.body for t in targets(n)}
            names[node.name] = frozenset(inner)
        elif isinstance(node, DEFINITIONS):
            names[node.name] = frozenset()
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(((a.asname or a.name).split(".")[0], frozenset()) for a in node.names)
        else:
            names.update((t.id, frozenset()) for t in targets(node))
    return names


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def targets(node: ast.stmt) -> list[ast.Name]:
    if isinstance(node, ast.Assign):
        return [t for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target]
    return []


def missing_name(name: str) -> bool:
    """Whether a dotted ``runner.a.b`` (a module, or a module's name and a class's
    attribute after it) names nothing in the tree."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = (
            base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        )
        if source.is_file():
            break
    else:
        return True
    rest = parts[cut:]
    if not rest:
        return False
    names = top_level_names(source)
    if rest[0] not in names:
        return True
    return len(rest) > 1 and bool(names[rest[0]]) and rest[1] not in names[rest[0]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_only_modules_that_exist(page: Path) -> None:
    """Every ``runner/...`` path and ``runner.x.y`` dotted name a page mentions exists (a
    moved or renamed module leaves none behind)."""
    text = page.read_text(encoding="utf-8")
    paths = set(RUNNER_PATH.findall(text))
    missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
    missing += [name for name in sorted(set(RUNNER_NAME.findall(text))) if missing_name(name)]
    assert not missing, missing
    if page.name == "architecture.md":
        assert len(paths) > 30, "the package map names the modules by path"


def test_architecture_maps_every_module_of_runner() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    runner = ROOT / "runner"
    missing = []
    for entry in sorted(runner.iterdir()):
        if entry.name.startswith(("_", ".")) or entry.name == "py.typed":
            continue
        if entry.is_dir() and not any(entry.iterdir()):
            continue
        name = f"runner/{entry.name}" + ("/" if entry.is_dir() else "")
        if name not in text:
            missing.append(name)
    assert not missing, missing


def command_names(group: object, prefix: str = "") -> list[str]:
    """Every command and subcommand of a (Typer's own click) group, by name; a group such
    as ``import`` counts through its subcommands (``import swebench``)."""
    names = []
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "hidden", False):
            continue
        sub = command_names(command, f"{prefix}{name} ")
        names.extend(sub or [f"{prefix}{name}"])
    return names


def test_every_command_is_in_the_readme_table() -> None:
    names = command_names(typer.main.get_command(app))
    assert {"run", "seal", "report", "worker"} <= set(names)
    rows = [
        line
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `deltarun ")
    ]
    listed = {re.sub(r"\s+[A-Z\[\-].*$", "", row[len("| `") :].split("`")[0]) for row in rows}
    missing = [name for name in names if f"deltarun {name}" not in listed]
    assert not missing, (missing, sorted(listed))
