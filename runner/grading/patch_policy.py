"""What of an agent's patch reaches the grading sandbox: one pure, named policy.

The agent's patch may change the code under test and nothing else that decides
grading. ``screen`` reads each file section of the patch (``runner.gitpatch``)
and drops, before the verify phase, every section that would change what the
harness owns:

========== ============================================================ =========
rule       what is dropped                                              violation
========== ============================================================ =========
forbidden  a path under ``tools.forbidden_paths`` (``.git/``)            yes
hidden     a hidden test file, a directory on its path, or anything       no
           under it: the hidden file stands as written
declared   a fixture file that holds declared tests (``hidden_tests``,    yes
           such as SWE-bench's PASS_TO_PASS), a new test module under a
           declared directory, a directory on their paths: the pristine
           file stands
harness    ``__init__.py`` or ``conftest.py`` in a directory that holds   yes
           hidden or declared tests (they are imported before the tests
           and could rewrite them or the runner)
runner     a file that exists only to configure the test runner          yes
           (``conftest.py``, ``pytest.ini``, ``tox.ini``, ...)
metadata   a ``*.dist-info`` / ``*.egg-info`` directory, a ``.pth`` or    yes
           ``.egg-link`` file: plugin entry points and import hooks
bytecode   ``__pycache__``, ``*.pyc``, ``*.pyo``: Python may prefer        yes
           bytecode over the edited source
shadow     a new module or package whose name the sandbox image already  yes
           imports (its standard library, the test runner, any installed
           distribution) or the interpreter runs at start-up, or that takes
           the import name of a hidden or declared test module or of a
           package on its path
pattern    a path matching ``tools.grading_paths`` (the user's own list)  yes
========== ============================================================ =========

*Shadow* is decided on the tree the patch leaves, with the hidden and declared
files standing as the harness writes them: a directory without ``__init__.py``
can be put on the import path (the repository root always is; pytest inserts the
first directory without ``__init__.py`` above each test file), so a module file
``D/json.py`` or a package ``D/json/__init__.py`` in such a directory shadows
``json``. A test module ``tests/pkg/test_x.py`` (``tests/pkg/__init__.py``
present, ``tests/`` without one) imports as ``pkg.test_x``: no new ``pkg`` may
appear in any such directory, and no new ``test_x`` (a package, an extension
module, a symlink) in ``tests/pkg/``; Python would import it instead of the
test file. A module the fixture itself already has at that path is the
repository's own (a project may ship a module an image has installed, or be
installed in the image itself) and is not new. The image's module names come
from the image (``image_modules.py`` run in it), not from a list.

Files that *also* carry runner settings (``pyproject.toml``, ``setup.cfg``) are
the project's: the agent may edit them, and the verify phase takes the runner's
settings from the fixture's pristine copy instead (``runner.trees.declared``).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runner.gitpatch import FileDiff, keep, parse
from runner.paths import is_forbidden
from runner.trees.declared import holds_declared

# Files whose only purpose is configuring the test runner.
RUNNER_FILES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini"}
)
# Modules the interpreter imports by itself at start-up when they are on the path.
STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})
# Beside the hidden tests the harness owns their package's __init__ (as any kind of module
# file: Python prefers an extension module or bytecode to the source) and pytest's hooks.
HARNESS_MODULES = frozenset({"__init__"})
HARNESS_FILES = frozenset({"conftest.py"})
_MODULE_SUFFIXES = (".py", ".pyw", ".pyc", ".pyo", ".so", ".pyd")
_MAX_ROUNDS = 8


@dataclass(frozen=True)
class Ground:
    """What the harness owns for one task: its fixture, its hidden files, the image."""

    fixture_files: frozenset[str]
    hidden_files: frozenset[str] = frozenset()
    module_names: frozenset[str] = frozenset()
    forbidden: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    declared: tuple[str, ...] = ()  # the task's hidden_tests entries

    @property
    def hidden_dirs(self) -> frozenset[str]:
        """Every directory on the path of a hidden file ("" is the repository root)."""
        return frozenset(d for path in self.hidden_files for d in _ancestors(path))

    @property
    def declared_files(self) -> frozenset[str]:
        """Fixture files that hold declared tests and are not hidden ones."""
        if not self.declared:
            return frozenset()
        return frozenset(
            p for p in self.fixture_files - self.hidden_files if holds_declared(p, self.declared)
        )

    @property
    def protected(self) -> frozenset[str]:
        """The test files the harness writes in the verify sandbox: hidden and declared."""
        return self.hidden_files | self.declared_files


@dataclass(frozen=True)
class Dropped:
    """A path of a dropped section and the rule that dropped it."""

    path: str
    rule: str
    violation: bool

    def __str__(self) -> str:
        return f"{self.path} ({self.rule})"


@dataclass(frozen=True)
class Screened:
    """The patch the verify phase applies, and what was taken out of it."""

    patch: bytes
    dropped: tuple[Dropped, ...]

    @property
    def violation(self) -> bool:
        return any(d.violation for d in self.dropped)


def screen(patch: bytes, ground: Ground) -> Screened:
    """Apply the policy to a ``git diff`` patch. Raises ``gitpatch.PatchError`` when the
    patch cannot be read: then nothing of it may be applied."""
    files = parse(patch)
    dropped = screen_files(files, ground)
    gone = {id(f) for f, _ in dropped}
    return Screened(
        keep(patch, files, lambda f: id(f) not in gone),
        tuple(d for _, d in dropped),
    )


def screen_files(files: Sequence[FileDiff], ground: Ground) -> list[tuple[FileDiff, Dropped]]:
    """Each dropped section with the reason; sections are dropped whole."""
    out: list[tuple[FileDiff, Dropped]] = []
    kept: list[FileDiff] = []
    for f in files:
        reason = _path_rule(f, ground)
        if reason is None:
            kept.append(f)
        else:
            out.append((f, reason))
    # Shadows depend on the whole tree the patch leaves: drop until none is new. With no
    # section left the tree is the fixture's, so nothing can be new.
    if not kept:
        return out
    names, protected = ground.module_names, ground.protected
    before = shadows(ground.fixture_files, (), names, protected)
    for _ in range(_MAX_ROUNDS):
        new = shadows(ground.fixture_files, kept, names, protected) - before
        if not new:
            break
        culprits = [f for f in kept if _makes_any(f, new)]
        if not culprits:  # cannot happen: a new shadow comes from some section
            break
        for f in culprits:
            root, name, _ = next(s for s in sorted(new) if _makes(f, s))
            where = posixpath.join(root, name) if root else name
            out.append((f, Dropped(_first_path(f), f"shadow of module {name!r} at {where}", True)))
        kept = [f for f in kept if f not in culprits]
    return out


def _first_path(f: FileDiff) -> str:
    return f.new_path or f.old_path or ""


def _path_rule(f: FileDiff, ground: Ground) -> Dropped | None:
    """The first per-path rule a section breaks, or None."""
    for path in f.paths:
        if is_forbidden(path, ground.forbidden):
            return Dropped(path, "forbidden path", True)
    hidden_dirs, declared = ground.hidden_dirs, ground.declared_files
    declared_dirs = frozenset(d for p in declared for d in _ancestors(p))
    for path in f.paths:
        name = posixpath.basename(path)
        parent = posixpath.dirname(path)
        harness = name in HARNESS_FILES or (
            name.endswith(_MODULE_SUFFIXES) and module_name(name) in HARNESS_MODULES
        )
        if harness and parent in hidden_dirs:
            return Dropped(path, "harness file beside the hidden tests", True)
        if harness and parent in declared_dirs:
            return Dropped(path, "harness file beside the declared tests", True)
        if _touches_hidden(path, ground.hidden_files, hidden_dirs):
            return Dropped(path, "hidden test path", False)
        if holds_declared(path, ground.declared) or _touches_hidden(path, declared, declared_dirs):
            return Dropped(path, "declared test file (the fixture's stands)", True)
    for path in f.paths:
        rule = path_rule(path)
        if rule is not None:
            return Dropped(path, rule, True)
        if any(_matches(path, pattern) for pattern in ground.patterns):
            return Dropped(path, "tools.grading_paths", True)
    return None


def path_rule(path: str) -> str | None:
    """The rule a single path breaks on its name alone (runner, metadata, bytecode), or None."""
    parts = path.split("/")
    name = parts[-1]
    if name in RUNNER_FILES:
        return "test runner configuration"
    if any(p.endswith((".dist-info", ".egg-info")) for p in parts) or name.endswith(
        (".pth", ".egg-link")
    ):
        return "package metadata or import hook"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "bytecode"
    return None


def _touches_hidden(path: str, hidden: frozenset[str], hidden_dirs: frozenset[str]) -> bool:
    """``path`` is a hidden file, lies under one, or is a directory on a hidden path."""
    if path in hidden or (path in hidden_dirs and path != ""):
        return True
    return any(path.startswith(h + "/") for h in _ancestors_of_file(path) & hidden)


def _ancestors_of_file(path: str) -> set[str]:
    parts = path.split("/")
    return {"/".join(parts[:i]) for i in range(1, len(parts))}


def _ancestors(path: str) -> list[str]:
    """Every directory above ``path``: ``a/b/c`` → ``["", "a", "a/b"]``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts))]


