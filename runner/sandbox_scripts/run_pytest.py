"""Start pytest for the verify phase the way the harness decides, and report its results.

Runs in the verify sandbox as the test's uid with the image's python3:
``python3 -B -s run_pytest.py < spec.json``. The spec comes on standard input
(read, then closed, before any code under test is imported)::

    {"channel": ".../channel.sock", "rootdir": "/workspace",
     "paths": [the project's package folders, after the root on the import path],
     "user_site": whether the task's install step put the project in the user site,
     "select": [test ids, files or classes: the declared tests and the canaries, as one],
     "args": [pytest arguments]}

Before anything of the workspace is imported, it connects to the harness's
collector (``collector.py``, another uid) and says ``start``; the plugin
(``deltarun_results.py``) then sends each outcome on that socket as pytest
learns it. A process that ends early leaves its records incomplete, and the
harness counts the trial as a miss. Stdlib and pytest only; Python >= 3.6, pytest >= 6.

A project that ships its own copy of a package the harness's pytest already imported
(pytest itself, pluggy, ...) cannot be graded with it: its copy would never be what runs.
Then no test runs; one ``deltarun: the project ships its own ...`` line says why.
"""

import importlib.machinery
import os
import sys
from typing import Any


def main() -> None:
    before = set(sys.modules)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import deltarun_channel
    import deltarun_results

    del sys.path[0]
    harness = sorted(set(sys.modules) - before)  # pytest and what it runs on, the image's
    spec, channel = deltarun_channel.start()
    # The repository root first on the import path, as `python -m pytest` run from it, then
    # the folders the project's packaging metadata declares (a src/ layout), as an install
    # would (pytest itself was imported from the image by the plugin, before this).
    sys.path[0:0] = [spec["rootdir"], *spec.get("paths", [])]
    deltarun_channel.add_user_site(spec)
    for name, where in shadowed(harness, spec["rootdir"]):
        # The workspace's copy can never be imported now: the tests would grade the image's.
        sys.stderr.write(
            "deltarun: the project ships its own %s (%s); the harness's pytest imported the "
            "image's first, so the project's copy cannot run\n" % (name, where)
        )
        sys.stderr.flush()
        sys.exit(4)
    import pytest

    recorder = deltarun_results.Recorder(channel, spec["select"])
    code = pytest.main(list(spec["args"]), plugins=[recorder])
    sys.stdout.flush()
    sys.exit(int(code))


def shadowed(names: "list[str]", rootdir: str) -> "list[tuple[str, str]]":
    """The top-level packages of ``names`` (imported from the image's site-packages) that
    the workspace provides too, as packages, on the import path or through an editable
    install's finder: each with its ``__init__`` file. Namespace folders and single
    modules are left alone."""
    root = os.path.realpath(rootdir)

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return real == root or real.startswith(root + os.sep)

    workspace = [entry for entry in sys.path if entry and inside(entry)]
    found = []
    for name in names:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        if "." in name or not origin or inside(origin):
            continue
        if "site-packages" not in origin and "dist-packages" not in origin:
            continue  # the standard library
        where = _origin(importlib.machinery.PathFinder.find_spec(name, workspace))
        if where is None:
            where = _editable(name, inside)
        if where is not None:
            found.append((name, where))
    return found


def _editable(name: str, inside: "Any") -> "str | None":
    """Where an editable install's finder (``sys.meta_path``) finds ``name`` in the
    workspace, if one does."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None or finder is importlib.machinery.PathFinder:
            continue
        try:
            where = _origin(find(name, None))
        except Exception:
            continue
        if where is not None and inside(where):
            return where
    return None


def _origin(spec: "object") -> "str | None":
    """The ``__init__`` file of a regular package's spec; None for anything else (a single
    module such as a vendored ``six.py`` is the image's copy's twin, not the project)."""
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or getattr(spec, "submodule_search_locations", None) is None:
        return None
    return origin if os.path.basename(origin).startswith("__init__.") else None


if __name__ == "__main__":
    main()
