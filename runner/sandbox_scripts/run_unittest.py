"""Run the declared tests under unittest, or Django's ``tests/runtests.py``, and report
each outcome to the harness's collector, as ``run_pytest.py`` does for pytest.

Runs in the verify sandbox as the test's uid with the image's python3:
``python3 -B -s run_unittest.py < spec.json``. The spec comes on standard input (read,
then closed, before any code under test is imported)::

    {"channel": ".../channel.sock", "rootdir": "/workspace",
     "mode": "unittest" or "django",
     "tops": [the folders module names start in, relative to rootdir: "tests" for Django],
     "paths": [folders put first on the import path],
     "user_site": whether the task's install step put the project in the user site,
     "script": the project's runner (Django: /workspace/tests/runtests.py),
     "args": [the runner's options], "labels": [dotted test labels to load],
     "select": [node ids file.py::Class::test, files or file::Class: the declared tests
                and the canaries, as one]}

The records are the pytest plugin's (``deltarun_results.py``): ``start`` before anything
of the workspace runs; ``collected`` when the runner hands its suite to
``unittest.TextTestRunner.run`` (the tests kept, and the file each test module was
imported from); one ``report`` per test (phase ``call``, and ``teardown`` for a class or
module fixture that failed after it ran); ``collect_error`` for a module that did not
import; ``finish`` with the result's status. Node ids are ``file.py::Class::method``,
the file named from the module's dotted name, so a module imported from elsewhere shows.
Stdlib only; Python >= 3.6.
"""

import os
import sys
from typing import Any

# The harness's own modules, beside this one; the folder leaves the import path again.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltarun_channel

del sys.path[0]


def _flatten(suite: Any, out: "list[Any]") -> "list[Any]":
    """Every test case of a (nested) suite, in order."""
    import unittest

    if isinstance(suite, unittest.TestCase) or not hasattr(suite, "__iter__"):
        out.append(suite)
        return out
    for child in suite:
        _flatten(child, out)
    return out


class Session(object):
    """What the launcher knows of the run: the collected tests, what was reported."""

    def __init__(self, channel: Any, spec: "dict[str, Any]") -> None:
        self.channel = channel
        self.rootdir = spec["rootdir"]
        self.tops = list(spec.get("tops") or [""])
        self.select = list(spec["select"])
        self.ids = {}  # type: dict[int, str]  # id(test) -> node id
        self.items = []  # type: list[str]
        self.outcome = {}  # type: dict[str, str]
        self.reported = set()  # type: set[tuple[str, str]]
        self.collected = False
        self.finished = False
        self.status = None  # type: int | None
        self.failed_fixture = False

    def file_of(self, module_name: str, module_file: Any) -> str:
        """The repository-relative file a module name stands for: where it must come from."""
        tail = module_name.replace(".", "/")
        init = str(module_file or "").endswith("__init__.py")
        for top in self.tops:
            base = os.path.join(top, tail) if top else tail
            path = base + ("/__init__.py" if init else ".py")
            if os.path.exists(os.path.join(self.rootdir, path)):
                return path
        top = self.tops[0]
        base = os.path.join(top, tail) if top else tail
        return base + ("/__init__.py" if init else ".py")

    def nodeid(self, test: Any) -> "tuple[str | None, Any]":
        cls = type(test)
        method = getattr(test, "_testMethodName", None)
        if not method:
            return None, None
        module = sys.modules.get(cls.__module__)
        module_file = getattr(module, "__file__", None)
        file = self.file_of(cls.__module__, module_file)
        return "%s::%s::%s" % (file, cls.__qualname__, method), module_file

    def collect(self, suite: Any) -> Any:
        """The tests to run (the selected ones) and the ``collected`` record."""
        import unittest

        kept = []  # type: list[Any]
        modules = {}  # type: dict[str, str]
        for test in _flatten(suite, []):
            name = type(test).__name__
            if name in ("_FailedTest", "ModuleImportFailure", "_ErrorHolder"):
                self.channel.send({"t": "collect_error", "n": str(test.id())[:500]})
                continue
            nodeid, module_file = self.nodeid(test)
            if nodeid is None or not deltarun_channel.selected(nodeid, self.select):
                continue
            self.ids[id(test)] = nodeid
            kept.append(test)
            file = nodeid.split("::", 1)[0]
            if file not in modules:
                modules[file] = str(module_file or "")
        self.items = [self.ids[id(t)] for t in kept]
        self.collected = True
        self.channel.send({"t": "collected", "items": self.items, "modules": modules})
        return unittest.TestSuite(kept)

    def note(self, test: Any, outcome: str) -> None:
        nodeid = self.ids.get(id(test))
        if nodeid is None:
            return
        rank = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}
        previous = self.outcome.get(nodeid)
        if previous is None or rank[outcome] > rank[previous]:
            self.outcome[nodeid] = outcome

    def report(self, test: Any) -> None:
        nodeid = self.ids.get(id(test))
        if nodeid is None or (nodeid, "call") in self.reported:
            return
        self.reported.add((nodeid, "call"))
        outcome = self.outcome.get(nodeid, "passed")
        self.channel.send({"t": "report", "n": nodeid, "w": "call", "o": outcome})

    def fixture_failed(self, description: str) -> None:
        """A class or module fixture failed (``setUpClass (module.Class)``): its tests that
        did not run are errors; those that ran get a failing teardown."""
        self.failed_fixture = True
        inner = description[description.find("(") + 1 : description.rfind(")")]
        if not inner:
            inner = description
        for nodeid in self.items:
            file, rest = nodeid.split("::", 1)
            cls = rest.split("::", 1)[0]
            dotted = file[:-3].replace("/", ".")
            # The module (setUpModule) or the class (setUpClass), named whole: the file's
            # dotted path holds the folder the runner's labels start in too.
            names = (dotted, dotted + "." + cls)
            if not any(n == inner or n.endswith("." + inner) for n in names):
                continue
            if (nodeid, "call") not in self.reported:
                self.reported.add((nodeid, "call"))
                self.channel.send({"t": "report", "n": nodeid, "w": "call", "o": "error"})
            elif (nodeid, "teardown") not in self.reported:
                self.reported.add((nodeid, "teardown"))
                self.channel.send({"t": "report", "n": nodeid, "w": "teardown", "o": "error"})

    def finish(self, result: Any) -> None:
        if self.finished:
            return
        self.finished = True
        self.status = 0 if result.wasSuccessful() and not self.failed_fixture else 1
        self.channel.send({"t": "finish", "status": self.status})