def _directories(paths: Iterable[str]) -> set[str]:
    """Every directory above any of ``paths`` ("" the root): ``_ancestors`` of each, each
    walk up stopping at a directory already seen (linear in the number of paths)."""
    found = {""}
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent not in found:
            found.add(parent)
            parent = parent.rpartition("/")[0]
    return found


def _matches(path: str, pattern: str) -> bool:
    target = path if "/" in pattern else posixpath.basename(path)
    return fnmatch.fnmatchcase(target, pattern)


# --- shadows ----------------------------------------------------------------------------


def module_name(entry: str) -> str:
    """The module a directory entry would import as: ``json.py`` → ``json``,
    ``_x.cpython-311-x86_64-linux-gnu.so`` → ``_x``, a package directory → its name."""
    for suffix in _MODULE_SUFFIXES:
        if entry.endswith(suffix):
            return entry[: -len(suffix)].split(".", 1)[0]
    return entry


def final_tree(fixture: Iterable[str], files: Iterable[FileDiff]) -> set[str]:
    """The file paths after the sections are applied to the fixture."""
    tree = set(fixture)
    changes = list(files)
    for f in changes:
        if f.old_path is not None and f.old_path != f.new_path and not f.copy:
            tree.discard(f.old_path)  # a deletion or a rename
    for f in changes:
        if f.new_path is not None:
            tree.add(f.new_path)
    return tree


