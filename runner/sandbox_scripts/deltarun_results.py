"""The harness's pytest plugin: keep the declared tests, add the canaries, report each
outcome the moment pytest knows it, on a channel the test process cannot read back.

Loaded only by ``run_pytest.py``. It deselects every collected test that no
declared entry names (an entry is a node id, a file, or a ``file::Class``
prefix) and adds the harness's canaries to the modules of the declared test
files: tests that must pass, run first, and tests that must fail, run last. Their
names and places are the harness's secret (``runner.fixtures.declared.canaries``); a
test process that rewrites reports or patches pytest turns a must-fail canary
into a pass, which the harness sees.

Each record goes out as one JSON line, at once: ``collected`` (the items and the
file each test module was imported from), ``report`` (one per test phase),
``collect_error`` and ``finish``. The channel is a socket to a reader of another uid
(``collector.py``): what was sent is gone from this process, and what it sends
later cannot change it. Stdlib and pytest only; works with pytest >= 6.
"""

import json
import types
from typing import Any

import pytest  # the image's: imported before the repository root is on the import path


def _selected(nodeid: str, entries: "list[str]") -> bool:
    for entry in entries:
        entry = entry.rstrip("/")
        if nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "/"):
            return True
    return False


class Channel:
    """Write-only records to the harness's collector."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def send(self, record: "dict[str, Any]") -> None:
        # A newline before as well as after: a partial line someone else wrote on the
        # channel ends there, and never swallows the harness's record.
        data = ("\n" + json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # the collector is gone: the harness sees the missing records


def _phase_outcome(report: Any) -> str:
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        return str(report.outcome)
    if report.failed:
        return "error"
    return "skipped" if report.skipped else "passed"


def _canary(module: Any, spec: "dict[str, Any]") -> Any:
    """A test function in ``module``'s namespace, compiled under its file name."""
    obj = module.obj
    name = str(spec["name"])
    source = "def %s():\n    assert %d == %d\n" % (name, int(spec["left"]), int(spec["right"]))
    filename = getattr(obj, "__file__", None) or str(module.fspath)
    code = compile(source, filename, "exec")
    body = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    function = types.FunctionType(body, obj.__dict__, name)
    setattr(obj, name, function)
    return pytest.Function.from_parent(module, name=name, callobj=function)


class Recorder:
    def __init__(
        self, channel: Channel, select: "list[str]", canaries: "list[dict[str, Any]]"
    ) -> None:
        self.channel = channel
        self.select = list(select)
        self.canaries = list(canaries)

    # Last: after ``-k``, ``-m`` and every other selection, so nothing deselects a canary.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: "list[Any]") -> None:
        keep = [item for item in items if not self.select or _selected(item.nodeid, self.select)]
        drop = [item for item in items if self.select and not _selected(item.nodeid, self.select)]
        if drop:
            config.hook.pytest_deselected(items=drop)
        modules = {}  # type: dict[str, Any]
        # A test function's module first; a doctest's module only for a file without one.
        for item in sorted(keep, key=lambda i: not isinstance(i, pytest.Function)):
            module = item.getparent(pytest.Module)
            if module is not None:
                modules.setdefault(item.nodeid.split("::", 1)[0], module)
        first, last = [], []  # type: list[Any], list[Any]
        for spec in self.canaries:
            module = modules.get(str(spec["file"]))
            if module is not None:
                (last if spec["fail"] else first).append(_canary(module, spec))
        items[:] = first + keep + last
        files = {}  # type: dict[str, str]
        for path, module in modules.items():
            files[path] = str(getattr(module.obj, "__file__", "") or "")
        self.channel.send(
            {"t": "collected", "items": [item.nodeid for item in items], "modules": files}
        )

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.channel.send({"t": "collect_error", "n": report.nodeid})

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.channel.send(
            {"t": "report", "n": report.nodeid, "w": report.when, "o": _phase_outcome(report)}
        )

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        self.channel.send({"t": "finish", "status": int(exitstatus)})


def connect(path: str, wait_s: float = 30.0) -> Channel:
    """The channel to the collector, which may still be starting: retried for a while."""
    import socket
    import time

    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            sock.shutdown(socket.SHUT_RD)
            return Channel(sock)
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
