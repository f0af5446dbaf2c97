"""The runners a task's declared tests run under, and what the harness hands each. Pure.

Every runner's declared tests are written the same way, as pytest node ids relative to
the repository root: ``path/to/test_x.py::Class::test_y``, ``path/to/test_x.py::test_y``,
a ``file::Class`` or a whole file. Every runner reports on the same channel, in the same
records, to the same collector (``runner.grading.verdict``), and gets the same canaries
(``runner.grading.canaries``) in the same root-owned files; only the launcher differs:

==========  ==================  =======================================================
runner      launcher            how the declared tests are run
==========  ==================  =======================================================
pytest      ``run_pytest.py``   the harness's pytest, the plugin keeps the selection
unittest    ``run_unittest.py`` ``unittest.main`` on dotted labels (``pkg.test_x.C.test_y``)
django      ``run_unittest.py`` the project's ``tests/runtests.py`` (pristine, root-owned)
                                with ``--verbosity 2 --parallel 1`` and dotted labels
                                relative to ``tests/`` (``app.tests.C.test_y``), as
                                SWE-bench runs Django
sympy       ``run_sympy.py``    sympy's own runner (what ``bin/test`` calls) on the
                                declared files, in the launcher's process
==========  ==================  =======================================================

The unittest launcher selects by node id again when the runner hands unittest its suite,
so a label that loads more (a module) runs only the selection.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from runner.records import RepoTask

LAUNCHERS = {
    "pytest": "run_pytest.py",
    "unittest": "run_unittest.py",
    "django": "run_unittest.py",
    "sympy": "run_sympy.py",
}
DJANGO_TOP = "tests"
DJANGO_SCRIPT = f"{DJANGO_TOP}/runtests.py"
DJANGO_SETTINGS = "test_sqlite"  # runtests.py's default


def launcher(task: RepoTask) -> str:
    return LAUNCHERS[task.test_runner]


def django_settings(args: Sequence[str]) -> str:
    """The settings module a ``runtests.py`` command names (``--settings=X`` or
    ``--settings X``), else its default."""
    for index, arg in enumerate(args):
        if arg.startswith("--settings="):
            return arg.split("=", 1)[1]
        if arg == "--settings" and index + 1 < len(args):
            return args[index + 1]
    return DJANGO_SETTINGS


def runner_files(task: RepoTask) -> tuple[str, ...]:
    """The fixture's files the runner itself reads, copied pristine and root-owned into the
    verify sandbox as the declared test files are: Django's ``runtests.py`` and the
    settings module it is given. Nothing for pytest (its settings are handed with ``-c``)."""
    if task.test_runner != "django":
        return ()
    settings = django_settings(task.runner_args).replace(".", "/")
    return (DJANGO_SCRIPT, f"{DJANGO_TOP}/{settings}.py")


def harness_paths(task: RepoTask) -> tuple[str, ...]:
    """The declared entries and the runner's files: every fixture file these name is the
    harness's in the verify sandbox (``runner.trees.declared.holds_declared``)."""
    return (*(task.hidden_tests or ()), *runner_files(task))


def label(entry: str, tops: Sequence[str]) -> str:
    """The dotted unittest label of a node id, file or ``file::Class`` entry, its module
    named from the first of ``tops`` (folders relative to the root) the file is under."""
    file, _, rest = entry.partition("::")
    module = file[:-3] if file.endswith(".py") else file
    if module.endswith("/__init__"):
        module = module[: -len("/__init__")]
    for top in tops:
        if top and module.startswith(top.rstrip("/") + "/"):
            module = module[len(top.rstrip("/")) + 1 :]
            break
    parts = [module.replace("/", "."), *(p for p in rest.split("::") if p)]
    return ".".join(parts)


def spec(
    task: RepoTask,
    select: Sequence[str],
    *,
    channel: str,
    rootdir: str,
    paths: Sequence[str],
    user_site: bool,
) -> dict[str, Any]:
    """What a launcher other than pytest's reads on its standard input."""
    declared = task.hidden_tests or ()
    files = list(dict.fromkeys(entry.split("::", 1)[0] for entry in declared))
    common: dict[str, Any] = {
        "channel": channel,
        "rootdir": rootdir,
        "paths": list(paths),
        "user_site": user_site,
        "select": list(select),
        "args": list(task.runner_args),
    }
    if task.test_runner == "sympy":
        return {**common, "files": files}
    roots = [posixpath.relpath(p, rootdir) for p in paths if p.startswith(rootdir + "/")]
    if task.test_runner == "django":
        tops = [DJANGO_TOP]
        script = f"{rootdir}/{DJANGO_SCRIPT}"
    else:
        tops = [*roots, ""]
        script = ""
    labels = list(dict.fromkeys(label(entry, tops) for entry in select))
    return {**common, "mode": task.test_runner, "tops": tops, "script": script, "labels": labels}