def shadows(
    fixture: Iterable[str],
    files: Sequence[FileDiff],
    names: frozenset[str],
    protected: frozenset[str] = frozenset(),
) -> set[tuple[str, str, str]]:
    """Every (directory, module name, providing path) in the tree that takes a watched name.

    The tree is the fixture after ``files``, with the ``protected`` test files as the
    harness writes them. Watched: at every import root (the repository root, any
    directory without ``__init__.py``), the image's ``names``, the start-up hooks and
    the top-level import name of each protected test module; in each package on such a
    module's path, the next name on it. A provider is a module file or symlink, or a
    package's ``__init__``.
    """
    tree = final_tree(fixture, files) | protected
    links = {f.new_path for f in files if f.is_symlink and f.new_path is not None}
    dirs = _directories(tree)
    roots = {d for d in dirs if d == "" or posixpath.join(d, "__init__.py") not in tree}
    tops, inside = _test_module_names(protected, tree)
    watched = names | STARTUP_HOOKS | tops

    def taken(where: str, name: str) -> bool:
        return (where in roots and name in watched) or (where, name) in inside

    found: set[tuple[str, str, str]] = set()
    for path in tree:
        parent, entry = posixpath.split(path)
        if (entry.endswith(_MODULE_SUFFIXES) or path in links) and taken(
            parent, module_name(entry)
        ):
            found.add((parent, module_name(entry), path))
        if entry.startswith("__init__.") and parent:
            grand, package = posixpath.split(parent)
            if taken(grand, package):
                found.add((grand, package, path))
    return found


def _test_module_names(
    protected: Iterable[str], tree: set[str]
) -> tuple[set[str], set[tuple[str, str]]]:
    """The import names of the protected test modules: the top-level names (watched at
    every import root) and (package directory, child name) pairs along each dotted name."""
    tops: set[str] = set()
    inside: set[tuple[str, str]] = set()
    for path in protected:
        directory, entry = posixpath.split(path)
        if not entry.endswith(".py"):
            continue
        parts = [] if entry.startswith("__init__.") else [module_name(entry)]
        while directory and posixpath.join(directory, "__init__.py") in tree:
            directory, package = posixpath.split(directory)
            parts.insert(0, package)
        if not parts:
            continue
        tops.add(parts[0])
        for i in range(1, len(parts)):
            inside.add((posixpath.join(directory, *parts[:i]), parts[i]))
    return tops, inside


def _makes(f: FileDiff, shadow: tuple[str, str, str]) -> bool:
    """Does section ``f`` (help) make ``shadow``? It writes the module or package, or it
    deletes the ``__init__.py`` that kept the directory from being an import root."""
    root, name, _ = shadow
    prefix = f"{root}/" if root else ""
    for path in f.paths:
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :]
        head = rest.split("/", 1)[0]
        if module_name(head) == name or head == name:
            return True
        if f.deletes and rest.startswith("__init__.") and "/" not in rest:
            return True
    return False


def _makes_any(f: FileDiff, new: set[tuple[str, str, str]]) -> bool:
    return any(_makes(f, s) for s in new)
