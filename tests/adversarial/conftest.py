"""The adversarial suite: one hostile agent per attack, each run through `execute_trial`.

Every test calls `held(attack, tried, happened)`; the terminal summary prints the
table (attack, what was tried, what happened, held yes/no). `make adversarial`
runs only this folder; `make test` runs it with everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from tests.adversarial.support import Listener

_ROWS: dict[str, dict[str, str]] = {}


@pytest.fixture
def held(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record this test's row of the table; 'held' is filled from the test's result.

    ``residual=True`` marks an attack deltarun documents as *not* stopped
    (docs/verdicts-and-sandbox.md, "What remains the operator's job"): the test asserts
    that it still gets through, and the table says "no (documented)" so a reader never
    takes it for a defence.
    """

    def record(attack: str, tried: str, happened: str, *, residual: bool = False) -> None:
        _ROWS[request.node.nodeid] = {
            "attack": attack,
            "tried": tried,
            "happened": happened,
            "residual": "yes" if residual else "",
        }

    return record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and item.nodeid in _ROWS:
        row = _ROWS[item.nodeid]
        if not report.passed:
            row["held"] = "NO"
        else:
            row["held"] = "no (documented)" if row.get("residual") else "yes"
    elif report.when == "call" and report.failed:
        _ROWS.setdefault(item.nodeid, {"attack": item.name, "tried": "", "happened": "failed"})
        _ROWS[item.nodeid]["held"] = "NO"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ROWS:
        return
    rows = [r for _, r in sorted(_ROWS.items())]
    widths = {
        k: max(len(k), *(len(r.get(k, "")) for r in rows))
        for k in ("attack", "tried", "happened", "held")
    }
    widths["tried"] = min(widths["tried"], 60)
    widths["happened"] = min(widths["happened"], 70)
    line = "  ".join(f"{{{k}:<{w}}}" for k, w in widths.items())
    terminalreporter.section("adversarial suite")
    terminalreporter.write_line(
        line.format(attack="attack", tried="what was tried", happened="what happened", held="held")
    )
    for row in rows:
        terminalreporter.write_line(line.format(**{k: row.get(k, "")[: widths[k]] for k in widths}))


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A loopback server standing for what a suite must not reach (``support.Listener``)."""
    served = Listener()
    yield served
    served.server.shutdown()
    served.server.server_close()
