"""deltarun image modules: the top-level modules an image's python3 can import.

Copied into a fresh sandbox of the image and run there with the image's own python3
(standard library only, any python3 >= 3.6) as ``python3 -I image_modules.py``:
prints a JSON object: ``modules``, the top-level module names this interpreter can
import from its own installation (never from the working directory): built-ins, the
standard library, what ``pkgutil`` finds on ``sys.path`` (namespace package folders
too) and the top-level names of installed distributions; and ``pytest_plugins``, the
modules of the installed pytest plugins (entry point group ``pytest11``). The grading
policy protects those names from being shadowed by a patch, and the verify phase
loads those plugins explicitly (``runner.grading.image_facts``).

And ``bytecode``: where the image keeps the compiled bytecode of what the harness's
test session imports (pytest, the plugins, the harness's own standard library modules),
and ``install_bytecode``, what pip and setuptools add for an install step, as pairs
(the path under a ``PYTHONPYCACHEPREFIX`` that Python looks for, the image's ``.pyc``).
The verify phase points that prefix at a root-owned directory, so that no bytecode the
code under test could plant is read; linking these files there spares compiling them
again in every trial. Only files root owns, in directories only root can write, from
the root down, are listed: none the test's uid could change.
"""

import os
import sys


def _module_name(filename: str, suffixes: "list[str]") -> "str | None":
    """``json`` for ``json``, ``json.py`` or ``_json.cpython-311-x86_64-linux-gnu.so``."""
    for suffix in suffixes:
        if filename.endswith(suffix):
            filename = filename[: -len(suffix)]
            break
    else:
        if "." in filename:
            return None
    return filename if filename.isidentifier() and filename != "__pycache__" else None


def _suffixes() -> "list[str]":
    found = [".py", ".pyc", ".so", ".abi3.so"]
    try:
        import importlib.machinery

        found.extend(importlib.machinery.all_suffixes())
    except Exception:
        pass
    return sorted(set(found), key=len, reverse=True)


def _stdlib_names(suffixes: "list[str]") -> "set[str]":
    names = set(getattr(sys, "stdlib_module_names", ()))
    if names:
        return names
    import sysconfig

    stdlib = sysconfig.get_paths().get("stdlib") or ""
    for folder in (stdlib, os.path.join(stdlib, "lib-dynload")):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            name = _module_name(entry, suffixes)
            if name is not None:
                names.add(name)
    return names


def _path_names(suffixes: "list[str]") -> "set[str]":
    """What ``pkgutil.iter_modules`` finds on sys.path, and namespace package folders."""
    import pkgutil

    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = ""
    entries = []
    for entry in sys.path:
        if not entry or not isinstance(entry, str):
            continue
        try:
            if os.path.realpath(entry) == cwd:
                continue
        except (OSError, ValueError):
            continue
        entries.append(entry)
    names = set()
    try:
        for info in pkgutil.iter_modules(entries):
            names.add(info[1])
    except Exception:
        pass
    for entry in entries:  # folders without __init__.py import as namespace packages
        try:
            children = os.listdir(entry)
        except OSError:
            continue
        for child in children:
            if child.isidentifier() and os.path.isdir(os.path.join(entry, child)):
                names.add(child)
    return names


def _distribution_names(suffixes: "list[str]") -> "set[str]":
    names = set()  # type: set[str]
    try:
        import importlib.metadata as metadata
    except ImportError:
        return names
    try:
        distributions = list(metadata.distributions())
    except Exception:
        return names
    for dist in distributions:
        try:
            top_level = dist.read_text("top_level.txt")
            if top_level:
                names.update(line.strip() for line in top_level.splitlines())
                continue
            for path in dist.files or ():
                parts = path.parts
                if not parts or parts[0] in ("..", "") or parts[0].endswith(".dist-info"):
                    continue
                if len(parts) > 1:
                    names.add(parts[0])  # a package (or a data folder, dropped if no identifier)
                elif "." in parts[0]:
                    names.add(_module_name(parts[0], suffixes) or "")
        except Exception:
            continue
    return names


def _pytest_plugins() -> "list[str]":
    """The modules of the image's installed pytest plugins (entry points in ``pytest11``),
    which pytest would autoload; the harness loads them explicitly, autoloading off."""
    try:
        import importlib.metadata as metadata
    except ImportError:
        return []
    try:
        found = metadata.entry_points()
        points = (
            found.select(group="pytest11")
            if hasattr(found, "select")
            else found.get("pytest11", ())  # Python < 3.10: a dict of groups
        )
        modules = {str(point.value).split(":")[0].strip() for point in points}
    except Exception:
        return []
    return sorted(m for m in modules if m and all(p.isidentifier() for p in m.split(".")))


