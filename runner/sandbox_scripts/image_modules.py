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


def main() -> int:
    import json

    suffixes = _suffixes()
    names = set(sys.builtin_module_names)
    names |= _stdlib_names(suffixes)
    names |= _path_names(suffixes)
    names |= _distribution_names(suffixes)
    valid = sorted(name for name in names if name.isidentifier() and name != "__pycache__")
    answer = {"modules": valid, "pytest_plugins": _pytest_plugins()}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
