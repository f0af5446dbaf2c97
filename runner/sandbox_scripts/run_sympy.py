"""Run the declared test files under sympy's own test runner and report each outcome to
the harness's collector, as ``run_pytest.py`` does for pytest.

Runs in the verify sandbox as the test's uid with the image's python3:
``python3 -B -s run_sympy.py < spec.json``. The spec comes on standard input (read, then
closed, before any code under test is imported)::

    {"channel": ".../channel.sock", "rootdir": "/workspace",
     "paths": [folders put first on the import path],
     "user_site": whether the task's install step put the project in the user site,
     "files": [the declared test files, repository-relative],
     "args": [the runner's options: "-C" turns sympy's cache off],
     "select": [node ids file.py::test_x, or files: the declared tests and the canaries]}

sympy's runner (``sympy.testing.runtests``, ``sympy.utilities.runtests`` before 1.6) is
what ``bin/test`` calls; here it runs in this process (``subprocess=False``) so its
reporter can be followed: each test function's outcome is sent as the reporter learns
it. The ``collected`` record lists the module-level ``test_*`` functions of each file, read
from the file's source (sympy executes a test file's source rather than importing it,
so that file is the one on disk). Stdlib and sympy only; Python >= 3.6.
"""

import ast
import os
import sys
from typing import Any

# The harness's own modules, beside this one; the folder leaves the import path again.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltarun_channel

del sys.path[0]


def _functions(path: str) -> "list[str]":
    """The module-level test functions sympy collects from a file (``test_*``)."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return []
    kinds = (ast.FunctionDef, getattr(ast, "AsyncFunctionDef", ast.FunctionDef))
    names = [n.name for n in tree.body if isinstance(n, kinds) and n.name.startswith("test_")]
    return list(dict.fromkeys(names))


class Session(object):
    def __init__(self, channel: Any, spec: "dict[str, Any]") -> None:
        self.channel = channel
        self.rootdir = spec["rootdir"]
        self.items = []  # type: list[str]
        self.by_path = {}  # type: dict[str, str]  # absolute file -> relative
        modules = {}  # type: dict[str, str]
        for file in spec["files"]:
            path = os.path.join(self.rootdir, file)
            self.by_path[os.path.normcase(os.path.abspath(path))] = file
            modules[file] = path
            for name in _functions(path):
                nodeid = "%s::%s" % (file, name)
                if deltarun_channel.selected(nodeid, spec["select"]):
                    self.items.append(nodeid)
        self.modules = modules
        self.known = set(self.items)
        self.file = None  # type: str | None
        self.current = None  # type: str | None
        self.sent = set()  # type: set[str]
        self.failing = False

    def collected(self) -> None:
        self.channel.send({"t": "collected", "items": self.items, "modules": self.modules})

    def entering(self, filename: Any) -> None:
        key = os.path.normcase(os.path.abspath(str(filename)))
        self.file = self.by_path.get(key)
        self.current = None

    def test(self, function: Any) -> None:
        name = getattr(function, "__name__", "")
        self.current = None
        if self.file is not None:
            nodeid = "%s::%s" % (self.file, name)
            if nodeid in self.known and nodeid not in self.sent:
                self.current = nodeid

    def outcome(self, value: str) -> None:
        if value in ("failed", "error"):
            self.failing = True
        if self.current is None:
            if value == "error" and self.file is not None:  # the file's own code failed
                self.channel.send({"t": "collect_error", "n": self.file})
            return
        self.sent.add(self.current)
        self.channel.send({"t": "report", "n": self.current, "w": "call", "o": value})
        self.current = None


def _follow(reporter_class: Any, session: Session) -> None:
    """Tell ``session`` what sympy's reporter learns, then let the reporter do its part."""

    def wrap(name: str, before: Any) -> None:
        original = getattr(reporter_class, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            before(*args)
            return original(self, *args, **kwargs)

        setattr(reporter_class, name, method)

    wrap("entering_filename", lambda filename, *rest: session.entering(filename))
    wrap("entering_test", lambda function, *rest: session.test(function))
    wrap("test_pass", lambda *rest: session.outcome("passed"))
    wrap("test_fail", lambda *rest: session.outcome("failed"))
    wrap("test_exception", lambda *rest: session.outcome("error"))
    wrap("test_skip", lambda *rest: session.outcome("skipped"))
    wrap("test_xfail", lambda *rest: session.outcome("xfailed"))
    wrap("test_xpass", lambda *rest: session.outcome("xpassed"))

    original = reporter_class.import_error

    def import_error(self: Any, filename: Any, exc_info: Any) -> Any:
        key = os.path.normcase(os.path.abspath(str(filename)))
        session.failing = True
        session.channel.send({"t": "collect_error", "n": session.by_path.get(key, "?")})
        return original(self, filename, exc_info)

    reporter_class.import_error = import_error


def main() -> None:
    spec, channel = deltarun_channel.start()
    rootdir = spec["rootdir"]
    os.chdir(rootdir)
    if "-C" in spec["args"] or "--no-cache" in spec["args"]:
        os.environ["SYMPY_USE_CACHE"] = "no"  # what bin/test -C sets
    sys.path[0:0] = [rootdir, *spec.get("paths", [])]
    deltarun_channel.add_user_site(spec)
    session = Session(channel, spec)
    try:
        from sympy.testing import runtests
    except ImportError:
        from sympy.utilities import runtests
    _follow(runtests.PyTestReporter, session)
    session.collected()
    ok = False
    try:
        ok = runtests.test(*spec["files"], subprocess=False, verbose=True, colors=False)
    except SystemExit:
        ok = False
    status = 0 if ok and not session.failing else 1
    channel.send({"t": "finish", "status": status})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