# The standard library modules the harness's scripts import (runner/sandbox_scripts;
# tests/test_image_bytecode.py checks the list against them).
HARNESS_IMPORTS = (
    "ast", "importlib", "importlib.machinery", "json", "os", "runpy", "site", "socket", "sys",
    "time", "typing", "unittest",
)  # fmt: skip
SESSION_TIMEOUT_S = 30
MAX_LINKS = 2048

# Run by this interpreter in a child, isolated: a session of the image's pytest (with
# its plugins) on one passing test and what else the harness imports, then pip's install
# command and setuptools (an install step's); prints two lists of the (source, bytecode)
# paths of the modules loaded: by the first part, and those the second added.
# argv[1]: a JSON list of the plugins.
SESSION = r"""
import json, os, sys, tempfile
out = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
def load(names):
    for name in names:
        try:
            __import__(name)
        except BaseException:
            pass
def loaded():
    pairs = {}
    for module in list(sys.modules.values()):
        source, cached = getattr(module, "__file__", None), getattr(module, "__cached__", None)
        if isinstance(source, str) and isinstance(cached, str):
            pairs[cached] = source
    return pairs
load(%r)
try:
    import pytest
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "test_probe.py"), "w") as handle:
        handle.write("def test_probe():\n    assert True\n")
    plugins = [arg for module in json.loads(sys.argv[1]) for arg in ("-p", module)]
    pytest.main(["-q", "-p", "no:cacheprovider", *plugins, folder])
except BaseException:
    pass
session = loaded()
load(("pip._internal.cli.main", "pip._internal.commands.install", "setuptools"))
install = {k: v for k, v in loaded().items() if k not in session}
lists = [[[v, k] for k, v in found.items()] for found in (session, install)]
os.write(out, json.dumps(lists).encode())
""" % (HARNESS_IMPORTS,)


def _only_root_writes(path: str, known: "dict[str, bool]") -> bool:
    """Whether root owns ``path`` and every directory above it, none of them writable by
    a group or others (so no other uid can change, replace or rename it)."""
    path = os.path.normpath(path)
    if path in known:
        return known[path]
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    ok = info is not None and info.st_uid == 0 and not info.st_mode & 0o022
    if ok and path != "/":
        ok = _only_root_writes(os.path.dirname(path), known)
    known[path] = ok
    return ok


def _bytecode(plugins: "list[str]") -> "list[list[list[str]]]":
    """Two lists (the test session's, what an install step adds) of [the path below a
    pycache prefix, the image's .pyc] for each module whose bytecode and source only
    root can write (module docstring)."""
    import json
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", SESSION, json.dumps(plugins)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=SESSION_TIMEOUT_S,
            cwd="/",
        )
        session, install = json.loads(done.stdout.decode("utf-8"))
    except Exception:
        return [[], []]
    known = {}  # type: dict[str, bool]
    return [_links(session, known), _links(install, known)]


def _links(pairs: object, known: "dict[str, bool]") -> "list[list[str]]":
    import stat

    links = {}  # type: dict[str, str]
    for pair in pairs if isinstance(pairs, list) else ():
        if not (isinstance(pair, list) and len(pair) == 2):
            continue
        source, cached = pair
        if not (isinstance(source, str) and isinstance(cached, str)):
            continue
        source, cached = os.path.abspath(source), os.path.abspath(cached)
        if not (source.endswith(".py") and cached.endswith(".pyc")):
            continue
        try:
            regular = stat.S_ISREG(os.lstat(cached).st_mode)
        except OSError:
            continue
        if regular and _only_root_writes(cached, known) and _only_root_writes(source, known):
            links[os.path.dirname(source).lstrip("/") + "/" + os.path.basename(cached)] = cached
    return [[link, links[link]] for link in sorted(links)[:MAX_LINKS]]


def main() -> int:
    import json

    suffixes = _suffixes()
    names = set(sys.builtin_module_names)
    names |= _stdlib_names(suffixes)
    names |= _path_names(suffixes)
    names |= _distribution_names(suffixes)
    valid = sorted(name for name in names if name.isidentifier() and name != "__pycache__")
    plugins = _pytest_plugins()
    session, install = _bytecode(plugins)
    answer = {
        "modules": valid,
        "pytest_plugins": plugins,
        "bytecode": session,
        "install_bytecode": install,
    }
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
