"""Where a project's own packages live, read from its packaging metadata. Pure.

A project in a ``src/`` layout imports as ``import pkg`` only once ``src`` is on the import
path (pip puts it there on install). Without an install step, the verify phase puts the
folders the project's own metadata declares there, after the repository root:

- ``pyproject.toml``: ``[tool.setuptools] package-dir = {"" = "src"}``,
  ``[tool.setuptools.packages.find] where = ["src"]``, hatch's
  ``[tool.hatch.build.targets.wheel] packages = ["src/pkg"]``, poetry's
  ``packages = [{include = "pkg", from = "src"}]``, pdm's ``package-dir = "src"``;
- ``setup.cfg``: ``[options] package_dir = =src`` and ``[options.packages.find] where = src``;
- ``setup.py`` (not parsed: running it is out of the question) and setuptools' automatic
  discovery: with any of the three files, a ``src`` folder holding a package
  (``src/<name>/…``) when the root has no package of that name.

Only folders that exist in the fixture count; paths stay inside it.
"""

from __future__ import annotations

import configparser
import posixpath
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from runner.trees.archives import Member


def import_roots(pristine: Mapping[str, Member], files: Iterable[str]) -> tuple[str, ...]:
    """The fixture folders (relative paths, sorted) its metadata puts on the import path."""
    paths = frozenset(files)
    folders = {posixpath.dirname(p) for p in paths}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    declared: set[str] = set()
    pyproject = pristine.get("pyproject.toml")
    if pyproject is not None:
        declared |= _pyproject_roots(pyproject.data)
    setup_cfg = pristine.get("setup.cfg")
    if setup_cfg is not None:
        declared |= _setup_cfg_roots(setup_cfg.data)
    packaged = any(name in paths for name in ("setup.py", "setup.cfg", "pyproject.toml"))
    if packaged and "src" in folders:  # setuptools' automatic discovery finds src/ itself
        declared |= _src_holding_packages(paths)
    return tuple(sorted(r for r in (_clean(d) for d in declared) if r and r in folders))


def _clean(folder: str) -> str:
    """A relative folder inside the fixture, or "" (the root itself, or outside it)."""
    normal = posixpath.normpath(folder.strip().strip("/"))
    if normal in (".", "") or normal.startswith("..") or posixpath.isabs(normal):
        return ""
    return normal


def _pyproject_roots(data: bytes) -> set[str]:
    try:
        tool = tomllib.loads(data.decode("utf-8")).get("tool", {})
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return set()
    roots: set[str] = set()
    setuptools = _table(tool, "setuptools")
    package_dir = setuptools.get("package-dir")
    if isinstance(package_dir, dict) and isinstance(package_dir.get(""), str):
        roots.add(package_dir[""])
    where = _table(_table(setuptools, "packages"), "find").get("where")
    roots |= {w for w in where if isinstance(w, str)} if isinstance(where, list) else set()
    hatch = _table(_table(_table(_table(tool, "hatch"), "build"), "targets"), "wheel")
    packages = hatch.get("packages")
    if isinstance(packages, list):
        roots |= {posixpath.dirname(p.rstrip("/")) for p in packages if isinstance(p, str)}
    poetry = _table(tool, "poetry").get("packages")
    if isinstance(poetry, list):
        roots |= {
            p["from"] for p in poetry if isinstance(p, dict) and isinstance(p.get("from"), str)
        }
    pdm = _table(_table(tool, "pdm"), "build").get("package-dir") or _table(tool, "pdm").get(
        "package-dir"
    )
    if isinstance(pdm, str):
        roots.add(pdm)
    return roots


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _table(value: Any, key: str) -> dict[str, Any]:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def _setup_cfg_roots(data: bytes) -> set[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8"))
    except (UnicodeDecodeError, configparser.Error):
        return set()
    roots: set[str] = set()
    if parser.has_option("options", "package_dir"):
        for line in parser.get("options", "package_dir").replace(";", "\n").splitlines():
            name, _, folder = line.partition("=")
            if name.strip() == "" and folder.strip():
                roots.add(folder)
    if parser.has_option("options.packages.find", "where"):
        roots |= set(parser.get("options.packages.find", "where").split())
    return roots


def _src_holding_packages(paths: frozenset[str]) -> set[str]:
    """``src`` when it holds a Python package or module the root does not also hold."""
    if "src/__init__.py" in paths:
        return set()  # src is itself a package
    at_root = {p.split("/")[0].removesuffix(".py") for p in paths}
    for path in paths:
        parts = path.split("/")
        if len(parts) >= 2 and parts[0] == "src" and path.endswith(".py"):
            top = parts[1].removesuffix(".py")
            if top.isidentifier() and top not in at_root:
                return {"src"}
    return set()