def _reporting(base: Any, session: Session) -> Any:
    """A subclass of the runner's result class that tells ``session`` every outcome."""

    class Reporting(base):  # type: ignore[misc]
        def addSuccess(self, test: Any) -> Any:
            session.note(test, "passed")
            return super(Reporting, self).addSuccess(test)

        def addFailure(self, test: Any, err: Any) -> Any:
            session.note(test, "failed")
            return super(Reporting, self).addFailure(test, err)

        def addError(self, test: Any, err: Any) -> Any:
            if type(test).__name__ == "_ErrorHolder":
                session.fixture_failed(str(getattr(test, "description", "")))
            else:
                session.note(test, "error")
            return super(Reporting, self).addError(test, err)

        def addSkip(self, test: Any, reason: Any) -> Any:
            session.note(test, "skipped")
            return super(Reporting, self).addSkip(test, reason)

        def addExpectedFailure(self, test: Any, err: Any) -> Any:
            session.note(test, "xfailed")
            return super(Reporting, self).addExpectedFailure(test, err)

        def addUnexpectedSuccess(self, test: Any) -> Any:
            session.note(test, "failed")  # unittest counts it as a failure
            return super(Reporting, self).addUnexpectedSuccess(test)

        def addSubTest(self, test: Any, subtest: Any, err: Any) -> Any:
            if err is not None:
                failure = issubclass(err[0], test.failureException)
                session.note(test, "failed" if failure else "error")
            return super(Reporting, self).addSubTest(test, subtest, err)

        def stopTest(self, test: Any) -> Any:
            session.report(test)
            return super(Reporting, self).stopTest(test)

    return Reporting


def _patch(session: Session) -> None:
    """Route ``unittest.TextTestRunner.run`` (what unittest's main and Django's
    DiscoverRunner call) through the session: select, report, finish."""
    import unittest

    original = unittest.TextTestRunner.run

    def run(self: Any, test: Any) -> Any:
        suite = session.collect(test)
        self.resultclass = _reporting(self.resultclass or unittest.TextTestResult, session)
        result = original(self, suite)
        session.finish(result)
        return result

    unittest.TextTestRunner.run = run  # type: ignore[method-assign]


def main() -> None:
    spec, channel = deltarun_channel.start()
    session = Session(channel, spec)
    _patch(session)
    rootdir = spec["rootdir"]
    os.chdir(rootdir)
    deltarun_channel.add_user_site(spec)
    labels = list(spec["labels"])
    code = 1
    try:
        if spec["mode"] == "django":
            import runpy

            script = spec["script"]
            # As `./tests/runtests.py` would: its folder first on the import path, then
            # the repository root (the project itself, as an install would give it).
            sys.path[0:0] = [os.path.dirname(script), rootdir, *spec.get("paths", [])]
            sys.argv = [script, *spec["args"], "--verbosity", "2", "--parallel", "1"]
            sys.argv += ["--noinput", *labels]
            runpy.run_path(script, run_name="__main__")
            code = 0
        else:
            import unittest

            sys.path[0:0] = [rootdir, *spec.get("paths", [])]
            program = unittest.main(
                module=None, argv=["python -m unittest", "-v", *labels], exit=False
            )
            code = 0 if program.result.wasSuccessful() else 1
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    # The status the runner's result gave, as sent; a runner that never ran its suite fails.
    os._exit(session.status if session.status is not None else (int(code) or 1))


if __name__ == "__main__":
    main()
