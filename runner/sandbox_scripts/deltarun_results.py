"""The harness's pytest plugin: keep the declared tests, record each one's outcome.

Loaded only by ``run_pytest.py``. It deselects every collected test that no
declared entry names (an entry is a node id, a file, or a ``file::Class``
prefix), records the outcome of every test phase, and writes one JSON object
at the end of the session: the nonce it was given, the exit status pytest
reports and each test's outcome. Stdlib only; works with pytest >= 6.
"""

import json
import os
from typing import Any

_RANK = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}


def _selected(nodeid: str, entries: "list[str]") -> bool:
    for entry in entries:
        entry = entry.rstrip("/")
        if nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "/"):
            return True
    return False


class Recorder:
    def __init__(self, nonce: str, path: str, select: "list[str]") -> None:
        self.nonce = nonce
        self.path = path
        self.select = list(select)
        self.tests: "dict[str, str]" = {}
        self.collect_errors: "list[str]" = []
        self.deselected = 0

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: "list[Any]") -> None:
        if not self.select:
            return
        keep = [item for item in items if _selected(item.nodeid, self.select)]
        drop = [item for item in items if not _selected(item.nodeid, self.select)]
        if drop:
            config.hook.pytest_deselected(items=drop)
            self.deselected += len(drop)
        items[:] = keep

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collect_errors.append(report.nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = "passed"
        # A test's outcome is its worst phase: a failing teardown fails a passing test.
        previous = self.tests.get(report.nodeid)
        if previous is None or _RANK[outcome] > _RANK[previous]:
            self.tests[report.nodeid] = outcome

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        data = {
            "nonce": self.nonce,
            "finished": True,
            "exitstatus": int(exitstatus),
            "tests": self.tests,
            "collect_errors": self.collect_errors,
            "deselected": self.deselected,
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, self.path)
