"""The harness's pytest plugin: keep the selected tests, report each outcome the moment
pytest knows it, on a channel the test process cannot read back.

Loaded only by ``run_pytest.py``. It deselects every collected test that no
selected entry names (an entry is a node id, a file, or a ``file::Class``
prefix). The selection is the declared tests and the harness's canaries in one
sorted list: the canaries are source text in the root-owned declared test files
(``runner.grading.canaries``), and nothing here says which tests they are. A test
named exactly by its node id runs even when the project's own ``-k`` or ``-m``
would deselect it; the rest of such narrowing is kept.

Each record goes out as one JSON line, at once: ``collected`` (the items and the
file each test module was imported from), ``report`` (one per test phase),
``collect_error`` and ``finish``. The channel is a socket to a reader of another uid
(``collector.py``): what was sent is gone from this process, and what it sends
later cannot change it. Stdlib and pytest only; works with pytest >= 6.
"""

from typing import Any

import pytest  # the image's: imported before the repository root is on the import path
from deltarun_channel import Channel, connect, selected

__all__ = ["Channel", "Recorder", "connect"]


def _phase_outcome(report: Any) -> str:
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        return str(report.outcome)
    if report.failed:
        return "error"
    return "skipped" if report.skipped else "passed"


class Recorder:
    def __init__(self, channel: Channel, select: "list[str]") -> None:
        self.channel = channel
        self.select = list(select)
        self.exact = set(select)

    # Around every other selection (``-k``, ``-m``, the project's hooks): a test named by
    # its node id is kept whatever they did; everything else they dropped stays dropped.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: "list[Any]") -> Any:
        before = list(items)
        yield
        survived = {id(item) for item in items}
        keep = [item for item in items if not self.select or selected(item.nodeid, self.select)]
        keep += [item for item in before if id(item) not in survived and item.nodeid in self.exact]
        kept = {id(item) for item in keep}
        drop = [item for item in items if id(item) not in kept]
        if drop:
            config.hook.pytest_deselected(items=drop)
        modules = {}  # type: dict[str, Any]
        # A test function's module first; a doctest's module only for a file without one.
        for item in sorted(keep, key=lambda i: not isinstance(i, pytest.Function)):
            module = item.getparent(pytest.Module)
            if module is not None:
                modules.setdefault(item.nodeid.split("::", 1)[0], module)
        items[:] = keep
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
