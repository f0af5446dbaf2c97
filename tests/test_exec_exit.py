"""An ended command's exit status (runner.sandbox.engine.exit_code): the engine may close a
command's output stream a moment before it records the exit. Read at once, a ``realpath``
that exited 0 came back as no status, and the model's tool call was refused as "cannot
resolve" (seen under a loaded engine in a test run: the agent's patch was never applied and
the trial a miss). The status is waited for, briefly and boundedly."""

from __future__ import annotations

from typing import Any

from runner.sandbox.engine import exit_code


class Engine:
    """``exec_inspect`` as the engine answers it: still running for ``late`` calls."""

    def __init__(self, late: int, code: int | None = 0) -> None:
        self.late, self.code, self.calls = late, code, 0

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.late:
            return {"Running": True, "ExitCode": None}
        return {"Running": False, "ExitCode": self.code}


def test_a_status_recorded_late_is_waited_for() -> None:
    engine = Engine(late=3, code=0)
    assert exit_code(engine, "e1") == 0  # type: ignore[arg-type]
    assert engine.calls == 4
    assert exit_code(Engine(late=0, code=7), "e2") == 7  # type: ignore[arg-type]


def test_a_status_that_never_comes_is_none_within_the_bound() -> None:
    engine = Engine(late=10**9)
    assert exit_code(engine, "e3", within_s=0.2) is None  # type: ignore[arg-type]
    assert engine.calls > 1  # asked again before giving up
