"""The harness's canaries: tests written into the declared test files that must pass or
must fail, told apart from the declared tests only outside the test process. Pure.

In each file that holds declared tests (a declared ``.py`` file, or a test module under
a declared directory) the harness writes, into its root-owned copy in the verify
sandbox, one test that must pass and two that must fail. They are source text in the
file on disk, in the shape of the file's own tests:

- *where*: the must-pass and the first must-fail at random statement boundaries among
  the file's tests (after any docstring and ``from __future__`` import), the second
  must-fail after the last test of the same place; as methods of a class whose tests
  are declared (with ``self.assertEqual`` in a ``unittest`` class, ``assert``
  elsewhere) or at module level when the declared tests are functions;
- *named* from the words of the file's declared test names, in their style, never a
  name the file already uses;
- *selected* like the declared tests: when a declared entry already names the canary
  (a file or class entry) nothing more is said; otherwise its node id joins the
  declared ones in the selection the plugin gets, one list, in sorted order.

So nothing code in the test process can observe (the file on disk, the module's
attributes, the plugin's selection) tells the random two from the declared tests: only
the host knows, and it reads the outcomes from the collector after the process ended
(``runner.grading.verdict.grade``). A rewrite that flips outcomes it cannot tell apart
flips a must-fail canary too. The last test of a place is always a must-fail canary:
a rewrite switched on part-way through the session, which leaves what ran before it
honest, still meets that one; a rewrite that spares it still meets the random one.
What still tells canaries apart, and what it needs, is in docs/verdicts-and-sandbox.md
("What remains the operator's job").

A file Python cannot parse here gets its canaries at its end, at module level.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runner.pyparse import LOCK
from runner.trees.declared import TEST_FILE_PATTERNS, matches, test_files

_WORD = re.compile(r"[a-z][a-z0-9]*")
# Words for names when the declared names give too few of their own.
_FALLBACK_WORDS = (
    "basic", "case", "check", "default", "empty", "error", "format", "input", "invalid",
    "large", "missing", "none", "order", "parse", "result", "simple", "single", "value",
)  # fmt: skip
_VARIABLES = ("value", "result", "found", "expected", "got", "items", "total", "count")
# Options that narrow a selection by name or mark: with one, every canary is named.
_NARROWING = ("-k", "-m")
SOURCE_CAP = 4 << 20  # a declared file larger than this is not parsed: canaries at its end


@dataclass(frozen=True)
class Canary:
    """One test the harness wrote into a declared test file: it must pass, or must fail."""

    file: str  # repository-relative, as the node id's file part
    name: str
    fail: bool
    owner: str = ""  # the class it is a method of ("" at module level)

    @property
    def nodeid(self) -> str:
        middle = f"{self.owner}::" if self.owner else ""
        return f"{self.file}::{middle}{self.name}"


@dataclass(frozen=True)
class Planted:
    """The declared test files with their canaries written in, and what the plugin selects."""

    files: dict[str, bytes]  # path -> the file's new bytes (only files that got canaries)
    canaries: tuple[Canary, ...]
    select: tuple[str, ...]  # the declared entries and the canaries it must name, sorted


def canary_files(selected: Sequence[str], hidden_files: Iterable[str]) -> list[str]:
    """The files that get canaries: the declared ``.py`` files, and the hidden test modules
    (pytest's default names) under a declared directory."""
    hidden = sorted(hidden_files)
    files: list[str] = []
    for part in test_files(selected):
        if part.endswith(".py"):
            files.append(part)
            continue
        prefix = part.rstrip("/") + "/"
        files += [h for h in hidden if h.startswith(prefix) and _is_test_module(h)]
    return list(dict.fromkeys(files))


def plant(
    selected: Sequence[str],
    sources: Mapping[str, bytes],
    rng: random.Random,
    pytest_args: Sequence[str] = (),
    by_name: bool = False,
) -> Planted:
    """A must-pass and a must-fail canary in each file of ``canary_files`` that ``sources``
    holds (the bytes the verify sandbox will have at that path). ``rng`` should be
    unpredictable to the agent (``secrets.SystemRandom``); ``by_name``: the runner runs a
    class's tests in name order (unittest, Django), so the last must-fail sorts last."""
    files: dict[str, bytes] = {}
    found: list[Canary] = []
    for file in canary_files(selected, sources):
        data = sources.get(file)
        if data is None:
            continue
        entries = [e for e in selected if e.split("::", 1)[0] == file]
        with LOCK:  # one parse at a time (runner.pyparse)
            files[file], made = _plant_file(file, data, entries, rng, by_name)
        found += made
    narrowing = any(a in _NARROWING or a.startswith(("-k", "-m")) for a in pytest_args)
    named = [
        c.nodeid
        for c in found
        if narrowing or not any(matches(c.nodeid, entry) for entry in selected)
    ]
    return Planted(files, tuple(found), tuple(sorted({*selected, *named})))


def _is_test_module(path: str) -> bool:
    return any(fnmatch.fnmatchcase(posixpath.basename(path), p) for p in TEST_FILE_PATTERNS)


# --- one file ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Gap:
    """A line before which a statement may start: at module level, or in a class body."""

    line: int  # 0-based index into the file's lines
    indent: bytes  # of the statement written there
    owner: str  # the class, or ""
    unittest: bool  # the class's tests use ``self.assert...``
    blank: int = 1  # blank lines between statements here, as the file spaces them
    last: bool = False  # after the body's last statement (the spacing goes first)


def _plant_file(
    file: str, data: bytes, entries: list[str], rng: random.Random, by_name: bool = False
) -> tuple[bytes, list[Canary]]:
    lines = data.splitlines(keepends=True)
    tree = _parse(data)
    gaps = _gaps(tree, lines, _owners(tree, entries)) if tree is not None else []
    if not gaps:  # unparsable, or no statement to stand beside: at the end, module level
        gaps = [_Gap(len(lines), b"", "", False)]
    if lines and not lines[-1].endswith((b"\n", b"\r")):
        lines[-1] += b"\n"  # what is written after the last line starts a line of its own
    unit = _indent_unit(lines)
    taken = set(re.findall(rb"[A-Za-z_][A-Za-z0-9_]*", data))
    style = _style(entries, data)
    words = _words(entries) or _words_in(data)
    inserts: dict[int, list[bytes]] = {}
    made: list[Canary] = []
    # One must-pass and one must-fail at random places; one more must-fail after the last
    # test of its place (the module, or the declared class), so a rewrite switched on
    # part-way through the session (``docs/verdicts-and-sandbox.md``, the order) meets one.
    owner = rng.choice(gaps).owner
    last = max((g for g in gaps if g.owner == owner), key=lambda g: (g.line, g.last))
    for fail, chosen in ((False, None), (True, None), (True, last)):
        gap = chosen or rng.choice(gaps)
        name = _name(words, taken, rng, style)
        if chosen is not None and by_name:  # unittest runs a class's tests in name order
            name = _last_by_name(name, tree, gap.owner, made, rng, words)
        taken.add(name.encode())
        made.append(Canary(file, name, fail, gap.owner))
        text = _source(name, fail, gap, unit, rng)
        inserts.setdefault(gap.line, []).append(text)
    out: list[bytes] = []
    for index in range(len(lines) + 1):
        out += inserts.get(index, [])
        if index < len(lines):
            out.append(lines[index])
    return b"".join(out), made


def _last_by_name(
    name: str,
    tree: ast.Module | None,
    owner: str,
    made: list[Canary],
    rng: random.Random,
    words: list[str],
) -> str:
    """``name``, or a name that sorts after every test of ``owner`` (the class's own and
    the canaries already in it): where tests run in name order (unittest's loader sorts a
    class's methods), the last test of the place is the one that sorts last."""
    body: list[ast.stmt] = []
    if tree is not None:
        body = tree.body
        if owner:
            classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner]
            body = classes[0].body if classes else []
    names = [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names += [c.name for c in made if c.owner == owner]
    highest = max((n for n in names if n.startswith("test")), default="")
    if name > highest:
        return name
    extra = rng.choice(words or list(_FALLBACK_WORDS))
    # An extension of the highest name sorts after it, and no test has it.
    return f"{highest}_{extra}" if "_" in highest else f"{highest}{extra.capitalize()}"


def _parse(data: bytes) -> ast.Module | None:
    if len(data) > SOURCE_CAP:
        return None
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _first_line(node: ast.stmt) -> int:
    """The statement's first line (1-based), its decorators included."""
    decorators: list[ast.expr] = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _docstring_or_future(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def _gaps(tree: ast.Module, lines: list[bytes], owners: set[str]) -> list[_Gap]:
    """Where a canary may go: before a statement (or after the last) of the module, when
    the declared tests are functions, or of a declared class's body."""
    found: list[_Gap] = []
    if not owners:
        found += _body_gaps(tree.body, lines, b"", "", False, module=True)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in owners and node.body:
            first = node.body[0]
            if first.lineno == node.lineno or first.col_offset == 0:
                continue  # a one-line class: no line of its own to stand on
            line = lines[first.lineno - 1] if first.lineno - 1 < len(lines) else b""
            indent = line[: first.col_offset]
            if indent.strip():
                continue
            source = b"".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
            found += _body_gaps(node.body, lines, indent, node.name, b"self.assert" in source)
    return found


def _body_gaps(
    body: list[ast.stmt],
    lines: list[bytes],
    indent: bytes,
    owner: str,
    unittest: bool,
    module: bool = False,
) -> list[_Gap]:
    start = 0
    while start < len(body) and _docstring_or_future(body[start]):
        start += 1
    if module:  # after the imports at the top: the names a test uses come first
        while start < len(body) and isinstance(body[start], (ast.Import, ast.ImportFrom)):
            start += 1
    gaps = []
    for node in body[start:]:
        line = _first_line(node) - 1
        blank = 0
        while blank < line and not lines[line - blank - 1].strip():
            blank += 1
        gaps.append(_Gap(line, indent, owner, unittest, max(blank, 1)))
    if body and body[-1].end_lineno is not None and start <= len(body):
        spacing = 2 if module else 1
        gaps.append(_Gap(body[-1].end_lineno, indent, owner, unittest, spacing, last=True))
    # A statement sharing its first line with the one before (``a; b``) is no boundary.
    firsts = [_first_line(node) for node in body]
    shared = {firsts[i] for i in range(1, len(firsts)) if firsts[i] == body[i - 1].end_lineno}
    return [g for g in gaps if g.line + 1 not in shared and 0 <= g.line <= len(lines)]


def _indent_unit(lines: list[bytes]) -> bytes:
    """The file's own indentation step: the first indented line's leading white space."""
    for line in lines:
        stripped = line.lstrip(b" \t")
        if not stripped.strip() or stripped.startswith(b"#") or stripped == line:
            continue
        lead = line[: len(line) - len(stripped)]
        if set(lead) == {ord("\t")}:
            return b"\t"
        if set(lead) == {ord(" ")} and len(lead) <= 8:
            return lead
        break
    return b"    "


def _owners(tree: ast.Module, entries: list[str]) -> set[str]:
    """The classes the canaries go into: those of declared ``file::Class::test`` entries;
    for a whole file, its test classes when it has no test function at module level."""
    named = {e.split("::")[1] for e in entries if e.count("::") == 2}
    if named or any(e.count("::") == 1 for e in entries):
        return named
    functions = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
    ]
    if functions:
        return set()
    return {
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        and (n.name.startswith("Test") or any(ast.unparse(b).endswith("TestCase") for b in n.bases))
    }


@dataclass(frozen=True)
class _Style:
    prefix: str  # "test" (or the declared names' own first word)
    camel: bool  # ``testParseDates`` rather than ``test_parse_dates``


def _style(entries: list[str], data: bytes) -> _Style:
    """How the file's tests are named: ``test_snake`` or ``testCamelCase``, and their prefix."""
    names = [e.rsplit("::", 1)[-1].split("[", 1)[0] for e in entries if "::" in e]
    if not names:
        names = [n.decode() for n in re.findall(rb"def (test\w*)", data)]
    camel = sum(1 for n in names if re.match(r"test[A-Z0-9]", n))
    firsts = {n.split("_", 1)[0] for n in names if "_" in n}
    prefix = firsts.pop() if len(firsts) == 1 and all("_" in n for n in names) else "test"
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", prefix):
        prefix = "test"
    return _Style(prefix, camel > len(names) - camel)


def _words(entries: Iterable[str]) -> list[str]:
    """The words of the declared tests' names (``test_parse_dates[1]`` -> parse, dates)."""
    words: dict[str, None] = {}
    for entry in entries:
        if "::" not in entry:
            continue
        name = entry.rsplit("::", 1)[-1].split("[", 1)[0]
        name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
        for word in _WORD.findall(name.replace("_", " ")):
            if word != "test" and len(word) > 1:
                words.setdefault(word)
    return list(words)


def _words_in(data: bytes) -> list[str]:
    """The words of the test functions the file defines, when no entry names one."""
    names = [n.decode() for n in re.findall(rb"def (test\w*)", data)]
    return _words(f"f::{n}" for n in names)


def _name(words: list[str], taken: set[bytes], rng: random.Random, style: _Style) -> str:
    pool = list(dict.fromkeys(words if len(words) >= 3 else [*words, *_FALLBACK_WORDS]))
    pool = [w for w in pool if w != style.prefix.lower()] or list(_FALLBACK_WORDS)
    for attempt in range(1000):
        chosen = rng.sample(pool, min(2 if attempt < 200 else 3, len(pool)))
        if style.camel:
            name = "test" + "".join(w.capitalize() for w in chosen)
        else:
            name = f"{style.prefix}_" + "_".join(chosen)
        if name.encode() not in taken:
            return name
    return f"{style.prefix}_{rng.choice(pool)}_{rng.randrange(10**6)}"


def _source(name: str, fail: bool, gap: _Gap, unit: bytes, rng: random.Random) -> bytes:
    """The canary's lines: one of a few bodies of the shape tests have, its values drawn."""
    body_indent = gap.indent + unit
    variable = rng.choice(_VARIABLES)
    left = rng.randrange(2, 1000)
    right = left + rng.randrange(1, 50) if fail else left
    shape = rng.randrange(3)
    if shape == 0:
        setup = [f"{variable} = {left}"]
        checked, wanted = variable, str(right)
    elif shape == 1:
        first = rng.randrange(1, left)
        setup = [f"{variable} = [{first}, {left - first}]"]
        checked, wanted = f"sum({variable})", str(right)
    else:
        word = rng.choice(_FALLBACK_WORDS)
        setup = [f"{variable} = {word!r} * {left % 7 + 1}"]
        checked, wanted = f"len({variable})", str(len(word) * (left % 7 + 1) + (right - left))
    if gap.unittest:
        check = f"self.assertEqual({checked}, {wanted})"
    else:
        check = f"assert {checked} == {wanted}"
    head = f"def {name}(self):" if gap.owner else f"def {name}():"
    text = [gap.indent + head.encode()] + [body_indent + s.encode() for s in [*setup, check]]
    spacing = b"\n" * gap.blank
    block = b"\n".join(text) + b"\n"
    return spacing + block if gap.last else block + spacing
